"""
Hosts as they come: Debian 12 (python3 3.11) and Debian 13 (3.13) hosts in one
fleet, on one dev stack whose lock serves both.

Molecule's sequence on the mixed fleet: converge, verify that each host's venv
runs its own python3 from its own wheels, converge again and change nothing
(one remote command a host), roll a change out and back, converge again and
change nothing. Then a host whose python3 its stack cannot serve is refused by
preflight, in one line that names the stack that would, and nothing on it changes.
"""

import json
import os
import re
import shutil
import subprocess
import time

import pytest

from deploying import (PYINFRA, converged, deploy, eagle_change, fleet_state, pyinfra, server_pid, sglfleet,
                       sshd_commands, sshd_logs_sessions, stack_on, tree_digest)
from faulting import results
from paths import LAYOUT
from sglfleet import FILES, PROJECT_ROOT
from sglfleet.artifacts.stacks import load_stack, lock_path

pytestmark = pytest.mark.fleet

# A wheel built for one CPython: its Python and ABI tags (cp313-cp313), not abi3 or pure.
INTERPRETER_TAG = re.compile(r"-(cp3\d+)-\1-")


@pytest.fixture(scope="module")
def mixed(fleet):
    """
    The session's fleet with a bookworm and a trixie host in it (one added for
    this module where it has none, and stopped after it), converged.
    """
    had = len(fleet.hosts)
    for os_name in ("bookworm", "trixie"):
        if os_name not in {fleet.os_of(host) for host in fleet.hosts}:
            fleet.add(1, oses=[os_name])
    try:
        yield from converged(fleet)
    finally:
        if len(fleet.hosts) > had:
            fleet.up(had)


def on(fleet, os_name: str) -> str:
    """The first host of the fleet that runs ``os_name``."""
    return next(host for host in fleet.hosts if fleet.os_of(host) == os_name)


def test_each_host_serves_from_a_venv_of_its_own_python3_built_from_its_own_wheels(mixed):
    fleet = mixed
    states = fleet_state(fleet)
    for host in fleet.hosts:
        stack = stack_on(fleet, host)
        python = fleet.exec(host, "python3 -V").stdout.split()[1]
        assert python.startswith(fleet.python_of(host) + "."), (host, python)
        assert states[host]["stack"] == stack.id and stack.id.endswith("-cp" + stack.python.replace(".", ""))
        assert fleet.exec(host, f"{stack.venv}/bin/python -V").stdout.split()[1] == python, host
        marker = json.loads(fleet.exec(host, f"cat {stack.marker}").stdout)
        assert (marker["stack_id"], marker["ok"], marker["checks"]["python"]["expected"]) == (
            stack.id, True, stack.python), host
        command = fleet.exec(host, f"cat /proc/{server_pid(fleet, host)}/cmdline").stdout.split("\0")
        assert command[0] == f"{stack.venv}/bin/python", (host, command)
        # The fan-out sent the host only what its python3 takes (an earlier module's kept stack,
        # such as dev-sglang-0.5.23, keeps its own wheels there too: none of another Python).
        wheels = set(fleet.exec(host, f"ls {LAYOUT.wheelhouse}").stdout.split())
        own = {f.filename for f in stack.files}
        defined = load_stack("dev")
        others = {f.filename for python in defined.pythons if python != stack.python
                  for f in defined.for_python(python).files} - own
        assert own <= wheels and not wheels & others, (host, sorted(wheels & others), sorted(own - wheels))
        assert {tag for name in wheels for tag in INTERPRETER_TAG.findall(name)} == {
            "cp" + stack.python.replace(".", "")}, host
    # Two Pythons, two stacks, two releases of one configuration.
    assert len({states[host]["current"] for host in fleet.hosts}) == len({fleet.os_of(h) for h in fleet.hosts})

    shown = sglfleet("status", "inventory/dev.py", "--json")
    assert shown.returncode == 0, shown.stderr
    rows = {row["host"]: row for row in json.loads(shown.stdout)}
    for host in fleet.hosts:
        version = {"bookworm": "12", "trixie": "13"}[fleet.os_of(host)]
        assert (rows[host]["os"], rows[host]["python"].rsplit(".", 1)[0]) == (f"debian {version}",
                                                                               fleet.python_of(host)), rows[host]
        assert rows[host]["declared"] == rows[host]["current"] == states[host]["current"], rows[host]


def test_a_second_converge_changes_nothing_in_one_remote_command_a_host(mixed):
    fleet = mixed
    sshd_logs_sessions(fleet, fleet.hosts)
    before = fleet_state(fleet)
    since = time.time()
    again = deploy()
    assert again.returncode == 0, again.stdout[-3000:]
    assert results(again.stdout)["success"] == 0 and "will switch" not in again.stdout, again.stdout[-3000:]
    assert {host: sshd_commands(fleet, host, since) for host in fleet.hosts} == dict.fromkeys(fleet.hosts, 1)
    assert fleet_state(fleet) == before


