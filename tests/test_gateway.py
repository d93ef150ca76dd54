"""
The fleet's own gateway on the local fleet: ``SGLFLEET_DEV_GATEWAYS=1`` makes the
last host a gateway host, which runs the real smg 1.13.0 wheel from its stack as
``sglang-gateway.service`` and nothing of sglang. Its workers are the other
hosts; a staged rollout drains and rejoins each through it under traffic, and
no request fails; a worker that fails its gate never rejoins; a gateway change
is a diff, then one restart, under light traffic that fails nothing (its port
waits for the new gateway); two gateways restart one at a time, and a host taken
out of the group stops its gateway; a second converge changes nothing, in one
read a host. All of it as ``deploy`` with sudo, as
inventory/dev.py logs in.
"""

import json
import re
import time
import urllib.error
import urllib.request

import pytest

from sglfleet.devfleet import Fleet
from deploying import (fleet_key, SECRETS, eagle_change, host_state, pyinfra, sglfleet, sshd_commands,
                       sshd_logs_sessions)
from paths import GATEWAY, LAYOUT, UNIT
from reaching import closed_port
from routing import Load
from sglfleet.devfleet.traffic import CLIENT_MIX, KINDS
from test_rollout import results

pytestmark = pytest.mark.fleet

GATEWAYS = {"SGLFLEET_DEV_GATEWAYS": "1"}
KEY = SECRETS["SGLFLEET_API_KEY"]


def deploy(*args: str, timeout: float = 600):
    """``pyinfra inventory/dev.py deploy.py -y ARGS`` with the last host a gateway."""
    return pyinfra("deploy.py", "-y", *args, timeout=timeout, env=GATEWAYS)


def listed(url: str) -> dict[str, dict]:
    """The gateway's workers by URL (``GET /workers``, with gateway-admin)."""
    request = urllib.request.Request(f"{url}/workers", headers={"Authorization": f"Bearer {fleet_key(Fleet())}"})
    return {w["url"]: w for w in json.load(urllib.request.urlopen(request, timeout=5))["workers"]}


def gateway_pid(fleet, host: str) -> str:
    # Through nsenter: a login would count among the converge's remote commands.
    return fleet.inside(host, f"systemctl show -p MainPID --value {GATEWAY.unit}").stdout.strip()


@pytest.fixture(scope="module")
def topology(fleet):
    """The fleet converged with its last host a gateway: ``(gateway host, its URL, workers, their URLs)``."""
    if len(fleet.hosts) < 3:
        pytest.skip("needs a fleet of three hosts or more: two workers and a gateway")
    gateway, workers = fleet.hosts[-1], fleet.hosts[:-1]
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    # As on a new fleet: no server runs when the gateway first starts, which happens before
    # the rollout (pyinfra runs a host's operations as soon as the ones before it are done).
    for host in workers:
        fleet.inside(host, f"systemctl stop {UNIT} 2>/dev/null || true")  # a blank host has none
    done = deploy()
    assert done.returncode == 0, done.stdout[-3000:]
    yield gateway, f"http://{fleet.address(gateway)}:30080", workers, [
        f"http://{fleet.address(host)}:30000" for host in workers]
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    # The suite's other modules know no gateway: the hosts go back to being plain ones.
    for host in fleet.hosts:
        fleet.inside(host, f"systemctl disable --now {GATEWAY.unit} 2>/dev/null; rm -f {GATEWAY.unit_file} "
                           f"{GATEWAY.env_file}; systemctl daemon-reload")


