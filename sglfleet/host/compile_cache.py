"""
Compile caches shared between hosts, so that one host compiles a stack's
kernels and the later hosts of a rollout start warm.

The launcher points every JIT of the server (triton, torch inductor,
flashinfer, tvm-ffi, DeepGEMM, CUDA's compute cache) at
``/var/cache/sglang/compile/<stack-id>/``. A host that passed its gate packs
that folder into ``/opt/sglfleet/compile-caches/<key>.tar``; a later host
whose key is the same fetches it from the hosts that hold it (aria2c, checked
by sha256 on arrival) and adds its files to its own folder before its restart.
The key is the stack, the GPUs' architecture and the driver, so kernels never
cross any of them, and a named service's name (``Layout.compile_key``): each of
a host's services compiles for its own launch, into its own folder
(``/var/cache/sglang-<name>/compile/<stack-id>/``, with ``--service <name>``),
and hands on its own archive. An archive under another key is refused here
too, whatever the controller asked.

An archive is a tar of plain files only; its first member, ``MANIFEST``, names
its key and each file's size, sha256 and mtime (in nanoseconds: ninja judges by it). Unpacking takes nothing that is not
in the manifest, no link, device or absolute path, no ``..``; it adds files the
host lacks and keeps the ones it has (the caches are content-addressed), each
written beside its place and renamed, owned by the service user. The files it
added are recorded, so ``drop`` can take them out again when a start with them
failed: the host then compiles cold, as if nothing had been shared.

    sglfleet-release cache pack STACK_ID
    sglfleet-release cache fetch STACK_ID --key KEY --sha256 SHA --peer http://node1:30091 [--peer ...]
    sglfleet-release cache drop STACK_ID
    sglfleet-release --service NAME cache pack STACK_ID   # one of a host's named services

Standard library only, run as root by the host tool. Each prints one
``sglfleet-result`` line; exit 0 done, 2 refused (nothing changed).

**Example:**

.. code:: python

    cache_key("cu130-sglang-0.5.9-1a2b3c4d", [("9.0", "580.95.05")] * 8)
    # "cu130-sglang-0.5.9-1a2b3c4d+sm90+580.95.05"
"""

from __future__ import annotations

import argparse
import io
import json
import os
import posixpath
import pwd
import shlex
import shutil
import subprocess
import sys
import tarfile
import time

from .aria2 import aria2_command, aria2_input, sha256_of
from .layout import LAYOUT, STALE_MINUTES, Layout
from .protocol import PASSED, USAGE, result_line

MANIFEST = "MANIFEST"
IMPORTED = ".sglfleet-imported.json"
CHUNK = 8 << 20


class Refused(Exception):
    """An archive this host must not use: another key, a bad member, a failed check."""


def cache_key(stack_id: str, gpus: list[tuple[str, str]]) -> str:
    """
    The key under which compile caches may be shared: the stack, the GPUs'
    compute capabilities and the driver. ``cpu`` where the host has no GPU.

    + stack_id: the stack the server runs
    + gpus: ``(compute capability, driver version)`` of each GPU, as nvidia-smi reports them
    """
    if not gpus:
        return f"{stack_id}+cpu"
    arch = "-".join(sorted({f"sm{cap.replace('.', '')}" for cap, _ in gpus}))
    drivers = "-".join(sorted({driver for _, driver in gpus}))
    return f"{stack_id}+{arch}+{drivers}"  # stack ids hold dots and dashes, never "+"


