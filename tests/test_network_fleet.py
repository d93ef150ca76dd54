"""
Who may reach what, on the local fleet and tried from outside: node1-3 serve behind node4's
gateway, each host behind its own ``table inet sglfleet``. An engine takes connections from
the gateway alone (not from the controller, not from another serving host); clients reach
the gateway; a policy that cuts SSH undoes itself and the run names the host; a table removed
by hand is drift, named by the dry run and put back; a second converge changes nothing.
"""

import json
import re
import time
import urllib.request

import pytest

from deploying import SECRETS, pyinfra, sglfleet, sshd_commands, sshd_logs_sessions
from paths import GATEWAY
from reaching import from_controller, from_host
from test_rollout import results

pytestmark = pytest.mark.fleet

GATEWAYS = {"SGLFLEET_DEV_GATEWAYS": "1"}
KEY = SECRETS["SGLFLEET_API_KEY"]
TABLE = "nft list table inet sglfleet"


def deploy(*args: str, timeout: float = 600):
    """``pyinfra inventory/dev.py deploy.py -y ARGS`` with the last host a gateway."""
    return pyinfra("deploy.py", "-y", *args, timeout=timeout, env=GATEWAYS)


@pytest.fixture(scope="module")
def guarded(fleet):
    """The fleet converged behind the gateway, every host under its policy: ``(gateway, workers)``."""
    if len(fleet.hosts) < 3:
        pytest.skip("needs three hosts or more: two workers and a gateway")
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    done = deploy()
    assert done.returncode == 0, done.stdout[-3000:]
    yield fleet.hosts[-1], fleet.hosts[:-1]
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    # The suite's other modules know no gateway: the hosts go back to plain ones (their converge sets the policy).
    for host in fleet.hosts:
        fleet.inside(host, f"systemctl disable --now {GATEWAY.unit} 2>/dev/null; rm -f {GATEWAY.unit_file} "
                           f"{GATEWAY.env_file}; systemctl daemon-reload")


def test_an_engine_answers_its_gateway_alone(fleet, guarded):
    gateway, (first, second, *_) = guarded
    engine = fleet.address(first)
    assert not from_controller(engine, 30000)  # the controller is no gateway
    assert not from_host(fleet, second, engine, 30000)  # nor is another serving host
    assert from_host(fleet, gateway, engine, 30000)
    health = fleet.inside(gateway, "python3 -c 'import urllib.request; print(urllib.request.urlopen("
                                   f"\"http://{engine}:30000/health\", timeout=10).status)'").stdout.strip()
    assert health == "200"
    assert fleet.exec(first, "true").returncode == 0  # SSH stays open (ssh_networks: anywhere)
    request = urllib.request.Request(f"http://{fleet.address(gateway)}:30080/generate", data=json.dumps(
        {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4}}).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    assert json.load(urllib.request.urlopen(request, timeout=60))["meta_info"]["completion_tokens"] == 4


def test_status_shows_each_hosts_policy_in_force(fleet, guarded):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SGLFLEET_DEV_GATEWAYS", "1")
        shown = sglfleet("status", "inventory/dev.py", timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for host in fleet.hosts:
        assert re.search(rf"^{host}\s.*\bin force [0-9a-f]{{12}}", shown.stdout, re.M), shown.stdout


def test_a_policy_that_cuts_ssh_undoes_itself_and_the_run_names_the_host(fleet, guarded):
    _, (first, *_) = guarded
    started = time.monotonic()
    cut = deploy("--limit", first, "--data", 'firewall_extra_rules=["tcp dport 22 drop"]')
    assert cut.returncode != 0
    said = [line.strip() for line in cut.stdout.splitlines() if "cut the controller off" in line]
    assert len(said) == 2, cut.stdout[-3000:]  # the host's one line, then the summary's reason
    assert said[0].startswith(f"[{first}] firewall policy") and "put its previous rules back" in said[0]
    assert said[1].startswith(f"--> Rollout: 1 failed: {first} (firewall policy")
    # Within a minute a new SSH connection works, and the rule is gone.
    while True:
        try:
            table = fleet.exec(first, TABLE, timeout=10).stdout
            break
        except Exception:
            assert time.monotonic() - started < 60, "SSH still refused a minute after the cut"
            time.sleep(2)
    assert "dport 22 drop" not in table and "ssh" in table


def test_a_table_removed_by_hand_is_drift_the_next_converge_puts_back(fleet, guarded):
    _, (_, second, *_) = guarded
    fleet.inside(second, "nft delete table inet sglfleet")
    assert from_controller(fleet.address(second), 30000)  # no table, nothing refuses it
    planned = pyinfra("deploy.py", "--dry", "--diff", "-y", env=GATEWAYS)
    assert planned.returncode == 0, planned.stdout[-3000:]
    assert f"[{second}] Drift: table inet sglfleet changed on the host: removed" in planned.stdout, \
        planned.stdout[-3000:]
    assert fleet.inside(second, TABLE, check=False).returncode != 0  # a dry run changes nothing
    done = deploy()
    assert done.returncode == 0, done.stdout[-3000:]
    assert "policy drop" in fleet.inside(second, TABLE).stdout
    assert not from_controller(fleet.address(second), 30000)


def test_a_second_converge_changes_nothing_in_one_read_a_host(fleet, guarded):
    sshd_logs_sessions(fleet, fleet.hosts)
    since = time.time()
    again = deploy()
    assert again.returncode == 0, again.stdout[-3000:]
    totals = results(again.stdout)
    assert totals["success"] == 0 and totals["error"] == 0, again.stdout[-3000:]
    assert {host: sshd_commands(fleet, host, since) for host in fleet.hosts} == dict.fromkeys(fleet.hosts, 1)
