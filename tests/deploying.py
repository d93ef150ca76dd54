"""Helpers for the tests that run the real deploy over SSH against the local fleet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from paths import LAYOUT, UNIT
from sglfleet import PROJECT_ROOT
from sglfleet.artifacts.keys import KeyStore
from sglfleet.artifacts.stacks import Stack, load_stack

PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
# Known only to the tests: every output of every run is searched for them.
SECRETS = {"SGLFLEET_HF_TOKEN": "hf_testtoken7Q2vX9", "SGLFLEET_API_KEY": "sk-testkey4Lm8Zp3"}


def pyinfra(playbook: str, *args: str, timeout: float = 600, env: dict | None = None,
            ) -> subprocess.CompletedProcess:
    """
    Run ``pyinfra inventory/dev.py PLAYBOOK ARGS`` from the project root, as a user would.

    The secrets come from the environment, as in production; the output
    (stdout and stderr, as ``stdout``) is checked here, for every run, to hold
    none of them. ``env`` adds to (or overrides) the environment.
    """
    env = {**os.environ, **SECRETS, "PYTHONUNBUFFERED": "1", **(env or {})}
    result = subprocess.run(
        [PYINFRA, "inventory/dev.py", playbook, *args],
        cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=timeout,
    )
    for value in SECRETS.values():
        assert value not in result.stdout, "a secret appeared in pyinfra's output"
    return result


def fleet_key(fleet, name: str = "gateway-admin") -> str:
    """
    Key ``name`` of the fleet's secrets file (``sglfleet.artifacts.keys``): ``gateway-admin`` and
    ``engine-admin`` are made by its first converge, a client key by ``sglfleet keys issue``.
    """
    found = KeyStore(fleet.secrets_file).find(name)
    assert found is not None, f"no {name} in {fleet.secrets_file}: converge first"
    return found.value


def sglfleet(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``sglfleet ARGS`` from the project root, with the run's secrets in the environment as a deploy has them."""
    return subprocess.run([str(Path(sys.executable).with_name("sglfleet")), *args], cwd=PROJECT_ROOT,
                          env={**os.environ, **SECRETS}, capture_output=True, text=True, timeout=timeout)


