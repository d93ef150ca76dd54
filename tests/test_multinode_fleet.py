"""
One server over two hosts, on the local fleet: ``SGLFLEET_DEV_MULTINODE=1`` makes node1 and node2 one
group (node1 the head, node2 rank 1), ``SGLFLEET_DEV_GATEWAYS=1`` the last host the gateway, and node3
serves alone beside them. A converge and a generation through the gateway (the head alone its worker);
the init port open between the group's hosts alone; the dry run showing the group as one unit; a rollout
under the clients' traffic (the openai SDK, streamed) that restarts the group as one unit and answers
every request; a failed gate, and a failed bake, on the group that roll both its hosts back (previous
left as it was); rollback.py taking the group back as one unit under traffic; a second converge that
changes nothing. A fourth host joins the fleet for the module and leaves after it. docs/topologies.md
is the design.
"""

import json
import re
import time
import urllib.request

import pytest

from deploying import SECRETS, eagle_change, fleet_key, host_state, pyinfra, sshd_commands, sshd_logs_sessions
from paths import GATEWAY, UNIT
from reaching import from_controller, from_host
from routing import Load
from sglfleet.devfleet import Fleet
from sglfleet.devfleet.traffic import CLIENT_MIX
from test_rollout import results, started_at

pytestmark = pytest.mark.fleet

MULTINODE = {"SGLFLEET_DEV_MULTINODE": "1", "SGLFLEET_DEV_GATEWAYS": "1"}
KEY = SECRETS["SGLFLEET_API_KEY"]
INIT_PORT = 20000  # inventory/group_data/all.py's dist_init_port


def deploy(*args: str, timeout: float = 900):
    """``pyinfra inventory/dev.py deploy.py -y ARGS`` with node1 + node2 one group and the last host the gateway."""
    return pyinfra("deploy.py", "-y", *args, timeout=timeout, env=MULTINODE)


def listed(url: str) -> set[str]:
    """The gateway's workers' URLs (``GET /workers``, with gateway-admin)."""
    request = urllib.request.Request(f"{url}/workers", headers={"Authorization": f"Bearer {fleet_key(Fleet())}"})
    return {w["url"] for w in json.load(urllib.request.urlopen(request, timeout=5))["workers"]}


def links(fleet, host: str) -> tuple[str, str]:
    """The host's current and previous releases."""
    state = host_state(fleet, host)
    return state["current"], state["previous"]


def inside_get(fleet, host: str, url: str) -> int:
    """The status a GET of ``url`` answers from inside ``host`` (no login)."""
    out = fleet.inside(host, "python3 -c 'import urllib.request, urllib.error\ntry: print(urllib.request.urlopen("
                             f"\"{url}\", timeout=10).status)\nexcept urllib.error.HTTPError as e: print(e.code)'").stdout
    return int(out.strip() or 0)


@pytest.fixture(scope="module")
def topology(fleet):
    """The fleet converged: ``(head, rank 1, the host alone, the gateway, its URL)``."""
    # The group's two, one alone, the gateway: a fourth host for this module, gone after it (up(n) stops the extra).
    had = len(fleet.hosts)
    if had < 4:
        fleet.up(4)
    head, rank, alone, gateway = fleet.hosts[0], fleet.hosts[1], fleet.hosts[2], fleet.hosts[-1]
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    for host in fleet.hosts[:-1]:
        fleet.inside(host, f"systemctl stop {UNIT} 2>/dev/null || true")
    done = deploy()
    assert done.returncode == 0, done.stdout[-3000:]
    yield head, rank, alone, gateway, f"http://{fleet.address(gateway)}:30080"
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    # The suite's other modules know neither groups nor a gateway: the hosts go back to plain ones.
    for host in fleet.hosts:
        fleet.inside(host, f"systemctl disable --now {GATEWAY.unit} 2>/dev/null; rm -f {GATEWAY.unit_file} "
                           f"{GATEWAY.env_file}; systemctl daemon-reload")
    for host in fleet.hosts[:-1]:
        fleet.inside(host, f"systemctl stop {UNIT} 2>/dev/null || true")
    if had < 4:
        fleet.up(had)


