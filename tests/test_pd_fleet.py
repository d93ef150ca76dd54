"""
Prefill and decode on separate hosts, on the local fleet: ``SGLFLEET_DEV_PD=1`` makes the serving hosts
prefills and decodes in turn (node1 prefill, node2 decode, ...), ``SGLFLEET_DEV_GATEWAYS=1`` the last
host the gateway, which runs the real smg 1.13.0 in PD mode. A converge and a generation through it
(prefill -> decode, each role's metrics); a rollout under the clients' traffic that never pairs two
releases (every decode's stand-in counts a pair it refused); a decode canary that fails its gate and
rolls its unit back; a rollback that goes back unit by unit; a second converge that changes nothing;
bad PD inventories refused before any connection. docs/pd.md is the design.

The suite's fleet has three hosts: one prefill, one decode, the gateway. With one unit the first
batch is the whole fleet, so while it switches no pair is routable, and the gateway answers 503
("No available servers"): the rollout test then asserts that only such requests failed. With five
hosts (``sglfleet devfleet up --hosts 5``: two prefills, two decodes, a gateway) the canary unit
switches while the other serves, and at the flip the new units join beside the old release under a
``pairing_protocol`` of their own before it leaves: the test asserts that no request failed at all.
"""

import json
import re
import time
import urllib.request

import pytest

from sglfleet.devfleet import Fleet
from deploying import fleet_key, SECRETS, eagle_change, host_state, pyinfra, sglfleet, sshd_commands, sshd_connections, \
    sshd_logs_sessions, journal_shows_logins
from paths import GATEWAY, UNIT
from reaching import from_controller, from_host
from routing import Load
from sglfleet.devfleet.traffic import CLIENT_MIX
from test_rollout import results

pytestmark = pytest.mark.fleet

PD = {"SGLFLEET_DEV_PD": "1", "SGLFLEET_DEV_GATEWAYS": "1"}
KEY = SECRETS["SGLFLEET_API_KEY"]
MISMATCHED = "sglfleet_standin_pd_mismatched_pairs_total"


def deploy(*args: str, timeout: float = 900):
    """``pyinfra inventory/dev.py deploy.py -y ARGS`` with the serving hosts in roles and the last host the gateway."""
    return pyinfra("deploy.py", "-y", *args, timeout=timeout, env=PD)


def listed(url: str) -> dict[str, dict]:
    """The gateway's workers by URL (``GET /workers``, with gateway-admin)."""
    request = urllib.request.Request(f"{url}/workers", headers={"Authorization": f"Bearer {fleet_key(Fleet())}"})
    return {w["url"]: w for w in json.load(urllib.request.urlopen(request, timeout=5))["workers"]}


def metric(fleet, host: str, name: str) -> float:
    """One unlabelled series of the host's stand-in /metrics, read from inside the host (no login)."""
    # A PD server listens on its fleet address (its peers and the gateway reach it there), not on loopback.
    text = fleet.inside(host, "python3 -c 'import urllib.request; print(urllib.request.urlopen("
                             f"\"http://{fleet.address(host)}:30000/metrics\", timeout=10).read().decode())'").stdout
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    assert values, f"{host}: no {name} in its /metrics"
    return sum(values)


def mismatched(fleet, decodes) -> dict[str, float]:
    return {host: metric(fleet, host, MISMATCHED) for host in decodes}


@pytest.fixture(scope="module")
def topology(fleet):
    """The PD fleet converged: ``(gateway, its URL, prefills, decodes)``."""
    if len(fleet.hosts) < 3:
        pytest.skip("needs three hosts or more: a prefill, a decode and the gateway")
    gateway, serving = fleet.hosts[-1], fleet.hosts[:-1]
    prefills, decodes = serving[0::2], serving[1::2]
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    for host in serving:
        fleet.inside(host, f"systemctl stop {UNIT} 2>/dev/null || true")
    done = deploy()
    assert done.returncode == 0, done.stdout[-3000:]
    yield gateway, f"http://{fleet.address(gateway)}:30080", prefills, decodes
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    # The suite's other modules know neither roles nor a gateway: the hosts go back to plain ones.
    for host in fleet.hosts:
        fleet.inside(host, f"systemctl disable --now {GATEWAY.unit} 2>/dev/null; rm -f {GATEWAY.unit_file} "
                           f"{GATEWAY.env_file}; systemctl daemon-reload")
    for host in serving:
        fleet.inside(host, f"systemctl stop {UNIT} 2>/dev/null || true")


