"""
Two sglang services on one dev host, with the real deploy over SSH (as ``deploy``
with sudo): each serves on its own port from its own GPUs (CUDA_VISIBLE_DEVICES
in the server process's environment, as torch reads it), a change to one
restarts only it, a second converge changes and restarts nothing, and
``sglfleet status`` has a row for each, and a service the inventory no longer
names leaves the gateway and is removed (the host's one service, before the
named ones came, too). Molecule's sequence: converge, converge again, verify
the host's real state.
"""

import json
import time

import pytest

from deploying import SECRETS, deploy, pyinfra, server_pid, sglfleet, sshd_commands, sshd_logs_sessions
from test_gateway import GATEWAYS, listed
from faulting import results
from paths import GATEWAY, LAYOUT, UNIT, service
from sglfleet.events import read_events

pytestmark = pytest.mark.fleet

HOST = "node1"
A, B = service("a"), service("b")
UNITS = (A.unit, B.unit)
TEXTFILES = "/var/lib/prometheus/node-exporter"  # node_exporter's textfile folder
PROMS = f"{TEXTFILES}/sglfleet-sglang-a.prom {TEXTFILES}/sglfleet-sglang-b.prom"


def services(b_steps: int) -> str:
    """``services=`` for --data: a on GPU 0 (tp 1), b on GPUs 1 and 2 (tp 2) with ``b_steps`` EAGLE-3 steps."""
    return "services=" + json.dumps([
        {"name": "a", "gpus": [0], "port": 30001},
        {"name": "b", "gpus": [1, 2], "port": 30002, "tp_size": 2, "speculative_num_steps": b_steps,
         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": b_steps + 1},
    ])


def run_of(fleet, unit: str) -> dict:
    """What a restart changes: the unit's main pid and start time, and its server process's pid."""
    shown = fleet.exec(HOST, f"systemctl show {unit} -p MainPID -p ActiveEnterTimestampMonotonic "
                             "-p ActiveState").stdout
    found = dict(line.split("=", 1) for line in shown.split())
    return {**found, "server": server_pid(fleet, HOST, unit)}


def environment(fleet, pid: str) -> dict:
    text = fleet.exec(HOST, f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def health(fleet, port: int, address: str = "127.0.0.1") -> int:
    """The status of HOST's /health on ``port``, asked on the host, where the service listens: loopback
    on a lone host, its fleet address behind the gateway."""
    said = fleet.exec(HOST, "python3 -c \"import urllib.request as u; "
                            f"print(u.urlopen('http://{address}:{port}/health', timeout=25).status)\"", check=False)
    return int(said.stdout.strip() or 0)


@pytest.fixture(scope="module")
def two_services(fleet, tmp_path_factory):
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    if not fleet.exec(HOST, f"systemctl cat {UNIT}", check=False).stdout:  # a blank host
        assert deploy("--limit", HOST).returncode == 0  # as a host of one service comes to several
    events = tmp_path_factory.mktemp("events") / "events.jsonl"
    done = deploy("--limit", HOST, "--data", services(3), "--data", f"events_file={events}")
    assert done.returncode == 0, done.stdout[-3000:]
    done.events = read_events(events)
    yield fleet, done
    # Leave the host as other modules expect it: its one sglang service only.
    fleet.exec(HOST, f"systemctl disable --now {' '.join(UNITS)} 2>/dev/null; "
                     f"rm -f {' '.join(s.unit_file for s in (A, B))} "
                     f"{A.env_file} {B.env_file} {PROMS}; rm -rf {LAYOUT.services}; "
                     "systemctl daemon-reload", check=False)


def test_each_service_serves_on_its_own_port_from_its_own_gpus(two_services):
    fleet, done = two_services
    assert "Stage release" in done.stdout and f"of {B.unit}" in done.stdout
    for unit, port, gpus, user in ((A.unit, 30001, "0", A.service_user),
                                   (B.unit, 30002, "1,2", B.service_user)):
        run = run_of(fleet, unit)
        assert run["ActiveState"] == "active", unit
        assert health(fleet, port) == 200, unit
        # The server process itself (the stand-in, as sglang would) sees only the service's GPUs.
        assert environment(fleet, run["server"])["CUDA_VISIBLE_DEVICES"] == gpus, unit
        args = fleet.exec(HOST, f"tr '\\0' ' ' < /proc/{run['server']}/cmdline").stdout
        assert f"--port {port}" in args, (unit, args)
        owner = fleet.exec(HOST, f"ps -o user= -p {run['server']}").stdout.strip()
        assert owner == user, unit
    current = fleet.exec(HOST, f"readlink -f {A.current}").stdout.strip()
    assert current.startswith(f"{A.releases}/")
    # One stack for both: the two servers run the same venv's python.
    pythons = {fleet.exec(HOST, f"readlink /proc/{run_of(fleet, unit)['server']}/exe").stdout.strip() for unit in UNITS}
    assert len(pythons) == 1, pythons
    env = fleet.exec(HOST, f"stat -c '%U %G %a' {A.env_file} {B.env_file}").stdout
    assert env.split("\n")[:2] == ["root root 600", "root root 600"]
    for value in SECRETS.values():
        assert value not in fleet.exec(HOST, f"cat {A.unit_file}").stdout


def test_the_one_service_the_host_ran_before_is_retired(two_services):
    fleet, done = two_services
    assert f"will stop and remove {UNIT}: the inventory no longer names it" in done.stdout
    retired = [event for event in done.events if event["reason"] == "ServiceRetired"]
    assert [(event["host"], event["service"], f"{UNIT} stopped and removed" in event["message"])
            for event in retired] == [(HOST, "sglang", True)]
    # Then each new service switched, each event naming its service.
    assert [(event["host"], event["service"]) for event in done.events if event["reason"] == "HostSwitched"] == [
        (HOST, "a"), (HOST, "b")]
    left = fleet.exec(HOST, f"systemctl cat {UNIT}; ls -d {LAYOUT.current} {LAYOUT.previous} "
                            f"{LAYOUT.releases} {LAYOUT.env_file}", check=False).stdout
    assert left == ""
    assert health(fleet, 30000) == 0  # nothing listens on its port
    # Its series left node_exporter's file; each service that serves has its own.
    assert "sglfleet_release_info" not in fleet.exec(HOST, f"cat {TEXTFILES}/sglfleet.prom").stdout
    assert "sglfleet_release_info" in fleet.exec(HOST, f"cat {TEXTFILES}/sglfleet-sglang-a.prom").stdout


def test_a_second_converge_changes_and_restarts_nothing(two_services):
    fleet, _ = two_services
    before = {unit: run_of(fleet, unit) for unit in UNITS}
    sshd_logs_sessions(fleet, [HOST])
    since = time.time()
    again = deploy("--limit", HOST, "--data", services(3))
    # One read of the host, every service's releases in it: one remote command.
    assert sshd_commands(fleet, HOST, since) == 1
    assert again.returncode == 0, again.stdout[-3000:]
    totals = results(again.stdout)
    assert totals["success"] == 0 and totals["error"] == 0, again.stdout[-3000:]
    assert {unit: run_of(fleet, unit) for unit in UNITS} == before


def test_a_change_to_one_service_restarts_only_it(two_services):
    fleet, _ = two_services
    before = {unit: run_of(fleet, unit) for unit in UNITS}
    changed = deploy("--limit", HOST, "--data", services(2))
    assert changed.returncode == 0, changed.stdout[-3000:]
    assert f"{B.unit}: will switch" in changed.stdout
    assert f"{A.unit}: will switch" not in changed.stdout
    after = {unit: run_of(fleet, unit) for unit in UNITS}
    assert after[A.unit] == before[A.unit]  # same process, never restarted
    assert after[B.unit]["server"] != before[B.unit]["server"]
    assert after[B.unit]["ActiveEnterTimestampMonotonic"] != \
        before[B.unit]["ActiveEnterTimestampMonotonic"]
    assert after[B.unit]["ActiveState"] == "active" and health(fleet, 30002) == 200
    args = fleet.exec(HOST, f"tr '\\0' ' ' < /proc/{after[B.unit]['server']}/cmdline").stdout
    assert "--speculative-num-steps 2" in args
    # b keeps what served before as its previous: its own rollback target; a has none.
    state = json.loads(fleet.exec(HOST, f"{LAYOUT.tool} --service b state").stdout)
    assert state["previous"] and state["previous"] != state["current"] == state["serving"]
    assert json.loads(fleet.exec(HOST, f"{LAYOUT.tool} --service a state").stdout)["previous"] is None


def test_status_has_a_row_for_each_service(two_services):
    said = sglfleet("status", "inventory/dev.py", "--json", "--data", services(2))
    rows = [row for row in json.loads(said.stdout) if row["host"] == HOST]
    assert [row["service"] for row in rows] == ["a", "b"], said.stdout[-2000:]
    for row in rows:
        assert row["serving"] == row["current"] == row["declared"] and row["health"] == 200, row
    table = sglfleet("status", "inventory/dev.py", "--data", services(2)).stdout
    assert table.splitlines()[0].split()[:2] == ["host", "service"]


def test_rollback_returns_the_changed_service_and_leaves_the_unchanged_one_serving(two_services):
    fleet, _ = two_services
    deploy("--limit", HOST, "--data", services(3))  # b as the module began, whatever ran before
    changed = deploy("--limit", HOST, "--data", services(2))
    assert changed.returncode == 0, changed.stdout[-3000:]
    a_before, b = run_of(fleet, A.unit), json.loads(
        fleet.exec(HOST, f"{LAYOUT.tool} --service b state").stdout)
    back = pyinfra("rollback.py", "-y", "--limit", HOST, "--data", services(2))
    assert back.returncode == 0, back.stdout[-3000:]
    assert "Rollout: 1 passed (node1)" in back.stdout  # a, with no previous release, does not fail the host
    after = json.loads(fleet.exec(HOST, f"{LAYOUT.tool} --service b state").stdout)
    assert after["current"] == after["serving"] == b["previous"] and after["health"] == 200
    assert run_of(fleet, A.unit) == a_before


@pytest.fixture(scope="module")
def behind_gateway(two_services):
    """Every serving host with services a and b, the last host the fleet's gateway (real smg)."""
    fleet, _ = two_services
    if len(fleet.hosts) < 3:
        pytest.skip("needs a fleet of three hosts or more: two workers and a gateway")
    gateway, workers = fleet.hosts[-1], fleet.hosts[:-1]
    done = pyinfra("deploy.py", "-y", "--data", services(3), env=GATEWAYS)
    assert done.returncode == 0, done.stdout[-3000:]
    yield fleet, f"http://{fleet.address(gateway)}:30080", workers
    for host in workers[1:]:  # node1's services go with the module's first fixture
        fleet.inside(host, f"systemctl disable --now {' '.join(UNITS)} 2>/dev/null; rm -f "
                           f"{' '.join(s.unit_file for s in (A, B))} {A.env_file} "
                           f"{B.env_file} {PROMS}; rm -rf {LAYOUT.services}; systemctl daemon-reload")
    fleet.inside(gateway, f"systemctl disable --now {GATEWAY.unit} 2>/dev/null; rm -f {GATEWAY.unit_file} "
                          f"{GATEWAY.env_file}; systemctl daemon-reload")


def test_each_service_is_its_own_worker_of_the_gateway_and_only_the_changed_one_leaves_it(behind_gateway):
    fleet, url, workers = behind_gateway
    expected = [f"http://{fleet.address(host)}:{port}" for host in workers for port in (30001, 30002)]
    assert {worker: w["is_healthy"] for worker, w in listed(url).items()} == dict.fromkeys(expected, True)
    before = run_of(fleet, A.unit)
    changed = pyinfra("deploy.py", "-y", "--data", services(2), env=GATEWAYS)
    assert changed.returncode == 0, changed.stdout[-3000:]
    assert f"{B.unit}: will switch" in changed.stdout
    assert f"{A.unit}: will switch" not in changed.stdout
    assert run_of(fleet, A.unit) == before  # a served through b's drain, switch and rejoin
    # b rejoined once its gate passed: every worker is back, healthy.
    assert {worker: w["is_healthy"] for worker, w in listed(url).items()} == dict.fromkeys(expected, True)


def test_a_service_dropped_from_the_inventory_leaves_the_gateway_and_is_removed(behind_gateway):
    fleet, url, workers = behind_gateway
    before = run_of(fleet, A.unit)
    only_a = "services=" + json.dumps([{"name": "a", "gpus": [0], "port": 30001}])
    plan = pyinfra("deploy.py", "--dry", "--data", only_a, env=GATEWAYS)
    assert plan.returncode == 0, plan.stdout[-3000:]
    assert f"will stop and remove {B.unit}: the inventory no longer names it" in plan.stdout
    assert health(fleet, 30002, fleet.address(HOST)) == 200  # the plan changed nothing
    done = pyinfra("deploy.py", "-y", "--data", only_a, env=GATEWAYS)
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"will stop and remove {B.unit}: the inventory no longer names it" in done.stdout
    # b left the gateway (drained first), and the gateway lists a alone.
    assert {worker: w["is_healthy"] for worker, w in listed(url).items()} == {
        f"http://{fleet.address(host)}:30001": True for host in workers}
    for host in workers:
        left = fleet.exec(host, f"systemctl cat {B.unit}; ls -d {B.service_root} "
                                f"{B.env_file} {TEXTFILES}/sglfleet-sglang-b.prom", check=False).stdout
        assert left == "", host
        assert fleet.exec(host, "pgrep -f -- '--port 3000[2]'", check=False).stdout == "", host
    assert run_of(fleet, A.unit) == before  # a served on throughout
    again = pyinfra("deploy.py", "-y", "--data", only_a, env=GATEWAYS)
    totals = results(again.stdout)
    assert again.returncode == 0 and totals["success"] == 0 and totals["error"] == 0, again.stdout[-3000:]


def test_a_host_whose_services_are_dropped_serves_its_one_service_again(behind_gateway):
    fleet, url, workers = behind_gateway
    done = pyinfra("deploy.py", "-y", env=GATEWAYS)
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"will stop and remove {A.unit}" in done.stdout
    assert {worker: w["is_healthy"] for worker, w in listed(url).items()} == {
        f"http://{fleet.address(host)}:30000": True for host in workers}
    for host in workers:
        assert fleet.exec(host, f"systemctl is-active {UNIT}").stdout.strip() == "active", host
        assert fleet.exec(host, f"systemctl cat {A.unit}; ls -d {A.service_root}",
                          check=False).stdout == "", host
