"""Facts: each reads one concern of a host, and only reads."""

from __future__ import annotations


def sections(output: list[str]) -> dict[str, list[str]]:
    """A fact's output cut at its ``## name`` lines: ``{name: the lines after it}``."""
    found: dict[str, list[str]] = {}
    current = None
    for line in output:
        if line.startswith("## "):
            current = found.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    return found
