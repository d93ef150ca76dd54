"""The controller's wheelhouse: each locked file fetched once, kept by its sha256.

Files live at ``.cache/wheelhouse/<sha256>/<filename>``; a file is moved there
only after its bytes matched the lock, so a present file is a verified one and
a converge of N hosts fetches each file from the index once. Every fetch is
appended to ``fetches.jsonl`` (url, bytes), which the tests and the benchmark
read to count what came from the index.

**Example:**

.. code:: python

    local = ensure(load_stack("dev"))   # {filename: Local(path, sha256, size)}
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import urllib.request
import zipfile
from functools import cache
from pathlib import Path
from typing import NamedTuple

from sglfleet import cache_dir
from sglfleet.artifacts.stacks import Stack, StackError, StackFile
from sglfleet.host.aria2 import sha256_of

CHUNK = 1 << 20
_lock = threading.Lock()


class Local(NamedTuple):
    """A file in the controller's wheelhouse, with the sha256 hosts must see."""

    path: Path
    sha256: str
    size: int


def root() -> Path:
    """The wheelhouse folder ($SGLFLEET_WHEELHOUSE, else .cache/wheelhouse)."""
    default = cache_dir() / "wheelhouse"
    return Path(os.environ.get("SGLFLEET_WHEELHOUSE", default))


def path_for(file: StackFile) -> Path:
    # An unhashed file (a lock the inventory allowed) is kept by name, unverified.
    return root() / (file.sha256 or "unhashed") / file.filename


def fetch(file: StackFile, stack_name: str = "?") -> Path:
    """
    Return the cached path of ``file``, downloading and verifying it first if absent.

    + file: a locked file with its sha256
    + stack_name: named in the error when the bytes do not match the lock
    """
    target = path_for(file)
    if target.is_file() and (file.size is None or target.stat().st_size == file.size):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # One partial file per process: two runs on one controller may fetch the same wheel at once.
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    digest, size = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(file.url, timeout=60) as response, open(partial, "wb") as out:
            while chunk := response.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise StackError(f"stack {stack_name}: cannot fetch {file.url} ({e}): "
                         f"check the controller's network or re-lock where it can be reached") from None
    with open(root() / "fetches.jsonl", "a") as log:
        log.write(json.dumps({"url": file.url, "bytes": size}) + "\n")
    if file.sha256 and digest.hexdigest() != file.sha256:
        partial.unlink()
        raise StackError(
            f"stack {stack_name}: {file.filename} from {file.url} has sha256 {digest.hexdigest()[:16]}..., "
            f"the lock says {file.sha256[:16]}...: the lock or the index is wrong; "
            f"re-lock with `sglfleet lock {stack_name}` and review the change"
        )
    partial.replace(target)
    return target


def ensure(stack: Stack, names: frozenset[str] | None = None) -> dict[str, Local]:
    """
    Fetch every file of ``stack`` the wheelhouse lacks; return ``{filename: Local}``.

    + stack: a loaded stack; a file whose bytes differ from the lock stops here,
      before any host is touched
    + names: only the files of these packages (``{"sglang"}``: its wheel alone)

    **Example:**

    .. code:: python

        local = ensure(stack)[file.filename]
    """
    with _lock:  # one download of a file, even with hosts planned concurrently
        local = {}
        for f in stack.files:
            if names is not None and f.name not in names:
                continue
            path = fetch(f, stack.name)
            local[f.filename] = Local(path, f.sha256 or sha256_of(path), path.stat().st_size)
        return local


@cache
def _unpacked(files: tuple[Local, ...]) -> int:
    # A pure function of its arguments: each file's sha256 names its bytes (an unhashed lock's
    # file too, hashed as ``ensure`` keeps it).
    total = 0
    for path, _, _ in files:
        with zipfile.ZipFile(path) as wheel:
            total += sum(member.file_size for member in wheel.infolist())
    return total


def unpacked_size(stack: Stack) -> int:
    """
    Bytes the wheels of ``stack``'s venv hold unpacked, from their zip directories
    (nothing is extracted: about a second for a CUDA stack, once per run).

    + stack: a loaded stack; its files are fetched first if the wheelhouse lacks them
    """
    local = ensure(stack)
    return _unpacked(tuple(local[f.filename] for f in stack.venv_files))


def fetched_bytes() -> int:
    """Bytes fetched from the index into this wheelhouse, ever (from fetches.jsonl)."""
    log = root() / "fetches.jsonl"
    if not log.exists():
        return 0
    return sum(json.loads(line)["bytes"] for line in log.read_text().splitlines() if line)
