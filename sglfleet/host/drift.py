"""
What converges found changed by hand on this host, for ``sglfleet.prom``: ``drift.json``.

A converge marks a kind as drifted the moment it finds it (before its repair
runs), and clears every kind once it has run to its end on the host: what it
found is repaired by then. A repair that fails leaves the mark, so
``sglfleet_drift{kind="..."} 1`` stays until a converge gets through. The
time each kind was last found stays too, so a drift found and repaired between
two scrapes is still seen.

    sglfleet-release drift found stack     mark a kind as drifted (now), rewrite sglfleet.prom
    sglfleet-release drift clear           the converge got through: nothing is drifted

The file is small JSON, written atomically (a temporary beside it, then rename):

    {"drifted": ["stack"], "found": {"stack": 1796136244.67}}

**Example:**

.. code:: python

    mark("stack", LAYOUT)
    samples(LAYOUT)  # ([({"kind": "current"}, 0), ...], [({"kind": "stack"}, 1796136244.67)])
"""

from __future__ import annotations

import json
import os
import time

from .layout import LAYOUT, Layout

# The kinds of drift a converge finds (``sglfleet.operations.drift.found``):
KINDS = (
    "current",  # the current link moved by hand; the process still serves the declared release
    "firewall",  # sglfleet's nftables table changed or removed by hand
    "model",    # a staged model's files changed since they were verified
    "release",  # a staged release's files no longer make its id
    "service",  # the process serves another release than current, which is the declared one
    "stack",    # a stack's venv changed since it was built and verified
)
FILE = "drift.json"


def path(layout: Layout = LAYOUT) -> str:
    return os.path.join(layout.root, FILE)


def load(layout: Layout = LAYOUT) -> dict:
    """The record: ``{"drifted": [kind, ...], "found": {kind: time}}``; empty when none was written."""
    try:
        with open(path(layout)) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return {"drifted": [], "found": {}}
    if not isinstance(record, dict):
        return {"drifted": [], "found": {}}
    drifted = [kind for kind in record.get("drifted") or [] if kind in KINDS]
    found = {kind: float(at) for kind, at in (record.get("found") or {}).items()
             if kind in KINDS and isinstance(at, (int, float))}
    return {"drifted": drifted, "found": found}


def _save(record: dict, layout: Layout) -> None:
    final = path(layout)
    temporary = f"{final}.{os.getpid()}.tmp"
    with open(temporary, "w") as handle:
        json.dump(record, handle, sort_keys=True)
        handle.write("\n")
    os.chmod(temporary, 0o644)
    os.rename(temporary, final)


def mark(kind: str, layout: Layout = LAYOUT, now: float | None = None) -> None:
    """Record that a converge found ``kind`` drifted (now), before it repairs it."""
    record = load(layout)
    record["drifted"] = sorted({*record["drifted"], kind})
    record["found"][kind] = time.time() if now is None else now
    _save(record, layout)


def clear(layout: Layout = LAYOUT) -> None:
    """A converge ran to its end on this host: nothing it looked at is drifted any more."""
    record = load(layout)
    if record["drifted"] or not os.path.exists(path(layout)):
        _save({**record, "drifted": []}, layout)


def samples(layout: Layout = LAYOUT) -> tuple[list[tuple[dict, float]], list[tuple[dict, float]]]:
    """``sglfleet_drift`` (every kind, 1 or 0) and ``sglfleet_drift_found_timestamp_seconds`` (the kinds ever found)."""
    record = load(layout)
    return ([({"kind": kind}, 1 if kind in record["drifted"] else 0) for kind in KINDS],
            [({"kind": kind}, at) for kind, at in sorted(record["found"].items())])
