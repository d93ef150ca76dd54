"""
A new model revision rolled out in place on the local fleet (issue 43): the demo mirror's tiny model in two
revisions (``sglfleet.devfleet.mirror.demo_models``), node1 and node2 serving it on the dev stack (sglang
0.5.9, EAGLE-3: its update reloads the target alone) behind node3's gateway, the official ``openai`` SDK's
streamed traffic through the gateway meanwhile.

What is checked on the hosts: no unit restarted (its main process and start time are the same), each
serves the new revision (``/model_info``'s ``weight_version``, ``sglfleet-release state``), ``sglfleet
status`` shows it, and every request through the gateway was answered in full; the dry run names the
change in place per host, and a flag changed in the same run restarts; a canary whose update fails its
gate serves the old revision again and the run stops there; a second converge changes nothing.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploying import eagle_change, host_state, pyinfra, sglfleet
from faulting import results
from paths import UNIT
from routing import Load, free_port
from sglfleet.devfleet.mirror import start_demo, stop_demo
from sglfleet.devfleet.traffic import CLIENT_MIX
from sglfleet.host.layout import GATEWAY
from test_gateway import clients_answered_in_full

pytestmark = pytest.mark.fleet

SGLFLEET = str(Path(sys.executable).with_name("sglfleet"))


@pytest.fixture(scope="module")
def demo(fleet):
    """
    The demo mirror up with both revisions locked, and the fleet converged on the first: ``(fleet, the
    mirror's record, the environment of every run: the last host a gateway, the mirror's manifests)``.
    """
    if len(fleet.hosts) < 3:
        pytest.skip("needs a fleet of three hosts or more: two workers and a gateway")

    def lock(repo, revision, url, manifests):
        done = subprocess.run([SGLFLEET, "model", "lock", f"{repo}@{revision}", "--endpoint", url],
                              env={**os.environ, "SGLFLEET_MODELS": str(manifests)}, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr

    record = start_demo(fleet.state_dir, fleet.state()["gateway"], free_port(), lock)
    env = {"SGLFLEET_DEV_GATEWAYS": "1", "SGLFLEET_MODELS": record["manifests"]}
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    done = pyinfra("deploy.py", "-y", env=env)
    assert done.returncode == 0, done.stdout[-3000:]
    try:
        yield fleet, record, env
    finally:
        stop_demo(fleet.state_dir)
        for host in fleet.hosts:
            fleet.fault(host, "clear")
        # The suite's other modules know no gateway and serve by name: the hosts go back to plain ones.
        for host in fleet.hosts:
            fleet.inside(host, f"systemctl disable --now {GATEWAY.unit} 2>/dev/null; rm -f {GATEWAY.unit_file} "
                               f"{GATEWAY.env_file}; systemctl daemon-reload")


def workers(fleet) -> list[str]:
    return fleet.hosts[:-1]


def unit_start(fleet, host: str) -> tuple[str, str]:
    """The unit's main process and when it entered active: both the same after an update in place."""
    shown = fleet.inside(host, f"systemctl show {UNIT} -p MainPID -p ActiveEnterTimestampMonotonic").stdout
    return tuple(sorted(shown.split()))


def weight_version(fleet, host: str) -> str:
    """What the host's server says it serves (/model_info, asked on the host: behind gateways it needs no key)."""
    shown = fleet.inside(host, "python3 -c 'import urllib.request; print(urllib.request.urlopen("
                               f"\"http://{fleet.address(host)}:30000/model_info\", timeout=10).read().decode())'")
    return json.loads(shown.stdout)["weight_version"]


def deploy(env: dict, *args: str, timeout: float = 600):
    return pyinfra("deploy.py", "-y", *args, env=env, timeout=timeout)


