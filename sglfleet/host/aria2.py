"""
aria2c's input file and command line for a fan-out: every file from every peer
host, each written as ``<name>.part`` and, where its sha256 is known, checked
on arrival. Used by the controller for wheels and by the host tool for model
files (``models.py``); standard library only, as the rest of the host package.

**Example:**

.. code:: python

    aria2_input([("config.json", None), ("model.safetensors", "ab12...")], ("http://node1:30090/org/m/4d01...",))
    aria2_command("/tmp/aria2.input", "/opt/sglfleet/models/org/m/.4d01....partial/.cache/peers")
"""

from __future__ import annotations

import hashlib
import shlex
from urllib.parse import quote

CHUNK = 8 << 20


def sha256_of(path) -> str:
    """A file's sha256, as the files a fan-out moves are checked by: read in chunks
    (Python 3.9 hosts have no ``hashlib.file_digest``)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def aria2_input(files: list, sources: tuple) -> str:
    """
    An aria2c input file: every file from every source, written to ``<name>.part``
    and checked against its sha256 (files without one are checked by whoever reads them).

    + files: ``(file name or relative path, sha256 or None)`` for each file to fetch
    + sources: base URLs of the hosts that serve them
    """
    lines = []
    for name, sha256 in files:
        lines.append("\t".join(f"{source}/{quote(name, safe='/+')}" for source in sources))
        lines.append(f"  out={name}.part")
        lines += [f"  checksum=sha-256={sha256}"] if sha256 else []
    return "\n".join(lines) + "\n"


def aria2_command(input_file: str, folder: str) -> str:
    """aria2c for an input file into ``folder``: parts of each file from several peers, bounded retries."""
    return shlex.join([
        "aria2c", f"--input-file={input_file}", f"--dir={folder}",
        "--split=4", "--min-split-size=16M", "--max-connection-per-server=2", "--max-concurrent-downloads=4",
        "--connect-timeout=5", "--timeout=60", "--max-tries=3", "--retry-wait=1",
        "--auto-file-renaming=false", "--allow-overwrite=true", "--file-allocation=none",
        "--console-log-level=error", "--summary-interval=0", "--download-result=hide",
    ])