def test_the_bootstrap_port_answers_the_pd_hosts_alone(fleet, topology):
    gateway, _, prefills, decodes = topology
    prefill = fleet.address(prefills[0])
    assert from_host(fleet, decodes[0], prefill, 8998)  # a decode asks the prefill's bootstrap server
    assert not from_host(fleet, gateway, prefill, 8998)  # smg names the port, never connects to it
    assert not from_controller(prefill, 8998) and not from_controller(prefill, 30000)
    assert from_host(fleet, gateway, prefill, 30000)  # the gateway reaches the engine itself


def test_the_gateway_routes_each_generation_from_a_prefill_to_a_decode(fleet, topology):
    gateway, url, prefills, decodes = topology
    roles = {w["url"]: w.get("worker_type") for w in listed(url).values()}
    assert roles == {**{f"http://{fleet.address(h)}:30000": "prefill" for h in prefills},
                     **{f"http://{fleet.address(h)}:30000": "decode" for h in decodes}}
    unit = fleet.exec(gateway, f"systemctl cat {GATEWAY.unit}").stdout
    assert "--pd-disaggregation" in unit and f"--prefill http://{fleet.address(prefills[0])}:30000 8998" in unit
    sent = sum(metric(fleet, host, "sglfleet_standin_pd_kv_sent_total") for host in prefills)
    request = urllib.request.Request(f"{url}/generate", data=json.dumps(
        {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8}}).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    answer = json.load(urllib.request.urlopen(request, timeout=60))
    assert answer["meta_info"]["completion_tokens"] == 8
    assert sum(metric(fleet, host, "sglfleet_standin_pd_kv_sent_total") for host in prefills) == sent + 1
    assert set(mismatched(fleet, decodes).values()) == {0}
    # Each role shows its own series.
    assert sum(metric(fleet, host, "sglfleet_standin_pd_kv_received_total") for host in decodes) >= 1  # 2+2: either