def test_the_group_serves_through_the_gateway_and_its_head_alone_is_a_worker(fleet, topology):
    head, rank, alone, gateway, url = topology
    assert listed(url) == {f"http://{fleet.address(head)}:30000", f"http://{fleet.address(alone)}:30000"}
    launch = fleet.exec(rank, "cat /opt/sglfleet/current/launch.args").stdout
    assert "--node-rank 1" in launch and f"--dist-init-addr {fleet.address(head)}:{INIT_PORT}" in launch
    # rank 1 answers the dummy /health of sglang 0.5.9's ranks above 0, and no API
    assert inside_get(fleet, rank, f"http://{fleet.address(rank)}:30000/health") == 200
    assert inside_get(fleet, rank, f"http://{fleet.address(rank)}:30000/v1/models") == 404
    request = urllib.request.Request(f"{url}/generate", data=json.dumps(
        {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8}}).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    for _ in range(4):  # round robin: the group's head and the host alone
        assert json.load(urllib.request.urlopen(request, timeout=60))["meta_info"]["completion_tokens"] == 8


def test_the_init_port_answers_the_groups_hosts_alone(fleet, topology):
    head, rank, alone, gateway, _ = topology
    address = fleet.address(head)
    assert from_host(fleet, rank, address, INIT_PORT)
    assert not from_host(fleet, alone, address, INIT_PORT)
    assert not from_host(fleet, gateway, address, INIT_PORT)
    assert not from_controller(address, INIT_PORT)


def test_a_second_converge_changes_nothing(fleet, topology):
    sshd_logs_sessions(fleet, fleet.hosts)
    since = time.time()
    result = deploy()
    assert result.returncode == 0, result.stdout[-3000:]
    totals = results(result.stdout)
    assert totals["success"] == 0 and totals["error"] == 0, result.stdout[-3000:]
    assert {host: sshd_commands(fleet, host, since) for host in fleet.hosts} == dict.fromkeys(fleet.hosts, 1)


def test_the_dry_run_shows_the_group_as_one_unit(fleet, topology):
    head, rank, alone, _, _ = topology
    result = pyinfra("deploy.py", "--dry", "--diff", *eagle_change(2), env=MULTINODE, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:]
    for host in (head, rank):
        assert re.search(rf"\[{host}\] canary batch 1: will switch \w+ -> \w+ with its group \({head}, {rank}\), "
                         rf"as one unit, gate", result.stdout), result.stdout[-3000:]
    assert re.search(rf"\[{alone}\] wave1 batch 2: will switch \w+ -> \w+, gate", result.stdout)


def test_a_rollout_under_traffic_restarts_the_group_as_one_unit(fleet, topology):
    head, rank, alone, _, url = topology
    serving = [head, rank, alone]
    before = {host: host_state(fleet, host)["current"] for host in serving}
    load = Load(url, mix=CLIENT_MIX)
    time.sleep(2)
    try:
        result = deploy(*eagle_change(2))
    finally:
        time.sleep(2)
        load.stop()
    assert result.returncode == 0, result.stdout[-3000:]
    assert all(host_state(fleet, host)["current"] != before[host] for host in serving)
    print(f"through the gateway during the rollout: {load.summary()}")
    assert load.failed() == [] and load.cut() == [], load.summary()  # the head left the gateway before the stop
    # One unit: the group's hosts started within seconds of each other, both before the host alone.
    starts = {host: started_at(fleet, host) for host in serving}
    assert abs(starts[head] - starts[rank]) < 10_000_000, starts
    assert max(starts[head], starts[rank]) < starts[alone], starts
    assert "its batch leaves the gateways" in result.stdout and "its batch stops before any host starts" in result.stdout


