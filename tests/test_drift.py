"""
Drift on the local fleet: what a hand changed on a host is reported by a dry
run, repaired by a converge (restarting only what must restart), and gone at
the next converge.
"""

import json
import re
import time

import pytest

from deploying import deploy, host_state, pyinfra, sglfleet
from faulting import results
from paths import LAYOUT, UNIT
from sglfleet.host.drift import KINDS
from sglfleet.host.prometheus import parse

pytestmark = pytest.mark.fleet

def site(fleet, host: str) -> str:
    """The site-packages of ``host``'s venvs, relative to the venv: its python3's."""
    return f"lib/python{fleet.python_of(host)}/site-packages"


def started(fleet, host: str) -> str:
    return fleet.inside(host, f"systemctl show {UNIT} -p ActiveEnterTimestampMonotonic").stdout


def starts(fleet) -> dict:
    return {host: started(fleet, host) for host in fleet.hosts}


def tree(fleet, host: str) -> str:
    return fleet.inside(host, f"find {LAYOUT.root} -xdev \\( -type f -o -type l \\) -printf '%p %l %s\\n' | sort").stdout


def drift_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if "Drift: " in line]


def drift_found(fleet, host: str) -> tuple[dict[str, float], dict[str, float]]:
    """``sglfleet_drift`` and ``sglfleet_drift_found_timestamp_seconds`` by kind, from ``host``'s sglfleet.prom."""
    found = parse(fleet.inside(host, "cat /var/lib/prometheus/node-exporter/sglfleet.prom").stdout)
    return ({labels["kind"]: value for labels, value in found.get("sglfleet_drift", [])},
            {labels["kind"]: value for labels, value in found.get("sglfleet_drift_found_timestamp_seconds", [])})


def repaired_in_one_run(fleet, host: str, kind: str, since: float) -> bool:
    """The converge found ``kind`` on ``host`` after ``since``, repaired it, and left no kind marked."""
    drifted, when = drift_found(fleet, host)
    return set(drifted) == set(KINDS) and set(drifted.values()) == {0.0} and when.get(kind, 0) > since


# Another release first, so that every host has a previous one to drift towards.
OTHER = ("--data", "speculative_num_steps=2", "--data", "speculative_eagle_topk=1",
         "--data", "speculative_num_draft_tokens=3")


@pytest.fixture(scope="module")
def fleet_up(fleet):
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    for args in (OTHER, ()):
        done = deploy(*args)
        assert done.returncode == 0, done.stdout[-3000:]
    assert all(host_state(fleet, host)["previous"] for host in fleet.hosts)
    clean = deploy()
    assert results(clean.stdout)["success"] == 0 and drift_lines(clean.stdout) == [], clean.stdout[-3000:]
    return fleet


def test_a_release_edited_on_the_host_is_put_back_without_a_restart(fleet_up):
    fleet = fleet_up
    current = host_state(fleet, "node2")["current"]
    fleet.inside("node2", f"cd {LAYOUT.releases}/{current} && "
                          "echo '--enable-nan-detection' >> launch.args && sed -i 's/^args=($/args=(\\n    --enable-nan-detection/' launch")
    before_dry, running, since = tree(fleet, "node2"), starts(fleet), time.time()

    dry = pyinfra("deploy.py", "--dry")
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert drift_lines(dry.stdout) == [
        f"[node2] Drift: release {current} changed on the host: launch no longer matches the release's id; "
        f"launch.args no longer matches the release's id; will put back the controller's rendering (the running "
        f"process loaded it at start: no restart)"]
    assert tree(fleet, "node2") == before_dry  # a dry run changes nothing

    repaired = deploy()
    assert repaired.returncode == 0, repaired.stdout[-3000:]
    assert drift_lines(repaired.stdout) == drift_lines(dry.stdout)
    assert "--enable-nan-detection" not in fleet.inside("node2", f"cat {LAYOUT.releases}/{current}/launch").stdout
    assert starts(fleet) == running  # nothing restarted
    assert repaired_in_one_run(fleet, "node2", "release", since), drift_found(fleet, "node2")

    again = deploy()
    assert drift_lines(again.stdout) == [] and results(again.stdout)["success"] == 0, again.stdout[-3000:]


