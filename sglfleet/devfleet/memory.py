"""How much memory a host of the local fleet takes, read from /proc on this machine."""

from __future__ import annotations

import os
from pathlib import Path

from sglfleet.devfleet.fleet import Fleet


def idle_memory(fleet: Fleet, host: str) -> dict:
    """
    Memory of one host: summed PSS and RSS of every process in its pid namespace.

    **Example:**

    .. code:: python

        idle_memory(Fleet(), "node1")["pss_mb"]
    """
    record = fleet._host(host)
    leader = record["leader_pid"]
    target = os.readlink(f"/proc/{leader}/ns/pid")
    pss = rss = count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "ns/pid") != target:
                continue
            rollup = (entry / "smaps_rollup").read_text()
        except OSError:
            continue
        values = {line.split(":")[0]: int(line.split()[1]) for line in rollup.splitlines()[1:]}
        pss += values.get("Pss", 0)
        rss += values.get("Rss", 0)
        count += 1
    return {"processes": count, "pss_mb": round(pss / 1024, 1), "rss_mb": round(rss / 1024, 1)}
