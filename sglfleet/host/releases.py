"""Releases on a host: the current and previous links, their records, and the host lock."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time

from .layout import LAYOUT, Layout


# The files a release's id is the digest of; gate.json and verdict.json are not.
ID_FILES = ("launch", "launch.args", "release.json")


class Busy(Exception):
    """Another run holds the host lock."""


def content_id(files: dict[str, bytes]) -> str:
    """
    The id (16 hex digits) a release's files make: a sha256 over ``launch``,
    ``launch.args`` and ``release.json`` without its own ``release_id``. The
    controller names a release with it; the host checks a release against it.

    + files: name -> bytes, for each of ``ID_FILES``

    **Example:**

    .. code:: python

        content_id({"launch": b"#!/bin/bash...", "launch.args": b"--tp-size 8\n", "release.json": b"{...}"})
    """
    meta = json.loads(files["release.json"])
    meta.pop("release_id", None)
    payload = {"launch": files["launch"].decode(), "launch.args": files["launch.args"].decode(), "meta": meta}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def matches_id(release_id: str, layout: Layout = LAYOUT) -> bool:
    """Whether a staged release's files still make its id (not edited on the host)."""
    try:
        files = {}
        for name in ID_FILES:
            with open(layout.release(release_id, name), "rb") as handle:
                files[name] = handle.read()
        return content_id(files) == release_id
    except (OSError, ValueError, KeyError, UnicodeDecodeError):
        return False


def release_id_of(link: str) -> str | None:
    """The release a link points at, or None."""
    try:
        return os.path.basename(os.readlink(link))
    except OSError:
        return None


def point(link: str, release_id: str | None) -> None:
    """Point ``link`` at ``releases/<release_id>`` with rename(2): never rm + ln."""
    if release_id is None:
        if os.path.lexists(link):
            os.unlink(link)
        return
    temporary = f"{link}.new"
    if os.path.lexists(temporary):
        os.unlink(temporary)
    os.symlink(os.path.join("releases", release_id), temporary)
    os.rename(temporary, link)


def staged(release_id: str, layout: Layout = LAYOUT) -> bool:
    return os.path.isfile(layout.release(release_id, "release.json"))


def read(release_id: str, name: str, layout: Layout = LAYOUT, default=None):
    """A JSON file of a release (``release.json``, ``gate.json``, ``verdict.json``), or ``default``."""
    try:
        with open(layout.release(release_id, name)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def write(release_id: str, name: str, data: dict, layout: Layout = LAYOUT) -> None:
    """Write a JSON file of a release atomically (a temporary beside it, then rename)."""
    path = layout.release(release_id, name)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.chmod(temporary, 0o644)
    os.rename(temporary, path)


def record(release_id: str, stage: str, result: dict, layout: Layout = LAYOUT) -> None:
    """Record a stage's result (``startup`` or ``bake``) in the release's ``verdict.json``."""
    verdict = read(release_id, "verdict.json", layout, default={}) or {}
    verdict[stage] = {**result, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write(release_id, "verdict.json", verdict, layout)


def collect(keep: int, layout: Layout = LAYOUT) -> list[str]:
    """
    Remove staged releases but the current, the previous and the ``keep`` newest
    others (by the time they were staged); return the ids removed.
    """
    pinned = {release_id_of(layout.current), release_id_of(layout.previous)}
    try:
        names = [name for name in os.listdir(layout.releases) if not name.startswith(".") and name not in pinned]
    except OSError:
        return []
    names.sort(key=lambda name: os.path.getmtime(os.path.join(layout.releases, name)), reverse=True)
    for name in names[keep:]:
        shutil.rmtree(os.path.join(layout.releases, name), ignore_errors=True)
    return names[keep:]


@contextlib.contextmanager
def locked(wait_s: float, layout: Layout = LAYOUT):
    """Hold the host lock, waiting up to ``wait_s`` for another run; raise ``Busy`` after that."""
    os.makedirs(os.path.dirname(layout.lock), exist_ok=True)
    with open(layout.lock, "w") as lock:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Busy(f"another sglfleet run holds {layout.lock} (waited {wait_s:g} s); "
                               f"try again when it ends") from None
                time.sleep(0.5)
        yield
