"""The host's OS as a stack sees it: the distribution, glibc's version and ``python3``'s.

A stack's lock serves some Pythons on some glibc; this is what a host offers
(Debian 12: glibc 2.36, Python 3.11; Debian 13: 2.41, 3.13; Ubuntu 22.04: 2.35,
3.10; Ubuntu 24.04: 2.39, 3.12).

**Example:**

.. code:: python

    found = host.get_fact(HostOs)
    found.pretty, found.glibc, found.python   # "Debian GNU/Linux 13 (trixie)", "2.41", "3.13.5"
    found.python_minor                        # "3.13"
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

from sglfleet.facts import sections as cut_sections


@dataclass(frozen=True)
class OsInfo:
    """
    + id, version_id, pretty: ``ID``, ``VERSION_ID`` and ``PRETTY_NAME`` of ``/etc/os-release``
    + glibc: ``getconf GNU_LIBC_VERSION``'s version ("2.41"), None where there is no glibc
    + python: ``python3 -V``'s version ("3.13.5"), None without a ``python3``
    """

    id: str | None = None
    version_id: str | None = None
    pretty: str | None = None
    glibc: str | None = None
    python: str | None = None

    @property
    def python_minor(self) -> str | None:
        """``python3``'s major.minor ("3.13"): what a stack's lock is keyed by."""
        return ".".join(self.python.split(".")[:2]) if self.python else None

    @property
    def name(self) -> str:
        """A short name for tables: ``debian 13``, else whatever is known."""
        return " ".join(part for part in (self.id, self.version_id) if part) or self.pretty or "?"


def os_release(lines: list[str]) -> dict[str, str]:
    """``/etc/os-release``'s ``KEY=value`` lines as a dict, quotes removed (os-release(5))."""
    fields = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            try:
                fields[key.strip()] = " ".join(shlex.split(value))
            except ValueError:
                fields[key.strip()] = value.strip()
    return fields


class HostOs(FactBase[OsInfo]):
    """
    Returns an ``OsInfo``: ``/etc/os-release``, glibc's version and ``python3``'s, in one command.
    """

    @staticmethod
    def default() -> OsInfo:
        return OsInfo()

    def command(self) -> str:
        # `python3 -V` answers before the interpreter initialises (1 ms); 3.10 and older print to stdout too.
        # The three keys it keeps, not the whole file: the read runs on every host at every converge.
        keys = "'^(ID|VERSION_ID|PRETTY_NAME)='"
        return (f"echo '## os-release'; grep -E {keys} /etc/os-release 2>/dev/null || "
                f"grep -E {keys} /usr/lib/os-release 2>/dev/null; "
                "echo '## glibc'; getconf GNU_LIBC_VERSION 2>/dev/null; "
                "echo '## python3'; python3 -V 2>&1; true")

    def process(self, output: list[str]) -> OsInfo:
        sections = cut_sections(output)
        release = os_release(sections.get("os-release", []))
        glibc = [line.split()[-1] for line in sections.get("glibc", []) if line.startswith("glibc ")]
        python = [line.split()[-1] for line in sections.get("python3", []) if line.startswith("Python ")]
        return OsInfo(id=release.get("ID"), version_id=release.get("VERSION_ID"),
                      pretty=release.get("PRETTY_NAME"), glibc=glibc[0] if glibc else None,
                      python=python[0] if python else None)
