"""Facts: each reads one concern of a host, and only reads."""

from __future__ import annotations


def sections(output: list[str], mark: str = "## ") -> dict[str, list[str]]:
    """
    A fact's output cut at its ``## name`` lines: ``{name: the lines after it}``.

    + mark: what starts a section's line, before its name; lines before the first are left out
    """
    found: dict[str, list[str]] = {}
    current = None
    for line in output:
        if line.startswith(mark):
            current = found.setdefault(line[len(mark):].strip(), [])
        elif current is not None:
            current.append(line)
    return found