def test_a_failed_gate_on_the_group_rolls_both_its_hosts_back(fleet, topology):
    head, rank, alone, _, url = topology
    before = {host: links(fleet, host) for host in (head, rank, alone)}
    fleet.fault(rank, "crash")  # rank 1's new release crashes: the group never forms; the one it serves is spared
    load = Load(url, mix=CLIENT_MIX)
    time.sleep(2)
    try:
        result = deploy(*eagle_change(4))
        time.sleep(2)
    finally:
        load.stop()
        fleet.fault(rank, "clear")
    assert result.returncode == 1, result.stdout[-3000:]
    assert re.search(rf"[:;] {rank} \(gate failed on release \w+", result.stdout), result.stdout[-3000:]
    assert "its group rolls back together" in result.stdout
    assert re.search(rf"\[{head}\].*rolled back with its group", result.stdout) or \
        re.search(rf"[:;] {head} \(gate failed", result.stdout), result.stdout[-3000:]
    # Both hosts of the group serve what they served; the canary stopped the run before the host alone.
    # previous too: where rollback.py goes is what it was, not the release that failed
    assert {host: links(fleet, host) for host in (head, rank, alone)} == before
    assert host_state(fleet, head)["health"] == 200
    assert listed(url) == {f"http://{fleet.address(head)}:30000", f"http://{fleet.address(alone)}:30000"}
    print(f"through the gateway during the failed group: {load.summary()}")
    assert load.cut() == [], load.summary()


def test_a_failed_bake_on_the_group_rolls_both_its_hosts_back_under_traffic(fleet, topology):
    head, rank, alone, _, url = topology
    before = {host: links(fleet, host) for host in (head, rank, alone)}
    untouched = started_at(fleet, alone)
    # The group passes its gate, then its head's bake fails (a TTFT limit no server meets) while clients
    # stream through the gateway: the head does not go back alone, its group does, as one unit.
    bake = ("--data", "gate_bake_s=4", "--data", "gate_interval_s=1", "--data", "gate_max_ttft_p99_s=0.000001")
    load = Load(url, mix=CLIENT_MIX)
    time.sleep(2)
    try:
        result = deploy(*eagle_change(5), *bake)
        time.sleep(2)
    finally:
        load.stop()
    assert result.returncode == 1, result.stdout[-3000:]
    assert re.search(rf"\[{head}\] canary batch 1: gate passed on \w+", result.stdout), result.stdout[-3000:]
    assert re.search(rf"\[{head}\] bake fail on release \w+: TTFT p99 [\d.]+ s is above the limit 1e-06",
                     result.stdout), result.stdout[-3000:]
    assert re.search(rf"\[{head}\].*its group rolls back together at the settle", result.stdout)
    # It leaves the gateways, then stops whole (the streams on its head ended), then goes back together.
    assert "a failed group stops whole" in result.stdout
    assert re.search(rf"\[{rank}\].*rolled back with its group: {head} failed", result.stdout), result.stdout[-3000:]
    # Both hosts serve what they served, restarted together; the canary stopped the run before the host alone.
    # previous too: where rollback.py goes is what it was, not the release that failed
    assert {host: links(fleet, host) for host in (head, rank, alone)} == before
    starts = {host: started_at(fleet, host) for host in (head, rank)}
    assert abs(starts[head] - starts[rank]) < 10_000_000, starts
    assert started_at(fleet, alone) == untouched
    assert host_state(fleet, head)["health"] == 200
    assert listed(url) == {f"http://{fleet.address(head)}:30000", f"http://{fleet.address(alone)}:30000"}
    print(f"through the gateway during the failed bake: {load.summary()}")
    assert load.failed() == [] and load.cut() == [], load.summary()


def test_rollback_takes_the_group_back_as_one_unit_under_traffic(fleet, topology):
    head, rank, alone, _, url = topology
    serving = [head, rank, alone]
    before = {host: host_state(fleet, host) for host in serving}
    load = Load(url, mix=CLIENT_MIX)
    time.sleep(2)
    try:
        result = pyinfra("rollback.py", "-y", env=MULTINODE, timeout=900)
    finally:
        time.sleep(2)
        load.stop()
    assert result.returncode == 0, result.stdout[-3000:]
    assert {host: host_state(fleet, host)["current"] for host in serving} == \
        {host: before[host]["previous"] for host in serving}
    # One unit, as a rollout: the head drained, both stopped, both started at once, before the host alone.
    assert "its batch leaves the gateways" in result.stdout and "its batch stops before any host starts" in result.stdout
    starts = {host: started_at(fleet, host) for host in serving}
    assert abs(starts[head] - starts[rank]) < 10_000_000, starts
    assert max(starts[head], starts[rank]) < starts[alone], starts
    assert listed(url) == {f"http://{fleet.address(head)}:30000", f"http://{fleet.address(alone)}:30000"}
    print(f"through the gateway during the rollback: {load.summary()}")
    assert load.failed() == [] and load.cut() == [], load.summary()