def test_the_gateway_host_runs_the_gateway_and_nothing_of_sglang(fleet, topology):
    gateway, url, workers, worker_urls = topology
    assert fleet.exec(gateway, f"systemctl is-active {GATEWAY.unit}").stdout.strip() == "active"
    # No sglang unit, env file, link or series (a host that served before it became a gateway has them
    # removed); the gateway's stack.
    sglang = fleet.exec(gateway, f"systemctl cat {UNIT}; ls -d {LAYOUT.current} {LAYOUT.previous} "
                                 f"{LAYOUT.env_file} /var/lib/prometheus/node-exporter/sglfleet.prom; "
                                 "pgrep -f sglang_standin", check=False).stdout
    assert sglang == ""
    assert any(stack.startswith("gateway-smg-1.13.0-")
               for stack in fleet.exec(gateway, f"ls {LAYOUT.stacks}").stdout.split())
    # Its workers are the serving hosts, each healthy.
    assert {worker: w["is_healthy"] for worker, w in listed(url).items()} == dict.fromkeys(worker_urls, True)
    # The key: in the root-only env file, never in the unit or the gateway's command line.
    env = fleet.exec(gateway, f"stat -c '%U %a' {GATEWAY.env_file}").stdout.split()
    assert env == ["root", "600"]
    shown = fleet.exec(gateway, f"systemctl cat {GATEWAY.unit}; cat /proc/$(systemctl show -p MainPID "
                                f"--value {GATEWAY.unit})/cmdline; journalctl -u {GATEWAY.service} -o cat "
                                "--no-pager").stdout
    assert KEY not in shown
    # Clients need the key; the admin API too.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{url}/workers", timeout=5)
    assert refused.value.code == 401


def _call(url: str, key: str | None = None, body: dict | None = None, method: str | None = None):
    """(status, body) of one request, with ``key`` as the bearer token."""
    request = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _from_gateway(fleet, gateway: str, url: str, key: str, path: str) -> str:
    """The status of ``POST url+path`` with ``key``, sent from the gateway host (the engines answer it alone)."""
    return fleet.inside(gateway, "python3 -c 'import sys, urllib.request, urllib.error\n"
                                 "r = urllib.request.Request(sys.argv[1], data=b\"{}\", headers={\"Authorization\": "
                                 "\"Bearer \" + sys.argv[2], \"Content-Type\": \"application/json\"})\n"
                                 "try: print(urllib.request.urlopen(r, timeout=30).status)\n"
                                 "except urllib.error.HTTPError as e: print(e.code)' "
                                 f"{url}{path} {key}").stdout.strip()


def test_each_key_opens_only_what_its_role_needs(fleet, topology):
    gateway, url, workers, worker_urls = topology
    client, admin, engine_admin = KEY, fleet_key(fleet), fleet_key(fleet, "engine-admin")
    # Only gateway-admin adds a worker: no key and a client key are refused, and nothing is added.
    stranger = {"url": "http://10.255.255.1:30000"}
    assert _call(f"{url}/workers", None, stranger)[0] == 401
    assert _call(f"{url}/workers", client, stranger)[0] == 401
    assert _call(f"{url}/workers", engine_admin, stranger)[0] == 401
    assert set(listed(url)) == set(worker_urls)
    # Clients need a client key; gateway-admin is no client key.
    ask = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 2}}
    assert _call(f"{url}/generate", None, ask)[0] == 401
    assert _call(f"{url}/generate", admin, ask)[0] == 401
    status, answer = _call(f"{url}/generate", client, ask)
    assert status == 200 and json.loads(answer)["meta_info"]["completion_tokens"] == 2
    # smg passes /get_server_info to a worker with the caller's headers: no key of any role in it.
    status, info = _call(f"{url}/get_server_info", client)
    assert status == 200 and json.loads(info)["admin_api_key"] == "<redacted>"
    assert not {client, admin, engine_admin} & set(re.findall(r"[\w-]{20,}", info))
    # An engine's management endpoints answer engine-admin alone, even from its gateway.
    for path in ("/flush_cache", "/update_weights_from_disk"):
        assert _from_gateway(fleet, gateway, worker_urls[0], client, path) == "401"
    assert _from_gateway(fleet, gateway, worker_urls[0], engine_admin, "/flush_cache") == "200"
    # No key in a command line, a unit or a journal, on any host.
    for host in fleet.hosts:
        seen = fleet.inside(host, "ps -eo args; systemctl cat 'sglang*' 2>/dev/null; "
                                  "journalctl -o cat --no-pager", timeout=120).stdout
        assert not {client, admin, engine_admin} & set(re.findall(r"[\w-]{16,}", seen)), host


