"""
Processes, mounts and cgroups on this machine, as the local fleet sees them.

A process is named by its pid and its kernel start time together, so a pid the
kernel reused is never taken for a host's; nothing is found by a name pattern.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
from pathlib import Path

from sglfleet.devfleet.errors import DevFleetError


def _run(argv, check=True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, text=True, capture_output=True, **kwargs)


def _proc_start_time(pid: int) -> str | None:
    """The kernel start time of ``pid`` (field 22 of stat): tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int | None, start: str | None) -> bool:
    """``pid`` is still the process we started, and not a zombie waiting to be reaped."""
    if not pid or start is None or _proc_start_time(pid) != start:
        return False
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def _mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path``, deepest first."""
    prefix = str(path)
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return sorted(found, key=len, reverse=True)


def _unmount_all(path: Path) -> None:
    for point in _mounts_under(path):
        if _run(["umount", point], check=False).returncode != 0:
            _run(["umount", "-l", point], check=False)


def _remove_tree(path: Path) -> None:
    """rmtree, but never through a mount point (a leftover /proc bind, an overlay)."""
    if not path.exists():
        return
    _unmount_all(path)
    if _mounts_under(path):
        raise DevFleetError(f"{path}: still has mounts below it; unmount them, then run down again")
    shutil.rmtree(path)


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cgroups(machine: str, create: bool = False) -> list[Path]:
    """The host's own cgroup in each hierarchy systemd uses (cgroup2, name=systemd)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype, _, options = right.split()[:3]
        if fstype == "cgroup2" or (fstype == "cgroup" and "name=systemd" in options.split(",")):
            path = Path(left.split()[4]) / "sglfleet" / machine
            if create:
                path.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                found.append(path)
    return found


def _leader_of(nspawn_pid: int) -> int | None:
    """The container's init: PID 1 of its own pid namespace, forked by nspawn."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        nspid = fields.get("NSpid", "").split()
        if fields.get("PPid", "").strip() == str(nspawn_pid) and len(nspid) > 1 and nspid[-1] == "1":
            return int(entry.name)
    return None