def deploy(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``pyinfra inventory/dev.py deploy.py -y ARGS``."""
    return pyinfra("deploy.py", "-y", *args, timeout=timeout)


def stack_on(fleet, host: str, name: str = "dev", stacks_dir: Path | None = None) -> Stack:
    """
    Stack ``name`` as ``host`` builds it: for its own python3 (3.11 on bookworm, 3.13 on trixie).

    **Example:**

    .. code:: python

        stack_on(fleet, "node2").venv   # "/opt/sglfleet/stacks/dev-17238d4ab81c-cp313/venv" on trixie
    """
    return load_stack(name, stacks_dir=stacks_dir).for_python(fleet.python_of(host))


def eagle_change(steps: int) -> tuple[str, ...]:
    """``--data`` that moves the EAGLE-3 numbers (topk 1, ``steps + 1`` draft tokens): a new release on every host."""
    return ("--data", f"speculative_num_steps={steps}", "--data", "speculative_eagle_topk=1",
            "--data", f"speculative_num_draft_tokens={steps + 1}")


def converged(fleet, *args: str):
    """
    The body of a module fixture: every host's fault cleared and the fleet
    converged with ``args``, the fleet yielded, the faults cleared again after.

    **Example:**

    .. code:: python

        @pytest.fixture(scope="module")
        def fleet_up(fleet):
            yield from converged(fleet, "--data", "listen_host=0.0.0.0")
    """
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    done = deploy(*args)
    assert done.returncode == 0, done.stdout[-3000:]
    yield fleet
    for host in fleet.hosts:
        fleet.fault(host, "clear")


def host_state(fleet, host: str) -> dict:
    """What ``sglfleet-release state`` reports on ``host``: releases, unit, health (read
    through nsenter, so the check logs in nowhere)."""
    return json.loads(fleet.inside(host, f"{LAYOUT.tool} state").stdout)


def server_pid(fleet, host: str, unit: str = UNIT) -> str:
    """The pid of the server process: the launch script's child that runs sglang or the stand-in
    (its other child, sglfleet-redact, blanks the API key in the server's output)."""
    return fleet.exec(host, f"pgrep -P $(systemctl show -p MainPID --value {unit}) -f "
                            "'launch_server|sglang_standin'").stdout.strip()


def fleet_state(fleet) -> dict[str, dict]:
    return {host: host_state(fleet, host) for host in fleet.hosts}


def tree_digest(fleet, host: str, *paths: str) -> str:
    """
    Every file, folder and link under ``paths`` on ``host``, each with its type, size,
    inode, mode, owners, link target, and the times of its last write and last change
    (read through nsenter: the check logs in nowhere).

    Stricter than hashing the contents, and costs a listing, not a read of every byte
    (152 MB of venvs a host): no write leaves the change time (``ctime``) as it was, and
    a file written again with the same bytes, or one made and removed, shows too.
    """
    quoted = " ".join(paths)
    return fleet.inside(host, f"find {quoted} -xdev -printf '%p %y %s %i %m %U:%G %l %T@ %C@\\n' 2>/dev/null | sort").stdout


def sshd_connections(fleet, host: str, since: float, logins: bool = False, until: float | None = None) -> int:
    """
    How many SSH connections ``host``'s sshd logged from ``since`` to ``until``
    (epoch seconds; None: now): one sshd child per connection, accepted or
    refused (``logins``: only those that logged in). Read from the host's journal
    through its mount namespace, so counting opens no connection itself.
    """
    leader = str(fleet.state()["hosts"][host]["leader_pid"])
    main = subprocess.run(["nsenter", "-t", leader, "-m", "cat", "/run/sshd.pid"],
                          capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    window = ["--since", f"@{since:.6f}"] + (["--until", f"@{until:.6f}"] if until else [])
    log = subprocess.run(["nsenter", "-t", leader, "-m", "journalctl", "-u", "ssh", "-o", "json",
                          "--no-pager", *window],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    entries = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    # OpenSSH 9.8 and later (trixie's 10.0) run each connection as sshd-session, not an sshd child.
    return len({e["_PID"] for e in entries if e.get("SYSLOG_IDENTIFIER") in ("sshd", "sshd-session")
                and e.get("_PID") != main
                and (not logins or str(e.get("MESSAGE", "")).startswith("Accepted "))})


SSHD_VERBOSE = "/etc/ssh/sshd_config.d/00-verbose.conf"


def sshd_logs_sessions(fleet, hosts) -> None:
    """Make each host's sshd log every session it starts (``LogLevel VERBOSE``), through nsenter."""
    for host in hosts:
        fleet.inside(host, f"grep -qs VERBOSE {SSHD_VERBOSE} || {{ echo 'LogLevel VERBOSE' > {SSHD_VERBOSE} "
                           "&& systemctl reload ssh; }")


def sshd_commands(fleet, host: str, since: float) -> int:
    """How many remote commands ``host``'s sshd started since ``since`` (``sshd_logs_sessions`` first)."""
    log = fleet.inside(host, f"journalctl -u ssh -o cat --no-pager --since @{since:.6f}").stdout
    return log.count("Starting session: command")


def journal_shows_logins(fleet, hosts, since: float, timeout: float = 10.0) -> bool:
    """
    Wait (bounded) until every host's journal shows a login since ``since``:
    journald writes asynchronously, so a check for *no* connection in an
    earlier window is only as good as this positive control that follows it.
    """
    deadline = time.monotonic() + timeout
    while True:
        if all(sshd_connections(fleet, host, since, logins=True) for host in hosts):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def ssh_logins(fleet, host: str, since: float) -> list[tuple[str, str]]:
    """
    ``(user, address)`` of every SSH login on ``host`` since ``since`` (epoch
    seconds), from sshd's "Accepted ..." journal lines, read through nsenter.
    """
    log = fleet.inside(host, f"journalctl -u ssh -o cat --no-pager --since @{since:.6f}").stdout
    # "Accepted publickey for deploy from ..."; sshd at LogLevel VERBOSE adds "Accepted key ... found at ...".
    return [(words[words.index("for") + 1], words[words.index("from") + 1])
            for words in (line.split() for line in log.splitlines()) if words[:1] == ["Accepted"] and "for" in words]


def changed_operations(output: str) -> list[str]:
    """The lines of pyinfra's results that report a change."""
    return [line for line in output.splitlines() if "Changed" in line or "changed" in line]
