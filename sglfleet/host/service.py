"""The service through systemd: restart it, read its state, read its last log lines."""

from __future__ import annotations

import subprocess

from .layout import LAYOUT, Layout

LOG_LINES = 15


def systemctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["systemctl", *args], check=check, capture_output=True, text=True)


def properties(layout: Layout = LAYOUT) -> dict[str, str]:
    """ActiveState, SubState, NRestarts, MainPID and ActiveEnterTimestamp of the unit."""
    out = systemctl("show", layout.unit, "-p", "ActiveState,SubState,NRestarts,MainPID,ActiveEnterTimestamp",
                    check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def restarts(layout: Layout = LAYOUT) -> int:
    """How often systemd restarted the unit on its own (Restart=on-failure)."""
    return int(properties(layout).get("NRestarts") or 0)


def restart(layout: Layout = LAYOUT) -> int:
    """Restart the unit (enabled, so it serves after a reboot); return the restart count to detect a crash after it."""
    systemctl("daemon-reload")
    systemctl("reset-failed", layout.unit, check=False)
    systemctl("enable", "--quiet", layout.unit)
    systemctl("restart", layout.unit)
    return restarts(layout)


def journal_lines(layout: Layout = LAYOUT, lines: int = 400) -> list[str]:
    """
    The unit's last ``lines`` log lines, whole; none where there is no journal to read.

    + lines: how many; a failed start's traceback and the import errors before it fit in 400

    **Example:**

    .. code:: python

        cause = gate.start_failure_cause(journal_lines(layout))
    """
    try:
        out = subprocess.run(["journalctl", "-u", layout.unit, "-n", str(lines), "--no-pager", "-o", "cat"],
                             capture_output=True, text=True).stdout
    except OSError:  # no journalctl (the GPU bench answers systemd's part itself)
        return []
    return out.splitlines()


def journal_tail(layout: Layout = LAYOUT) -> str:
    """The unit's last log lines, each cut to 300 characters (sglang logs every argument on one line)."""
    out = subprocess.run(["journalctl", "-u", layout.unit, "-n", str(LOG_LINES), "--no-pager", "-o", "cat"],
                         capture_output=True, text=True).stdout
    lines = [line if len(line) <= 300 else line[:300] + " ..." for line in out.splitlines()]
    return "\n".join(lines) or "(the journal holds no lines for the unit)"


def main_pid_environ(layout: Layout = LAYOUT) -> dict[str, str]:
    """The environment of the unit's main process (empty when none runs)."""
    pid = properties(layout).get("MainPID") or "0"
    try:
        with open(f"/proc/{int(pid)}/environ", "rb") as handle:
            raw = handle.read()
    except (OSError, ValueError):
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}