def test_a_second_converge_changes_nothing_in_one_read_a_host(fleet, topology):
    gateway, *_ = topology
    before = gateway_pid(fleet, gateway)
    sshd_logs_sessions(fleet, fleet.hosts)
    since = time.time()
    result = deploy()
    assert result.returncode == 0, result.stdout[-3000:]
    totals = results(result.stdout)
    assert totals["success"] == 0 and totals["error"] == 0, result.stdout[-3000:]
    assert gateway_pid(fleet, gateway) == before
    assert {host: sshd_commands(fleet, host, since) for host in fleet.hosts} == dict.fromkeys(fleet.hosts, 1)


def test_status_shows_the_gateway_its_workers_and_their_health(fleet, topology):
    gateway, url, workers, worker_urls = topology
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SGLFLEET_DEV_GATEWAYS", "1")
        shown = sglfleet("status", "inventory/dev.py", timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    start = next(number for number, line in enumerate(lines) if line.startswith("gateway "))
    assert re.match(rf"{gateway}\s+{re.escape(url)}\s+active\s+in force [0-9a-f]{{12}}\s+{re.escape(worker_urls[0])}"
                    r"\s+healthy \(ready\)",
                    lines[start + 1]), shown.stdout
    shown_workers = [re.search(r"(http://\S+:30000)\s+(\w+)", line).groups() for line in lines[start + 1:]]
    assert shown_workers == [(worker, "healthy") for worker in sorted(worker_urls)]


def test_the_demo_counts_its_clients_requests_through_the_gateway(fleet, topology):
    gateway, url, *_ = topology
    # Its default URL: the last host's. Fast enough that each thread goes once round the mix.
    counted = sglfleet("devfleet", "traffic", "--rate", "20", "--", "sleep", "5", timeout=120)
    assert counted.returncode == 0, counted.stdout + counted.stderr
    first, *kinds = counted.stdout.splitlines()
    assert re.fullmatch(rf"--> Traffic: (\d+) requests through {re.escape(url)} in [\d.]+ s: \1 as expected",
                        first), counted.stdout
    # A line a kind of client, each answered in full: the SDK's streams, its completions, /generate, and
    # a route no server has, which gets FastAPI's 404 and leaves the connection usable for the next.
    assert [line.split(":")[0].strip() for line in kinds] == [KINDS[kind] for kind in dict.fromkeys(CLIENT_MIX)], \
        counted.stdout
    assert all(re.search(r": (\d+) sent, \1 answered in full, 0 cut, no error$", line) for line in kinds), counted.stdout
    # A URL where nothing listens (on the controller: a gateway host's policy drops, and would make it wait).
    failing = sglfleet("devfleet", "traffic", "--url", f"http://127.0.0.1:{closed_port()}", "--", "sleep", "1",
                       timeout=60)
    assert failing.returncode == 1 and "Connection refused" in failing.stdout, failing.stdout


def test_a_rollout_through_the_gateway_loses_no_request(fleet, topology):
    gateway, url, workers, worker_urls = topology
    before, pid = {host: host_state(fleet, host) for host in workers}, gateway_pid(fleet, gateway)
    load = Load(url, mix=CLIENT_MIX)
    time.sleep(2)  # traffic flows before the first host leaves
    try:
        result = deploy(*eagle_change(2))
    finally:
        time.sleep(2)  # and after the last one rejoined
        load.stop()
    assert result.returncode == 0, result.stdout[-3000:]
    after = {host: host_state(fleet, host) for host in workers}
    assert all(after[host]["current"] != before[host]["current"] for host in workers)
    print(f"through the gateway during the rollout: {load.summary()}")
    clients_answered_in_full(load)
    # Each worker left and rejoined: the gateway knows each under a new id, healthy; it never restarted.
    assert {worker: w["is_healthy"] for worker, w in listed(url).items()} == dict.fromkeys(worker_urls, True)
    assert gateway_pid(fleet, gateway) == pid
    assert "router http" not in result.stdout  # no drain or join went wrong


def clients_answered_in_full(load) -> None:
    """Every kind of client was sent often enough to mean something, and each request was answered in full:
    no stream cut before its finish chunk, usage and ``[DONE]``, no error."""
    counts = load.by_kind()
    assert len(load.requests) > 50, f"too little traffic to mean anything: {load.summary()}"
    assert all(counts[kind]["sent"] >= 2 for kind in CLIENT_MIX), load.summary()
    assert load.cut() == [] and load.failed() == [], load.summary() + "\n" + "\n".join(
        f"{request.kind}: {request.outcome}" for request in load.failed()[:5])


def test_a_canary_that_fails_its_gate_rolls_back_and_no_client_notices(fleet, topology):
    gateway, url, workers, worker_urls = topology
    canary = workers[0]
    before = {host: host_state(fleet, host)["current"] for host in workers}
    fleet.fault(canary, "crash")  # its new release crashes; the one it serves now is spared
    load = Load(url, mix=CLIENT_MIX)
    time.sleep(2)
    try:
        result = deploy(*eagle_change(4))
        time.sleep(2)
    finally:
        load.stop()
        fleet.fault(canary, "clear")
    assert result.returncode == 1, result.stdout[-3000:]
    assert re.search(rf"failed: {canary} \(gate failed on release \w+: .*rolled back to", result.stdout), \
        result.stdout[-3000:]
    # The canary serves what it served, back in the gateway; the run stopped before the others.
    assert {host: host_state(fleet, host)["current"] for host in workers} == before
    assert {worker: w["is_healthy"] for worker, w in listed(url).items()} == dict.fromkeys(worker_urls, True)
    print(f"through the gateway during the failed canary: {load.summary()}")
    clients_answered_in_full(load)


def test_a_gateway_change_is_a_diff_then_one_restart(fleet, topology):
    gateway, url, workers, worker_urls = topology
    releases, pid = {host: host_state(fleet, host)["current"] for host in workers}, gateway_pid(fleet, gateway)
    change = ("--data", "gateway_policy=power_of_two", *eagle_change(2))
    planned = pyinfra("deploy.py", "--dry", "--diff", *change, env=GATEWAYS)
    assert planned.returncode == 0, planned.stdout[-3000:]
    assert re.search(r"^\s+-\s+--policy round_robin \\$", planned.stdout, re.M), planned.stdout[-3000:]
    assert re.search(r"^\s+\+\s+--policy power_of_two \\$", planned.stdout, re.M)
    assert f"[{gateway}] Will restart {GATEWAY.unit}" in planned.stdout
    assert gateway_pid(fleet, gateway) == pid  # a dry run changes nothing
    since = time.time()
    load = Load(url, threads=2, rate=5.0, mix=CLIENT_MIX)  # light clients' traffic through the restart
    try:
        done = deploy(*change)
    finally:
        time.sleep(2)
        load.stop()
    assert done.returncode == 0, done.stdout[-3000:]
    # smg drains on SIGTERM and keeps its listener open meanwhile, so what was sent before the old
    # process exited is answered by it. From its exit until the new one is READY nothing could answer
    # (refused, then smg 1.13.0's 404 model_not_found until its start-up job registered the workers,
    # placement.rs:643): the firewall drops those SYNs, and the clients' kernels send them again.
    exited, ready = gap(fleet, gateway, since)
    failed = [(sent, outcome) for sent, outcome in load.sent if outcome != 200]
    waited = [sent for sent, outcome in load.sent if exited <= sent <= ready]
    print(f"through the gateway's restart: {len(load.sent)} requests, {len(failed)} failed, {len(waited)} sent "
          f"while it restarted, {ready - exited:.2f} s from the old process's exit to the new one's READY")
    assert len(load.sent) > 20 and failed == [], failed
    assert load.cut() == [], load.summary()  # a stream under way when smg got SIGTERM ran to its [DONE]
    assert f"[{gateway}] {GATEWAY.unit} restarted and routes" in done.stdout
    assert gateway_pid(fleet, gateway) != pid
    assert "--policy power_of_two" in fleet.exec(gateway, f"systemctl cat {GATEWAY.unit}").stdout
    assert {host: host_state(fleet, host)["current"] for host in workers} == releases  # no worker restarted
    assert {worker: w["is_healthy"] for worker, w in listed(url).items()} == dict.fromkeys(worker_urls, True)
    # Back to the inventory's policy, for the tests after this one.
    assert deploy(*eagle_change(2)).returncode == 0


def test_keys_rotate_and_a_revoked_one_is_refused_under_client_traffic(fleet, topology):
    """
    Rotating gateway-admin and engine-admin and issuing a second client key rolls out as any change:
    the engines in batches behind their drains, the gateway restarted once. A client whose key stays
    valid never sees a 401, nor a failure through the gateway's restart (its port waits, as in the
    gateway change above). A revoked key is refused after the next converge.
    """
    gateway, url, workers, worker_urls = topology
    releases = {host: host_state(fleet, host)["current"] for host in workers}
    admin, engine_admin = fleet_key(fleet), fleet_key(fleet, "engine-admin")
    for role in ("gateway-admin", "engine-admin"):
        assert sglfleet("keys", "rotate", "inventory/dev.py", role).returncode == 0
    issued = sglfleet("keys", "issue", "inventory/dev.py", "second")
    assert issued.returncode == 0, issued.stderr
    second = issued.stdout.splitlines()[-1]
    listing = sglfleet("keys", "list", "inventory/dev.py").stdout
    assert "second" in listing and second not in listing and fleet_key(fleet) not in listing
    since = time.time()
    load = Load(url, threads=2, rate=5.0, mix=CLIENT_MIX)
    try:
        done = deploy()
    finally:
        time.sleep(2)
        load.stop()
    assert done.returncode == 0, done.stdout[-3000:]
    assert not {second, admin, engine_admin, fleet_key(fleet)} & set(done.stdout.split())
    # A valid key is never refused, and the gateway's restart fails nothing (its port waits: see above).
    assert all(outcome == 200 for _, outcome in load.sent), load.summary()
    assert load.cut() == [], load.summary()
    # Every engine restarted on its new key (a new release), every one rejoined; the old keys open nothing.
    assert all(host_state(fleet, host)["current"] != releases[host] for host in workers)
    assert {worker: w["is_healthy"] for worker, w in listed(url).items()} == dict.fromkeys(worker_urls, True)
    assert _call(f"{url}/workers", admin)[0] == 401
    assert _from_gateway(fleet, gateway, worker_urls[0], engine_admin, "/flush_cache") == "401"
    ask = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 2}}
    assert _call(f"{url}/generate", second, ask)[0] == 200
    # Revoked: the next converge restarts the gateway alone, and the key is refused.
    assert sglfleet("keys", "revoke", "inventory/dev.py", "second").returncode == 0
    releases = {host: host_state(fleet, host)["current"] for host in workers}
    assert deploy().returncode == 0
    assert _call(f"{url}/generate", second, ask)[0] == 401
    assert _call(f"{url}/generate", KEY, ask)[0] == 200
    assert {host: host_state(fleet, host)["current"] for host in workers} == releases