def test_current_moved_by_hand_is_pointed_back_and_status_flags_it(fleet_up):
    fleet = fleet_up
    state = host_state(fleet, "node3")
    fleet.inside("node3", f"ln -sfn releases/{state['previous']} {LAYOUT.current}.new && "
                          f"mv -T {LAYOUT.current}.new {LAYOUT.current}")
    moved = host_state(fleet, "node3")
    assert (moved["current"], moved["serving"]) == (state["previous"], state["current"])
    running, since = starts(fleet), time.time()

    dry = pyinfra("deploy.py", "--dry")
    assert f"[node3] Drift: {LAYOUT.current} changed on the host: points at {state['previous']}, the process " \
           f"serves {state['current']}; will point it back (no restart)" in drift_lines(dry.stdout), dry.stdout[-3000:]
    repaired = deploy()
    assert repaired.returncode == 0, repaired.stdout[-3000:]
    after = host_state(fleet, "node3")
    assert (after["current"], after["serving"]) == (state["current"], state["current"])
    assert starts(fleet) == running
    assert repaired_in_one_run(fleet, "node3", "current", since), drift_found(fleet, "node3")
    again = deploy()
    assert drift_lines(again.stdout) == [] and results(again.stdout)["success"] == 0, again.stdout[-3000:]


def test_a_process_serving_another_release_is_switched_behind_the_gate(fleet_up):
    fleet = fleet_up
    state = host_state(fleet, "node3")
    # By hand: current at the previous release, and a restart, so that one serves.
    fleet.inside("node3", f"ln -sfn releases/{state['previous']} {LAYOUT.current}.new && "
                          f"mv -T {LAYOUT.current}.new {LAYOUT.current} && systemctl restart {UNIT}")
    fleet.inside("node3", "for i in $(seq 100); do "
                          f"{LAYOUT.tool} state | grep -q '\"health\": 200' && break; sleep 0.2; done")
    assert host_state(fleet, "node3")["serving"] == state["previous"]
    others = {host: started(fleet, host) for host in ("node1", "node2")}

    dry = pyinfra("deploy.py", "--dry")
    assert re.search(rf"\[node3\] wave2: will switch {state['previous']} -> {state['current']}, gate", dry.stdout), \
        dry.stdout[-3000:]
    assert host_state(fleet, "node3")["serving"] == state["previous"]  # the dry run switched nothing
    repaired = deploy()
    assert repaired.returncode == 0, repaired.stdout[-3000:]
    assert re.search(rf"\[node3\] wave2: will switch {state['previous']} -> {state['current']}, gate", repaired.stdout)
    assert re.search(rf"\[node3\] wave2: gate passed on {state['current']}", repaired.stdout)
    assert host_state(fleet, "node3")["serving"] == state["current"]
    assert {host: started(fleet, host) for host in ("node1", "node2")} == others
    again = deploy()
    assert results(again.stdout)["success"] == 0 and "will switch" not in again.stdout, again.stdout[-3000:]


def test_a_stack_changed_on_the_host_is_rebuilt_and_its_release_restarted_behind_the_gate(fleet_up):
    fleet = fleet_up
    stack = host_state(fleet, "node1")["stack"]
    venv = f"{LAYOUT.stacks}/{stack}/venv"
    # A stray sitecustomize.py runs at every start of the stack's python.
    fleet.inside("node1", f"echo 'import os' > {venv}/{site(fleet, 'node1')}/sitecustomize.py")
    others = {host: started(fleet, host) for host in ("node2", "node3")}
    running, since = started(fleet, "node1"), time.time()

    dry = pyinfra("deploy.py", "--dry")
    assert drift_lines(dry.stdout) == [
        f"[node1] Drift: stack {stack} changed on the host: added {site(fleet, 'node1')}/sitecustomize.py; will build it again from "
        f"its lock, then restart the release that serves from it behind its gate"], dry.stdout[-3000:]

    repaired = deploy()
    assert repaired.returncode == 0, repaired.stdout[-3000:]
    assert re.search(r"\[node1\] canary: gate passed on \w+", repaired.stdout), repaired.stdout[-3000:]
    assert fleet.inside("node1", f"test -e {venv}/{site(fleet, 'node1')}/sitecustomize.py", check=False).returncode == 1
    assert started(fleet, "node1") != running
    assert repaired_in_one_run(fleet, "node1", "stack", since), drift_found(fleet, "node1")
    assert {host: started(fleet, host) for host in ("node2", "node3")} == others
    again = deploy()
    assert drift_lines(again.stdout) == [] and results(again.stdout)["success"] == 0, again.stdout[-3000:]


