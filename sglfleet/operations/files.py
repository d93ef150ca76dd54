"""
Put many small files in place with one round trip to check them all.

pyinfra's ``files.put`` asks two facts per file; a converge that ships the unit,
the host tool and the stand-in would spend a dozen round trips finding that
nothing changed. Here one fact digests every file, and only files that differ
are uploaded, each to a temporary name and renamed into place. The same fact
finds the temporaries that killed runs left, and they are removed.
"""

from __future__ import annotations

import hashlib
import posixpath
import shlex
from io import BytesIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, operation

from sglfleet.artifacts.temporaries import temporary_beside
from sglfleet.facts.files import FileBytes, FileDigests
from sglfleet.facts.host import READ
from sglfleet.operations.output import say, show_diff, wants_diff


@operation()
def in_place(files: dict[str, tuple[bytes, str]], owner: str = "root", group: str = "root", found=READ):
    """
    Ensure each file has exactly the given content and mode.

    + files: remote path -> (content, octal mode such as ``"644"``)
    + owner, group: who owns every file
    + found: ``FileDigests``'s answer for these paths, already read (``sglfleet.facts.host``);
      by default the operation reads it

    **Example:**

    .. code:: python

        in_place(
            name="Host tools",
            files={"/opt/sglfleet/bin/sglfleet-release": (tool_bytes, "755")},
        )
    """
    if found is READ:
        found = host.get_fact(FileDigests, paths=sorted(files))
    digests = found["files"]
    stale = [
        path for path, (content, mode) in sorted(files.items())
        if digests.get(path) != {
            "sha256": hashlib.sha256(content).hexdigest(), "mode": mode,
            "owner": owner, "group": group,
        }
    ]
    if not stale and not found["leftovers"]:
        host.noop(f"{len(files)} files already in place")
        return

    # Everything is said before the first command: planning stops at the first
    # command an operation yields (it only asks whether there is a change).
    for path in stale:
        content, mode = files[path]
        # Without --diff, still say which file and what differs (--diff shows how).
        say(f"Will {'write' if digests.get(path) else 'create'} {path}"
            + (f": its {what_differs(digests[path], content, mode, owner, group)} differs on the host"
               if digests.get(path) else ""), unless_diff=True)
        if wants_diff():
            old = (host.get_fact(FileBytes, path=path) or b"") if digests.get(path) else b""
            show_diff(f"Will {'update' if digests.get(path) else 'create'} {path}",
                      old.decode(errors="replace"), content.decode(errors="replace"))
    yield from removed_leftovers(found["leftovers"])
    for path in stale:
        content, mode = files[path]
        temporary = temporary_beside(path)
        yield shlex.join(["mkdir", "-p", posixpath.dirname(path)])
        yield FileUploadCommand(BytesIO(content), temporary)
        q_temp = shlex.quote(temporary)
        yield f"chmod {mode} {q_temp} && chown {shlex.quote(f'{owner}:{group}')} {q_temp}"
        yield shlex.join(["mv", "-f", temporary, path])


def what_differs(found: dict, content: bytes, mode: str, owner: str, group: str) -> str:
    """``"content"``, ``"mode (600, not 644)"``, ... for a file ``FileDigests`` found."""
    parts = ["content"] if found["sha256"] != hashlib.sha256(content).hexdigest() else []
    if found["mode"] != mode:
        parts.append(f"mode ({found['mode']}, not {mode})")
    if (found["owner"], found["group"]) != (owner, group):
        parts.append(f"owner ({found['owner']}:{found['group']}, not {owner}:{group})")
    return " and ".join(parts)


def removed_leftovers(leftovers: list[str]):
    """Commands that remove temporaries killed runs left (``FileDigests``'s ``leftovers``)."""
    if not leftovers:
        return
    say(f"Will remove what killed runs left: {', '.join(leftovers)}")
    yield shlex.join(["rm", "-f", "--", *leftovers])