def local_gpus() -> list[tuple[str, str]]:
    """This host's GPUs as ``cache_key`` takes them; [] without nvidia-smi or a loaded driver."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    pairs = [tuple(field.strip() for field in line.split(",")) for line in out.stdout.splitlines()]
    return [pair for pair in pairs if len(pair) == 2 and pair[0][:1].isdigit()] if out.returncode == 0 else []


def _files(folder: str) -> list[str]:
    """The plain files under ``folder``, relative, sorted; the record of what was imported left out."""
    found = []
    for top, dirs, names in os.walk(folder):
        dirs.sort()
        for name in names:
            path = os.path.join(top, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(os.path.relpath(path, folder))
    return sorted(name for name in found if name != IMPORTED)


def pack(stack_id: str, layout: Layout = LAYOUT, gpus=None) -> dict:
    """
    Pack the service's compile caches for ``stack_id`` into its archive, written
    beside it and renamed; the result record (no archive when the folder is empty).
    """
    key = layout.compile_key(cache_key(stack_id, local_gpus() if gpus is None else gpus))
    folder = layout.compile_cache(stack_id)
    names = _files(folder) if os.path.isdir(folder) else []
    if not names:
        return {"stage": "cache", "packed": False, "key": key}
    # Each file's mtime travels to the nanosecond: ninja (flashinfer's and tvm-ffi's JITs) rebuilds an
    # output whose mtime is not the one its .ninja_deps recorded, as an H200 showed with 0.5.14.
    entries = {name: [os.path.getsize(os.path.join(folder, name)), sha256_of(os.path.join(folder, name)),
                      os.stat(os.path.join(folder, name)).st_mtime_ns] for name in names}
    os.makedirs(layout.compile_archives, mode=0o755, exist_ok=True)
    final = layout.compile_archive(key)
    temporary = posixpath.join(layout.compile_archives, f".{key}.tar.{os.getpid()}.tmp")
    manifest = json.dumps({"key": key, "files": entries}, sort_keys=True).encode()
    with tarfile.open(temporary, "w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mode = len(manifest), 0o644
        archive.addfile(info, io.BytesIO(manifest))
        for name in names:
            info = tarfile.TarInfo(name)
            info.size, info.mode = entries[name][0], 0o600
            with open(os.path.join(folder, name), "rb") as handle:
                archive.addfile(info, handle)
    os.chmod(temporary, 0o644)
    os.rename(temporary, final)
    _collect_archives(layout, keep=final)
    return {"stage": "cache", "packed": True, "key": key, "sha256": sha256_of(final),
            "bytes": os.path.getsize(final), "files": len(names)}


def _collect_archives(layout: Layout, keep: str) -> None:
    """Remove the archives of stacks no longer on the host, and what killed packs and fetches left."""
    stacks = set(os.listdir(layout.stacks)) if os.path.isdir(layout.stacks) else set()
    stale = time.time() - STALE_MINUTES * 60
    for name in os.listdir(layout.compile_archives):
        path = posixpath.join(layout.compile_archives, name)
        leftover = name.startswith(".") or name.endswith((".part", ".aria2"))
        if path == keep or (leftover and os.path.getmtime(path) > stale):
            continue  # another run's pack or fetch may be writing it
        if leftover or name.split("+", 1)[0] not in stacks:
            try:
                os.remove(path)
            except OSError:
                pass


def _safe(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and all(part not in ("", ".", "..") for part in parts)


def read_archive(path: str, key: str) -> tuple[tarfile.TarFile, dict]:
    """
    Open an archive and check it before anything is written: the manifest's key is
    ``key``, and every other member is a plain file of the manifest, with its size.
    """
    try:
        archive = tarfile.open(path, "r:")
        members = archive.getmembers()
        if not members or members[0].name != MANIFEST or not members[0].isfile():
            raise Refused("it has no manifest first")
        manifest = json.load(archive.extractfile(members[0]))
    except (OSError, tarfile.TarError, ValueError) as error:
        raise Refused(f"it cannot be read: {error}") from None
    if manifest.get("key") != key:
        raise Refused(f"it holds caches for {manifest.get('key')}, and this host is {key}")
    files = manifest.get("files") or {}
    for member in members[1:]:
        if not member.isfile() or not _safe(member.name) or member.name == IMPORTED:
            raise Refused(f"member {member.name!r} is not a plain file inside the cache")
        if member.name not in files or files[member.name][0] != member.size:
            raise Refused(f"member {member.name!r} is not in its manifest as it is")
    return archive, files


def _owner(layout: Layout) -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(layout.service_user)
    except KeyError:
        return os.getuid(), os.getgid()  # no service user yet: the unit's first start chowns its directory
    return entry.pw_uid, entry.pw_gid


def _make_dirs(path: str, stop: str, owner: tuple[int, int]) -> None:
    """Create ``path`` and what it lacks of its parents below ``stop``, owned by the service user."""
    if os.path.isdir(path) or path == stop:
        return
    _make_dirs(os.path.dirname(path), stop, owner)
    os.mkdir(path, 0o700)
    os.chown(path, *owner)


def unpack(path: str, stack_id: str, key: str, sha256: str, layout: Layout = LAYOUT) -> dict:
    """
    Add the archive's files that the host lacks to its compile caches for ``stack_id``;
    the result record. Raises ``Refused``, having written nothing, for an archive that is
    not ``sha256``, not for ``key``, or holds anything but the manifest's plain files.
    """
    if sha256_of(path) != sha256:
        raise Refused(f"it is not the archive asked for (sha256 {sha256[:12]}...)")
    folder = layout.compile_cache(stack_id)
    record = _read_record(folder)
    if record.get("sha256") == sha256:
        return {"stage": "cache", "imported": 0, "kept": len(record.get("files", {})), "key": key, "already": True}
    archive, files = read_archive(path, key)
    owner = _owner(layout)
    _make_dirs(folder, os.path.dirname(layout.cache_dir), owner)
    added, kept = {}, 0
    with archive:
        for member in archive.getmembers()[1:]:
            target = os.path.join(folder, *member.name.split("/"))
            if os.path.lexists(target):
                kept += 1  # the host's own: caches are content-addressed, so the same name is the same kernel
                continue
            _make_dirs(os.path.dirname(target), os.path.dirname(folder), owner)
            temporary = f"{target}.sglfleet-{os.getpid()}.tmp"
            with archive.extractfile(member) as source, open(temporary, "wb") as out:
                shutil.copyfileobj(source, out, CHUNK)
            os.chmod(temporary, 0o600)
            os.chown(temporary, *owner)
            if len(files[member.name]) > 2:
                os.utime(temporary, ns=(files[member.name][2], files[member.name][2]))
            os.rename(temporary, target)
            added[member.name] = files[member.name][1]
    _write_record(folder, {"sha256": sha256, "key": key, "files": added}, owner)
    return {"stage": "cache", "imported": len(added), "kept": kept, "key": key, "sha256": sha256}


def _read_record(folder: str) -> dict:
    try:
        with open(os.path.join(folder, IMPORTED)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def _write_record(folder: str, record: dict, owner: tuple[int, int]) -> None:
    path = os.path.join(folder, IMPORTED)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as handle:
        json.dump(record, handle, sort_keys=True)
    os.chmod(temporary, 0o600)
    os.chown(temporary, *owner)
    os.rename(temporary, path)


def drop(stack_id: str, layout: Layout = LAYOUT) -> dict:
    """
    Take out the files the last ``unpack`` added for ``stack_id`` and that are still as
    it wrote them (the server's own rewrites stay); the result record.
    """
    folder = layout.compile_cache(stack_id)
    record = _read_record(folder)
    dropped = 0
    for name, sha256 in (record.get("files") or {}).items():
        target = os.path.join(folder, *name.split("/"))
        try:
            if sha256_of(target) == sha256:
                os.remove(target)
                dropped += 1
        except OSError:
            pass
    try:
        os.remove(os.path.join(folder, IMPORTED))
    except OSError:
        pass
    return {"stage": "cache", "dropped": dropped}


def fetch(stack_id: str, key: str, sha256: str, peers: list[str], layout: Layout = LAYOUT) -> dict:
    """
    Fetch the archive ``key`` from ``peers`` (unless the host holds it), check it, and
    unpack it; the result record. Raises ``Refused`` for another key, a failed fetch or check.
    """
    local = layout.compile_key(cache_key(stack_id, local_gpus()))
    if key != local:  # the controller pairs hosts by their facts; the host checks for itself
        raise Refused(f"it holds caches for {key}, and this host is {local}")
    final = layout.compile_archive(key)
    if not (os.path.isfile(final) and sha256_of(final) == sha256):
        if not shutil.which("aria2c"):
            raise Refused("aria2c is missing (apt install aria2)")
        os.makedirs(layout.compile_archives, mode=0o755, exist_ok=True)
        name = posixpath.basename(final)
        input_file = posixpath.join(layout.compile_archives, f".{name}.aria2.input")
        with open(input_file, "w") as handle:
            handle.write(aria2_input([(name, sha256)], tuple(peers)))
        fetched = subprocess.run(shlex.split(aria2_command(input_file, layout.compile_archives)),
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True)
        os.remove(input_file)
        part = f"{final}.part"
        if fetched.returncode != 0 or not os.path.isfile(part) or os.path.exists(f"{part}.aria2"):
            for leftover in (part, f"{part}.aria2"):
                if os.path.exists(leftover):
                    os.remove(leftover)
            said = (fetched.stderr or fetched.stdout).strip().splitlines()
            raise Refused(f"no peer gave it (aria2c exit {fetched.returncode}"
                          + (f": {said[-1][-200:]}" if said else "") + ")")
        os.rename(part, final)  # aria2c checked its sha256 on arrival
    result = unpack(final, stack_id, key, sha256, layout)
    _collect_archives(layout, keep=final)
    return result


def main(argv: list[str], layout: Layout = LAYOUT) -> int:
    parser = argparse.ArgumentParser(prog="sglfleet-release cache", description=__doc__.strip().splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("pack", "fetch", "drop"):
        sub.add_parser(name).add_argument("stack_id")
    sub.choices["fetch"].add_argument("--key", required=True)
    sub.choices["fetch"].add_argument("--sha256", required=True)
    sub.choices["fetch"].add_argument("--peer", action="append", required=True, help="a host that serves it")
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            result = pack(args.stack_id, layout)
        elif args.command == "fetch":
            result = fetch(args.stack_id, args.key, args.sha256, args.peer, layout)
        else:
            result = drop(args.stack_id, layout)
    except Refused as refused:
        print(f"compile caches not used: {refused}", file=sys.stderr, flush=True)
        print(result_line(stage="cache", refused=str(refused)), flush=True)
        return USAGE
    print(result_line(**result), flush=True)
    return PASSED
