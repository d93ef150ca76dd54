"""The service through systemd: restart it, read its state, read its last log lines."""

from __future__ import annotations

import re
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


def journal_cursor(layout: Layout = LAYOUT) -> str | None:
    """Where the unit's journal ends now, to read what a stop logs after it."""
    out = subprocess.run(["journalctl", "-u", layout.unit, "-n", "0", "--show-cursor", "--no-pager"],
                         capture_output=True, text=True).stdout
    found = re.search(r"^-- cursor: (\S+)", out, re.M)
    return found.group(1) if found else None


# systemd, when a stop outlasts TimeoutStopSec (the unit's KillMode=mixed then SIGKILLs the group)
STOP_TIMED_OUT = "State 'stop-sigterm' timed out. Killing."
# sglang's sigterm_watchdog, every 5 s while it drains (0.5.9 tokenizer_manager.py:2137-2140)
REMAINING = re.compile(r"Gracefully exiting\.\.\. Remaining number of requests (\d+)\.")


def requests_cut(cursor: str | None, layout: Layout = LAYOUT) -> int | None:
    """
    How many requests in flight the unit's last stop cut, logged after ``cursor``:
    None when no stop timed out (sglang drained them all), else the count sglang's
    watchdog last logged before systemd's SIGKILL (0 when it logged none).
    """
    command = ["journalctl", "-u", layout.unit, "--no-pager", "-o", "cat"]
    out = subprocess.run(command + ([f"--after-cursor={cursor}"] if cursor else ["-n", "2000"]),
                         capture_output=True, text=True).stdout
    return cut_in_log(out.splitlines())


def cut_in_log(lines: list[str]) -> int | None:
    """``requests_cut`` of a stop's journal lines (``journalctl -o cat``)."""
    killed = [number for number, line in enumerate(lines) if STOP_TIMED_OUT in line]
    if not killed:
        return None
    remaining = [int(found.group(1)) for line in lines[:killed[-1]] if (found := REMAINING.search(line))]
    return remaining[-1] if remaining else 0


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
