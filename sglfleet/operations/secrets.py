"""
Write files that hold secrets: root-owned, mode 0600, replaced with one rename,
and shown in diffs with every value redacted.

pyinfra's ``files.put`` and ``files.template`` print the new content under
``--diff``; a secret would land in the terminal and in CI logs.
"""

from __future__ import annotations

import hashlib
import posixpath
import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from sglfleet.artifacts.temporaries import temporary_beside
from sglfleet.facts.files import FileDigests
from sglfleet.facts.host import READ
from sglfleet.operations.files import removed_leftovers, what_differs
from sglfleet.operations.output import say, show_diff, wants_diff


@operation()
def secret_file(path: str, content: str, redacted: str, found=READ):
    """
    Ensure ``path`` holds ``content``, owned by root with mode 0600.

    + path: the file on the host
    + content: the full text, secrets included; never logged
    + redacted: the same text with each secret replaced, for ``--diff``
    + found: ``FileDigests``'s answer for ``path``, already read; by default the operation reads it

    **Example:**

    .. code:: python

        secret_file(
            name="Secrets of sglang.service",
            path="/etc/sglfleet/sglang.env",
            content="HF_TOKEN=hf_abc\\n",
            redacted="HF_TOKEN=<redacted>\\n",
        )
    """
    if found is READ:
        found = host.get_fact(FileDigests, paths=[path])
    digest = found["files"][path]
    wanted = hashlib.sha256(content.encode()).hexdigest()
    up_to_date = digest is not None and (
        digest["sha256"], digest["mode"], digest["owner"], digest["group"]
    ) == (wanted, "600", "root", "root")
    if up_to_date and not found["leftovers"]:
        host.noop(f"{path} is up to date")
        return

    # A killed run's temporary holds the secrets too (root-only, but one copy too many).
    yield from removed_leftovers(found["leftovers"])
    if up_to_date:
        return

    say(f"Will write {path}" + (f": its {what_differs(digest, content.encode(), '600', 'root', 'root')} "
                                f"differs on the host" if digest else ""), unless_diff=True)
    if wants_diff():
        # The old text holds secrets: show only the new one, redacted.
        what = "Will create" if digest is None else "Will replace (content or mode changed)"
        show_diff(f"{what} {path}, root:root 0600, values redacted:", "", redacted)

    temporary = temporary_beside(path)
    # The secret travels on the command's stdin, not as an upload: under sudo,
    # pyinfra uploads through a file of the SSH user's in /tmp. Written by root
    # with umask 077, the file is 0600 root's before a byte of the secret reaches it.
    yield shlex.join(["mkdir", "-p", posixpath.dirname(path)])
    yield StringCommand(f"umask 077 && cat > {shlex.quote(temporary)}", _stdin=content)
    yield f"chown root:root {shlex.quote(temporary)} && mv -f {shlex.quote(temporary)} {shlex.quote(path)}"