def test_a_worker_that_fails_its_gate_never_rejoins(fleet, topology):
    gateway, url, workers, worker_urls = topology
    broken, broken_url = workers[-1], worker_urls[-1]
    # Every start fails on that host, the rollback's too (no release spared): it cannot serve.
    fleet.inside(broken, f"echo crash > {LAYOUT.fault_file} && chmod 644 {LAYOUT.fault_file}")
    load = Load(url, mix=CLIENT_MIX)
    try:
        result = deploy(*eagle_change(3))
        time.sleep(3)  # the gateway's health checks look every second: time to re-add it, were it re-added
    finally:
        load.stop()
        fleet.fault(broken, "clear")
    assert result.returncode == 1, result.stdout[-3000:]
    assert re.search(rf"failed: {broken} \(gate failed on release \w+: .*which does not serve either", result.stdout), \
        result.stdout[-3000:]
    assert broken_url not in listed(url)
    assert {worker: w["is_healthy"] for worker, w in listed(url).items()} == {
        worker: True for worker in worker_urls if worker != broken_url}
    clients_answered_in_full(load)


def journal(fleet, host: str, since: float) -> list[tuple[float, str]]:
    """``host``'s journal lines of the gateway's unit since ``since``, each with its time."""
    log = fleet.inside(host, f"journalctl -u {GATEWAY.unit} -o short-unix --no-pager --since @{since:.6f}"
                       ).stdout.splitlines()
    return [(float(line.split()[0]), line) for line in log if line[:1].isdigit()]


