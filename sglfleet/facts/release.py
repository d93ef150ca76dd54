"""Facts about a host's releases: which one serves, which came before, the unit state."""

import posixpath

from pyinfra.api import FactBase

ROOT = "/opt/sglfleet"


class ReleaseState(FactBase):
    """
    Returns the current and previous release ids, the staged releases, the
    state of ``sglang.service`` and whether another run holds the host lock
    (``busy``: a switch or gate in progress), in one round trip. With
    ``wait_lock_s``, first waits up to that long for such a run to end.

    .. code:: python

        {
            "current": "3f2a...", "previous": "9c1d...",
            "releases": ["3f2a...", "9c1d..."],
            "active_state": "active", "active_since": "Sun 2026-11-29 14:20:01 UTC",
            "n_restarts": 0, "busy": False,
        }
    """

    default = dict

    def command(self, wait_lock_s: float = 0) -> str:
        # Another run's switch holds the lock through its gate: wait that long at most.
        wait = f"[ ! -e {ROOT}/.lock ] || flock -w {wait_lock_s:g} {ROOT}/.lock true; " if wait_lock_s else ""
        return wait + (
            # Few processes: this runs three times per host in every converge.
            f"echo current=$(readlink {ROOT}/current 2>/dev/null); "
            f"echo previous=$(readlink {ROOT}/previous 2>/dev/null); "
            f"echo releases=$(ls {ROOT}/releases 2>/dev/null); "  # no dot-folders (staging) without -a
            # sglfleet-release holds the lock for a whole switch, gate and rollback.
            f"if [ -e {ROOT}/.lock ] && ! flock -n {ROOT}/.lock true; then echo busy=1; fi; "
            "systemctl show sglang.service -p ActiveState -p ActiveEnterTimestamp -p NRestarts"
            " 2>/dev/null || true"
        )

    def process(self, output):
        raw = dict(line.split("=", 1) for line in output if "=" in line)
        return {
            "current": posixpath.basename(raw.get("current", "")) or None,
            "previous": posixpath.basename(raw.get("previous", "")) or None,
            "releases": raw.get("releases", "").split(),
            "active_state": raw.get("ActiveState") or None,
            "active_since": raw.get("ActiveEnterTimestamp") or None,
            "n_restarts": int(raw.get("NRestarts") or 0),
            "busy": raw.get("busy") == "1",
        }