def test_a_new_revision_rolls_out_in_place_on_every_host_under_streamed_traffic(demo):
    fleet, record, env = demo
    old, new = record["revisions"]
    before = {host: unit_start(fleet, host) for host in workers(fleet)}
    url = f"http://{fleet.address(fleet.hosts[-1])}:30080"
    load = Load(url, mix=CLIENT_MIX)
    time.sleep(2)
    try:
        done = deploy(env, "--data", f"model_revision={new}")
    finally:
        time.sleep(2)
        load.stop()
    assert done.returncode == 0, done.stdout[-3000:]
    print(f"through the gateway during the update: {load.summary()}")
    clients_answered_in_full(load)
    for host in workers(fleet):
        assert re.search(rf"\[{host}\] \w+: in place: only the weights change \({old[:12]} -> {new[:12]}\)",
                         done.stdout), done.stdout[-3000:]
        assert unit_start(fleet, host) == before[host]  # no restart
        state = host_state(fleet, host)
        assert (state["serving"], state["revision"], state["in_place"]) == (state["current"], new, True)
        assert weight_version(fleet, host) == new
    assert "will switch" not in done.stdout
    # sglfleet status shows the revision each host serves, loaded in place.
    shown = sglfleet("status", "inventory/dev.py", "--json")
    rows = {row["host"]: row for row in json.loads(shown.stdout) if "gateway" not in row}
    assert {host: (rows[host]["revision"], rows[host]["in_place"]) for host in workers(fleet)} == \
        dict.fromkeys(workers(fleet), (new, True))


def test_a_second_converge_changes_nothing(demo):
    fleet, record, env = demo
    before = {host: unit_start(fleet, host) for host in workers(fleet)}
    done = deploy(env, "--data", f"model_revision={record['revisions'][1]}")
    assert done.returncode == 0, done.stdout[-3000:]
    totals = results(done.stdout)
    assert totals["success"] == 0 and totals["error"] == 0, done.stdout[-3000:]
    assert {host: unit_start(fleet, host) for host in workers(fleet)} == before


def test_the_dry_run_names_the_update_in_place_and_a_flag_changed_with_it_restarts(demo):
    fleet, record, env = demo
    old, new = record["revisions"]
    dry = pyinfra("deploy.py", "--dry", "--diff", "--data", f"model_revision={old}", env=env)
    assert dry.returncode == 0, dry.stdout[-3000:]
    for host in workers(fleet):
        assert re.search(rf"\[{host}\] \w+: in place: only the weights change \({new[:12]} -> {old[:12]}\)",
                         dry.stdout), dry.stdout[-3000:]
    before = {host: unit_start(fleet, host) for host in workers(fleet)}
    done = deploy(env, "--data", f"model_revision={old}", *eagle_change(2))
    assert done.returncode == 0, done.stdout[-3000:]
    for host in workers(fleet):
        assert re.search(rf"\[{host}\] \w+: will switch \w+ -> \w+, gate \(restart: speculative_eagle_topk, speculative_num_draft_tokens, "
                         rf"speculative_num_steps change\)", done.stdout), done.stdout[-3000:]
        assert unit_start(fleet, host) != before[host]
        state = host_state(fleet, host)
        assert (state["revision"], state["in_place"]) == (old, False)


def test_a_canary_whose_update_fails_its_gate_serves_the_old_revision_and_the_run_stops(demo):
    fleet, record, env = demo
    old, new = record["revisions"]
    canary, later = workers(fleet)[0], workers(fleet)[1:]
    serving = {host: host_state(fleet, host)["current"] for host in workers(fleet)}
    before = {host: unit_start(fleet, host) for host in workers(fleet)}
    fleet.fault(canary, "update-fails")
    done = deploy(env, "--data", f"model_revision={new}", *eagle_change(2))
    assert done.returncode != 0, done.stdout[-3000:]
    assert "in-place update to" in done.stdout and "updated back to" in done.stdout, done.stdout[-3000:]
    # The canary loaded its old weights back, in place; the later waves never started.
    assert host_state(fleet, canary)["current"] == serving[canary]
    assert unit_start(fleet, canary) == before[canary]
    assert weight_version(fleet, canary) == old
    for host in later:
        assert host_state(fleet, host)["current"] == serving[host] and unit_start(fleet, host) == before[host]
    assert "not started" in done.stdout
    fleet.fault(canary, "clear")
