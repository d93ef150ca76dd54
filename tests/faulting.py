"""Helpers for the fault, concurrency and security tests: a deploy that runs in the
background while a fault is injected, and what every host serves."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time

from deploying import PYINFRA, SECRETS, host_state
from paths import LAYOUT
from sglfleet import PROJECT_ROOT


class Run:
    """
    ``pyinfra inventory/dev.py deploy.py -y ARGS`` started in the background, its
    output (stdout and stderr) in a file, so a test can act when a line appears.
    """

    def __init__(self, *args: str, playbook: str = "deploy.py", env: dict | None = None):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="sglfleet-run-", suffix=".log")
        self.process = subprocess.Popen(
            [PYINFRA, "inventory/dev.py", playbook, "-y", *args], cwd=PROJECT_ROOT,
            env={**os.environ, **SECRETS, "PYTHONUNBUFFERED": "1", **(env or {})},
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
        )

    @property
    def output(self) -> str:
        with open(self.log.name) as handle:
            return handle.read()

    def wait_for(self, pattern: str, timeout: float = 90) -> re.Match:
        """Wait until the output matches ``pattern``; fail when the run ends or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output, re.M)
            if match:
                return match
            if self.process.poll() is not None:
                raise AssertionError(f"the run ended before {pattern!r}:\n{self.output[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} within {timeout} s:\n{self.output[-3000:]}")

    def finish(self, timeout: float = 180) -> subprocess.CompletedProcess:
        """Wait for the run to end (killed if it outlives ``timeout``); check no secret leaked."""
        try:
            self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)
        output = self.output
        self.log.close()
        for value in SECRETS.values():
            assert value not in output, "a secret appeared in pyinfra's output"
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, output)

    def stop(self) -> None:
        """For teardown: kill the run if it still goes."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def results(output: str) -> dict:
    """pyinfra's closing 'Grand total' row: hosts, success, error, no change."""
    row = re.search(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", output)
    assert row, output[-2000:]
    return dict(zip(("hosts", "success", "error", "no_change"),
                    (0 if cell == "-" else int(cell) for cell in row.groups())))


def wait_unlocked(fleet, host: str, timeout: float = 90) -> None:
    """Wait until no sglfleet-release holds ``host``'s lock (a switch left running by a dead controller)."""
    deadline = time.monotonic() + timeout
    test = f"[ ! -e {LAYOUT.lock} ] || flock -n {LAYOUT.lock} true"
    while fleet.exec(host, test, check=False).returncode != 0:
        assert time.monotonic() < deadline, f"{host}: the host lock is still held after {timeout} s"
        time.sleep(0.5)


def serving(fleet, hosts=None) -> dict[str, str | None]:
    """The release each host serves (current, unit active, /health 200), or None."""
    found = {}
    for host in hosts or fleet.hosts:
        state = host_state(fleet, host)
        ok = state["active_state"] == "active" and state["health"] == 200
        found[host] = state["current"] if ok else None
    return found


def wait_serving(fleet, host: str, timeout: float = 60) -> str:
    """Wait until ``host`` serves a release (e.g. after systemd restarted it); return its id."""
    deadline = time.monotonic() + timeout
    while True:
        release = serving(fleet, [host])[host]
        if release or time.monotonic() > deadline:
            assert release, f"{host}: serves nothing after {timeout} s: {host_state(fleet, host)}"
            return release
        time.sleep(0.5)


SWITCH = re.compile(r"will switch \w+ -> (\w+), gate")


def new_release(output: str) -> str:
    """The release id this run rolls out, from its canary line."""
    found = SWITCH.search(output)
    assert found, f"the run switched no host:\n{output[-3000:]}"
    return found.group(1)
