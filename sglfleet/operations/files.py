"""
Put many small files in place with one round trip to check them all.

pyinfra's ``files.put`` asks two facts per file; a converge that ships the unit,
the host tool and the stand-in would spend a dozen round trips finding that
nothing changed. Here one fact digests every file, and only files that differ
are uploaded, each to a temporary name and renamed into place.
"""

from __future__ import annotations

import difflib
import hashlib
import posixpath
from io import BytesIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, StringCommand, operation

from sglfleet.facts.files import FileBytes, FileDigests
from sglfleet.operations import RUN_TOKEN


@operation()
def in_place(files: dict[str, tuple[bytes, str]], owner: str = "root", group: str = "root"):
    """
    Ensure each file has exactly the given content and mode.

    + files: remote path -> (content, octal mode such as ``"644"``)
    + owner, group: who owns every file

    **Example:**

    .. code:: python

        in_place(
            name="Host tools",
            files={"/opt/sglfleet/bin/sglfleet-release": (tool_bytes, "755")},
        )
    """
    digests = host.get_fact(FileDigests, paths=sorted(files))
    stale = [
        path for path, (content, mode) in sorted(files.items())
        if digests.get(path) != {
            "sha256": hashlib.sha256(content).hexdigest(), "mode": mode,
            "owner": owner, "group": group,
        }
    ]
    if not stale:
        host.noop(f"{len(files)} files already in place")
        return

    for path in stale:
        content, mode = files[path]
        if state.config.DIFF and not state.is_executing:
            _log_diff(path, digests.get(path), content)
        directory = posixpath.dirname(path)
        temporary = posixpath.join(directory, f".{posixpath.basename(path)}.sglfleet-{RUN_TOKEN}")
        yield StringCommand("mkdir", "-p", directory)
        yield FileUploadCommand(BytesIO(content), temporary)
        yield StringCommand("chmod", mode, temporary, "&&", "chown", f"{owner}:{group}", temporary)
        yield StringCommand("mv", "-f", temporary, path)


def _log_diff(path: str, digest: dict | None, content: bytes) -> None:
    old = b""
    if digest is not None:
        old = host.get_fact(FileBytes, path=path) or b""
    host.log(f"Will {'create' if digest is None else 'update'} {path}", logger.info)
    for line in difflib.unified_diff(
        old.decode(errors="replace").splitlines(),
        content.decode(errors="replace").splitlines(),
        path if digest else "/dev/null", path, lineterm="",
    ):
        logger.info("    %s", line)