def gap(fleet, host: str, since: float) -> tuple[float, float]:
    """When ``host``'s gateway process was gone in its restart since ``since``: from the old one's exit to READY."""
    stamps = journal(fleet, host, since)
    exited = min(t for t, line in stamps if "Deactivated successfully" in line or "Stopped sglang-gateway" in line)
    return exited, max(t for t, line in stamps if "Started sglang-gateway" in line)


def down_window(fleet, host: str, since: float) -> tuple[float, float]:
    """When ``host``'s gateway was down since ``since``: from its stop (or start) to its next READY."""
    stamps = journal(fleet, host, since)
    begin = min(t for t, line in stamps if "Stopping sglang-gateway" in line or "Starting sglang-gateway" in line)
    return begin, max(t for t, line in stamps if "Started sglang-gateway" in line)


def test_two_gateways_restart_one_at_a_time(fleet, topology):
    """With the last two hosts gateways, a gateway change restarts one, and the other only once it routes again."""
    two = {"SGLFLEET_DEV_GATEWAYS": "2"}
    first, second = fleet.hosts[-2:]
    workers = [f"http://{fleet.address(host)}:30000" for host in fleet.hosts[:-2]]
    try:
        assert pyinfra("deploy.py", "-y", env=two).returncode == 0  # a worker host becomes a gateway too
        since = time.time()
        done = pyinfra("deploy.py", "-y", "--data", "gateway_policy=random", env=two)
        assert done.returncode == 0, done.stdout[-3000:]
        windows = {host: down_window(fleet, host, since) for host in (first, second)}
        assert windows[first][1] < windows[second][0], windows  # never down together
        for host in (first, second):
            assert {worker: w["is_healthy"] for worker, w in listed(f"http://{fleet.address(host)}:30080").items()} \
                == dict.fromkeys(workers, True)
    finally:
        # That host serves again, as the suite's other modules expect of it.
        back = deploy()
    assert back.returncode == 0, back.stdout[-3000:]
    assert fleet.exec(first, f"systemctl is-active {UNIT}", check=False).stdout.strip() == "active"
    # Out of group gateways again, it stopped its gateway, and the gateway's files went.
    assert f"Will stop and remove {GATEWAY.unit}: this host is no longer in group gateways" in back.stdout
    assert fleet.exec(first, f"systemctl is-active {GATEWAY.unit}", check=False).stdout.strip() == "inactive"
    assert fleet.exec(first, f"systemctl cat {GATEWAY.unit}; ls {GATEWAY.env_file} "
                             f"{LAYOUT.gateway_launcher}", check=False).stdout == ""