def test_status_shows_each_workers_role(fleet, topology):
    gateway, url, prefills, decodes = topology
    with pytest.MonkeyPatch.context() as patch:
        for name, value in PD.items():
            patch.setenv(name, value)
        shown = sglfleet("status", "inventory/dev.py", timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert re.search(rf"http://{re.escape(fleet.address(prefills[0]))}:30000 \(prefill\)\s+healthy", shown.stdout)
    assert re.search(rf"http://{re.escape(fleet.address(decodes[0]))}:30000 \(decode\)\s+healthy", shown.stdout)


def test_a_second_converge_changes_nothing(fleet, topology):
    sshd_logs_sessions(fleet, fleet.hosts)
    since = time.time()
    result = deploy()
    assert result.returncode == 0, result.stdout[-3000:]
    totals = results(result.stdout)
    assert totals["success"] == 0 and totals["error"] == 0, result.stdout[-3000:]
    assert {host: sshd_commands(fleet, host, since) for host in fleet.hosts} == dict.fromkeys(fleet.hosts, 1)


def test_a_rollout_under_traffic_never_pairs_two_releases(fleet, topology):
    gateway, url, prefills, decodes = topology
    serving = [*prefills, *decodes]
    before = {host: host_state(fleet, host)["current"] for host in serving}
    refused = mismatched(fleet, decodes)
    load = Load(url, mix=CLIENT_MIX)
    time.sleep(2)
    try:
        result = deploy(*eagle_change(2))
    finally:
        time.sleep(2)
        load.stop()
    assert result.returncode == 0, result.stdout[-3000:]
    assert all(host_state(fleet, host)["current"] != before[host] for host in serving)
    print(f"through the PD gateway during the rollout: {load.summary()}")
    # Not one pair of two releases: every decode's stand-in would have refused and counted it.
    assert mismatched(fleet, decodes) == refused
    assert "the gateways flip to the new release" in result.stdout
    assert load.cut() == [], load.summary()
    if len(prefills) >= 2 and len(decodes) >= 2:
        assert load.failed() == [], load.summary()  # two units: one serves while the other switches
    else:
        # One unit: while it switches the gateway has no pair, and says so (smg's 503, no cut stream).
        assert {request.outcome for request in load.failed()} <= {503}, load.summary()
    assert {w.get("worker_type") for w in listed(url).values()} == {"prefill", "decode"}
    assert all(w["is_healthy"] for w in listed(url).values())
    # smg pairs only within one pairing_protocol: every worker now carries the new release's own.
    pairings = {w.get("pd_pairing") for w in listed(url).values()}
    assert len(pairings) == 1 and pairings.pop().startswith("sglfleet-"), listed(url)


def test_a_decode_canary_that_fails_its_gate_rolls_its_unit_back(fleet, topology):
    gateway, url, prefills, decodes = topology
    serving = [*prefills, *decodes]
    before = {host: host_state(fleet, host)["current"] for host in serving}
    refused = mismatched(fleet, decodes)
    canary_decode = decodes[0]
    fleet.fault(canary_decode, "crash")  # its new release crashes; the one it serves now is spared
    load = Load(url, mix=CLIENT_MIX)
    time.sleep(2)
    try:
        result = deploy(*eagle_change(4))
        time.sleep(2)
    finally:
        load.stop()
        fleet.fault(canary_decode, "clear")
    assert result.returncode == 1, result.stdout[-3000:]
    assert re.search(rf"failed: {canary_decode} \(gate failed on release \w+", result.stdout), result.stdout[-3000:]
    # Decode first: its prefill never switched; the unit serves what it served, back in the gateway, unflipped.
    assert {host: host_state(fleet, host)["current"] for host in serving} == before
    assert re.search(r"not switched: .* of its unit failed", result.stdout), result.stdout[-3000:]
    assert "the gateways flip to the new release" not in result.stdout
    assert mismatched(fleet, decodes) == refused
    assert all(w["is_healthy"] for w in listed(url).values()) and len(listed(url)) == len(serving)
    print(f"through the PD gateway during the failed canary: {load.summary()}")
    assert load.cut() == [], load.summary()


def test_a_rollback_goes_back_unit_by_unit_and_never_pairs_two_releases(fleet, topology):
    gateway, url, prefills, decodes = topology
    serving = [*prefills, *decodes]
    before = {host: host_state(fleet, host) for host in serving}
    refused = mismatched(fleet, decodes)
    load = Load(url, mix=CLIENT_MIX)
    time.sleep(2)
    try:
        result = pyinfra("rollback.py", "-y", env=PD, timeout=900)
    finally:
        time.sleep(2)
        load.stop()
    assert result.returncode == 0, result.stdout[-3000:]
    assert {host: host_state(fleet, host)["current"] for host in serving} == \
        {host: before[host]["previous"] for host in serving}
    assert "the gateways flip to the new release" in result.stdout
    assert mismatched(fleet, decodes) == refused
    print(f"through the PD gateway during the rollback: {load.summary()}")
    assert load.cut() == [], load.summary()


@pytest.mark.parametrize("env, data, fragment", [
    ({"SGLFLEET_DEV_PD": "1"}, (), "disaggregation_mode without a gateway"),
    (PD, ("--data", "disaggregation_transfer_backend=mooncake-tcp"), "is not a backend of sglang"),
], ids=["roles-without-a-gateway", "unknown-backend"])
def test_bad_pd_inventories_are_refused_before_any_connection(fleet, topology, env, data, fragment):
    since = time.time()
    refused = pyinfra("deploy.py", "-y", *data, env=env, timeout=120)
    assert refused.returncode == 2, refused.stdout[-3000:]
    assert fragment in refused.stdout
    until = time.time()
    # The control: a run that does connect shows in every journal, so the window before it holds nothing.
    assert pyinfra("deploy.py", "-y", "--dry", env=PD, timeout=300).returncode == 0
    assert journal_shows_logins(fleet, fleet.hosts, until)
    assert {host: sshd_connections(fleet, host, since, until=until) for host in fleet.hosts} == \
        dict.fromkeys(fleet.hosts, 0)
