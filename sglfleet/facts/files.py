"""Facts about files that pyinfra's own facts cannot give: the exact bytes."""

from __future__ import annotations

import base64
import binascii
import fnmatch
import posixpath
import shlex

from pyinfra.api import FactBase, FactProcessError

from sglfleet.artifacts.temporaries import temporaries_pattern
from sglfleet.host.layout import STALE_MINUTES

PRESENT = "sglfleet-file-present"
ABSENT = "sglfleet-file-absent"


class FileBytes(FactBase["bytes | None"]):
    """
    Returns the exact bytes of a file (line endings, encoding, a missing final
    newline and all), or ``None`` when it does not exist. pyinfra's
    ``FileContents`` gives lines with their endings stripped, so the file
    travels as base64. An unreadable file fails the fact, and so the host.

    .. code:: python

        b"import logging\\r\\n..."

    **Example:**

    .. code:: python

        source = host.get_fact(FileBytes, path="/opt/app/kimi_k25.py")
    """

    def command(self, path: str) -> str:
        q_path = shlex.quote(path)
        return f"if test -e {q_path}; then echo {PRESENT} && base64 -w0 < {q_path} && echo; else echo {ABSENT}; fi"

    def process(self, output):
        if output and output[0] == ABSENT:
            return None
        if not output or output[0] != PRESENT:
            raise FactProcessError(f"unexpected output from FileBytes: {output[:1]}")
        try:
            return base64.b64decode("".join(output[1:]), validate=True)
        except binascii.Error as error:
            raise FactProcessError(f"FileBytes output is not base64: {error}")


class FileDigests(FactBase[dict]):
    """
    Returns the sha256, octal mode and owner of several files in one round trip
    (a missing file maps to ``None``), and the temporaries of those files that
    killed runs left behind over an hour ago.

    .. code:: python

        {"files": {"/etc/systemd/system/sglang.service": {"sha256": "9f86d0...", "mode": "644",
                                                          "owner": "root", "group": "root"},
                   "/opt/sglfleet/bin/sglfleet-release": None},
         "leftovers": ["/etc/systemd/system/.sglang.service.sglfleet-3f2a9c1d"]}

    **Example:**

    .. code:: python

        digests = host.get_fact(FileDigests, paths=["/etc/a", "/etc/b"])["files"]
    """

    def command(self, paths):
        quoted = " ".join(shlex.quote(path) for path in paths)
        directories = " ".join(sorted({shlex.quote(posixpath.dirname(path)) for path in paths}))
        patterns = " -o ".join(f"-path {shlex.quote(temporaries_pattern(path))}" for path in paths)
        # Three processes for any number of files: they run on every host at every converge.
        return (
            f"printf paths; printf '\\t%s' {quoted}; echo; "
            f"stat -c 'stat %a %U %G %n' -- {quoted} 2>/dev/null; "
            f"sha256sum -- {quoted} 2>/dev/null; "
            f"find {directories} -maxdepth 1 -type f \\( {patterns} \\) -mmin +{STALE_MINUTES} "
            "2>/dev/null | sed 's/^/leftover /'; true"
        )

    def process(self, output):
        paths, stats, digests, leftovers = [], {}, {}, []
        for line in output:
            kind, _, rest = line.partition(" ")
            if line.startswith("paths"):  # every path asked, tab-separated, on one line
                paths += line.split("\t")[1:]
            elif kind == "stat":
                mode, owner, group, path = rest.split(" ", 3)
                stats[path] = {"mode": mode, "owner": owner, "group": group}
            elif kind == "leftover":
                leftovers.append(rest)
            else:  # sha256sum: "<digest>  <path>"
                digests[line[66:]] = line[:64]
        files = {
            # A path that is not a regular file (missing, a folder) gets no digest.
            path: {"sha256": digests[path], **stats[path]} if path in digests and path in stats else None
            for path in paths
        }
        return {"files": files, "leftovers": sorted(leftovers)}


def narrowed(found: dict, paths) -> dict:
    """
    ``FileDigests``'s answer narrowed to ``paths``: their digests, and only their temporaries.

    + found: what ``FileDigests`` returned for these paths and others
    + paths: the paths one operation owns
    """
    patterns = [temporaries_pattern(path) for path in paths]
    return {"files": {path: found["files"].get(path) for path in paths},
            "leftovers": [path for path in found["leftovers"]
                          if any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)]}


KNOWN = "sglfleet-file-known"


class FileBytesUnlessKnown(FactBase["str | bytes | None"]):
    """
    Returns a file's sha256 (a ``str``) when it is one of ``known``, else its
    exact bytes as ``FileBytes`` does; ``None`` when it does not exist. A file
    already in a known state costs one digest on the host, not a transfer.

    .. code:: python

        "9f86d081884c7d65..."   # or b"import logging\\n..."

    **Example:**

    .. code:: python

        source = host.get_fact(FileBytesUnlessKnown, path="/opt/app/kimi_k25.py", known=[digest])
    """

    def command(self, path: str, known: list[str]):
        q_path, q_known = shlex.quote(path), shlex.quote(f" {' '.join(known)} ")
        return (
            f"if test -e {q_path}; then d=$(sha256sum < {q_path}) && d=${{d%% *}} && case {q_known} in "
            f'*" $d "*) echo {KNOWN} "$d" ;; *) echo {PRESENT} && base64 -w0 < {q_path} && echo ;; esac; '
            f"else echo {ABSENT}; fi"
        )

    def process(self, output):
        if output and output[0].startswith(f"{KNOWN} "):
            return output[0].split(" ", 1)[1]
        return FileBytes().process(output)