def test_a_change_rolls_out_on_both_pythons_and_back_and_then_nothing_changes(mixed):
    fleet = mixed
    before = {host: state["current"] for host, state in fleet_state(fleet).items()}
    out = deploy(*eagle_change(2))
    assert out.returncode == 0, out.stdout[-3000:]
    after = fleet_state(fleet)
    for host in fleet.hosts:
        assert after[host]["current"] != before[host] and after[host]["previous"] == before[host], host
        assert after[host]["stack"] == stack_on(fleet, host).id and after[host]["health"] == 200, host

    back = pyinfra("rollback.py", "-y")
    assert back.returncode == 0, back.stdout[-3000:]
    assert {host: state["current"] for host, state in fleet_state(fleet).items()} == before

    again = deploy()
    assert again.returncode == 0, again.stdout[-3000:]
    assert results(again.stdout)["success"] == 0 and "will switch" not in again.stdout, again.stdout[-3000:]


def test_a_host_whose_python3_its_stack_cannot_serve_is_refused_and_left_as_it_was(mixed):
    fleet = mixed
    host = on(fleet, "trixie")
    # Ubuntu 22.04's interpreter, as far as what the host reads of it: first on sudo's
    # secure_path (the host tool keeps /usr/bin/python3).
    shim = "/usr/local/bin/python3"
    fleet.exec(host, f"printf '#!/bin/sh\\n[ \"$1\" = -V ] && exec echo Python 3.10.12\\nexec /usr/bin/python3 \"$@\"\\n'"
                     f" > {shim} && chmod 755 {shim}")
    try:
        before = tree_digest(fleet, host, LAYOUT.root, "/etc")
        done = pyinfra("deploy.py", "-y", "--limit", host, "--data", "stack=dev-sglang-0.5.23")
        after = tree_digest(fleet, host, LAYOUT.root, "/etc")
    finally:
        fleet.exec(host, f"rm -f {shim}")
    assert done.returncode != 0
    problem = (f"[{host}] {host}: python3 is 3.10.12 (Debian GNU/Linux 13 (trixie), glibc 2.41), which stack "
               f"dev-sglang-0.5.23 does not serve (its lock holds 3.11, 3.12, 3.13): give the host a stack that "
               f"serves it (dev)")
    assert problem in done.stdout, done.stdout[-3000:]
    assert len([line for line in done.stdout.splitlines() if "does not serve" in line]) == 1
    assert after == before


def test_a_host_of_another_python_gets_the_shared_wheels_from_peers_and_its_own_from_the_controller(mixed, tmp_path):
    fleet = mixed
    host = on(fleet, "trixie")
    if fleet.hosts.index(host) == 0:
        pytest.skip("the trixie host is the fan-out's first round here: it has no peers")
    # A copy of the dev stack under another name (another folder on each host), and
    # wheelhouses emptied, so every host fetches: round 0 from the controller, then peers.
    stacks = tmp_path / "stacks"
    shutil.copytree(FILES / "stacks", stacks)
    shutil.copy(stacks / "dev.toml", stacks / "ostest.toml")
    lock_path("ostest", stacks).parent.mkdir(parents=True)
    shutil.copy(lock_path("dev", stacks), lock_path("ostest", stacks))
    for each in fleet.hosts:
        fleet.exec(each, f"rm -rf {LAYOUT.wheelhouse} {LAYOUT.stacks}/ostest-*")
    try:
        done = subprocess.run([PYINFRA, str(fleet.inventory), "tests/data/stack_deploy.py", "-y", "--data", "stack=ostest"],
                              cwd=PROJECT_ROOT, env={**os.environ, "SGLFLEET_STACKS": str(stacks)},
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=300)
    finally:
        for each in fleet.hosts:
            fleet.exec(each, f"rm -rf {LAYOUT.stacks}/ostest-*", check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    stack = stack_on(fleet, host, "ostest", stacks)
    own = [f for f in stack.files if INTERPRETER_TAG.search(f.filename)]
    # cp313 builds of what the dev lock holds compiled: charset-normalizer, markupsafe (jinja2's, for the
    # stand-in's chat templates), orjson, pyyaml
    assert sorted(f.name for f in own) == ["charset-normalizer", "markupsafe", "orjson", "pyyaml"]
    assert re.search(rf"\[{host}\] Stack {stack.id}: {len(stack.files)} wheels \([\d.]+ MB\) from \d+ peer hosts "
                     rf"\({len(own)} only its Python takes from the controller\)", done.stdout), done.stdout[-3000:]
    assert "did not come from peers" not in done.stdout, done.stdout[-3000:]