def test_a_file_rewritten_in_place_is_found_only_by_the_full_check(fleet_up):
    fleet = fleet_up
    stack = host_state(fleet, "node2")["stack"]
    target = f"{LAYOUT.stacks}/{stack}/venv/{site(fleet, 'node2')}/packaging/version.py"
    # Same size, same time: the snapshot cannot see it; the wheel's RECORD hash can.
    fleet.inside("node2", f"cp -p {target} /tmp/version.py.orig && "
                          f"sed -i '0,/\"\"\"/s//\"\"\"X/; 0,/  /s/  / /' {target} && touch -r /tmp/version.py.orig {target}")
    assert fleet.inside("node2", f"stat -c %s {target} /tmp/version.py.orig").stdout.split()[0] == \
        fleet.inside("node2", "stat -c %s /tmp/version.py.orig").stdout.split()[0]

    quick = pyinfra("deploy.py", "--dry")
    assert drift_lines(quick.stdout) == [], quick.stdout[-3000:]
    full = pyinfra("deploy.py", "--dry", "--data", "verify_stacks=full")
    assert drift_lines(full.stdout) == [
        f"[node2] Drift: stack {stack} changed on the host: changed packaging/version.py; will build it again "
        f"from its lock, then restart the release that serves from it behind its gate"], full.stdout[-3000:]
    repaired = deploy("--data", "verify_stacks=full")
    assert repaired.returncode == 0, repaired.stdout[-3000:]
    assert fleet.inside("node2", f"cmp {target} /tmp/version.py.orig", check=False).returncode == 0
    clean = pyinfra("deploy.py", "--dry", "--data", "verify_stacks=full")
    assert drift_lines(clean.stdout) == [], clean.stdout[-3000:]


def test_status_shows_declared_current_and_serving(fleet_up):
    fleet = fleet_up
    state = host_state(fleet, "node2")
    fleet.inside("node2", f"ln -sfn releases/{state['previous']} {LAYOUT.current}.new && "
                          f"mv -T {LAYOUT.current}.new {LAYOUT.current}")
    try:
        shown = sglfleet("status", "inventory/dev.py")
        rows = json.loads(sglfleet("status", "inventory/dev.py", "--json").stdout)
    finally:
        deploy()  # points it back
    line = next(line for line in shown.stdout.splitlines() if line.startswith("node2"))
    assert f"{state['previous'][:12]} (not declared!)" in line and f"{state['current'][:12]} (not current!)" in line, \
        shown.stdout
    row = next(row for row in rows if row["host"] == "node2")
    assert (row["declared"], row["current"], row["serving"]) == (state["current"], state["previous"], state["current"])


def test_two_files_changed_in_one_operation_both_show_in_a_dry_run(fleet_up):
    """pyinfra plans an operation only up to its first command: every diff is said before it."""
    fleet = fleet_up
    fleet.inside("node1", f"sed -i 's/^Restart=on-failure$/Restart=always/' {LAYOUT.unit_file} && "
                          f"echo '# edited by hand' >> {LAYOUT.lib}/sglfleet_host/layout.py")
    before = tree(fleet, "node1")
    dry = pyinfra("deploy.py", "--dry", "--diff")
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert f"[node1] Will update {LAYOUT.unit_file}" in dry.stdout
    assert f"[node1] Will update {LAYOUT.lib}/sglfleet_host/layout.py" in dry.stdout
    assert re.search(r"^\s+- Restart=always$", dry.stdout, re.M) and re.search(r"^\s+- # edited by hand$", dry.stdout, re.M)
    assert tree(fleet, "node1") == before
    # -y skips pyinfra's own change table, but a dry run still shows every diff.
    confirmed = pyinfra("deploy.py", "-y", "--dry", "--diff")
    assert confirmed.returncode == 0, confirmed.stdout[-3000:]
    assert f"[node1] Will update {LAYOUT.unit_file}" in confirmed.stdout
    assert f"[node1] Will update {LAYOUT.lib}/sglfleet_host/layout.py" in confirmed.stdout
    assert re.search(r"^\s+- Restart=always$", confirmed.stdout, re.M), confirmed.stdout[-3000:]
    assert tree(fleet, "node1") == before
    plain = pyinfra("deploy.py", "--dry")  # without --diff: which file, and what differs
    assert f"[node1] Will write {LAYOUT.unit_file}: its content differs on the host" in plain.stdout
    assert f"[node1] Will write {LAYOUT.lib}/sglfleet_host/layout.py: its content differs on the host" in plain.stdout
    repaired = deploy()
    assert repaired.returncode == 0, repaired.stdout[-3000:]
    assert "Restart=on-failure" in fleet.inside("node1", f"cat {LAYOUT.unit_file}").stdout
