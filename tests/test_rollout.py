"""
The deploy against the local fleet, as an operator runs it: converge, converge
again, dry run, a staged rollout, failed gates and rollbacks.

The tests share one fleet and run in file order; each leaves every host
serving, so the next starts from a healthy fleet. They connect as
inventory/dev.py does, as production does: the non-root user ``deploy`` with
passwordless sudo; root never logs in (the module's last test checks that).
"""

import json
import re
import time

import pytest

from deploying import (SECRETS, converged, deploy, fleet_state, host_state, journal_shows_logins, pyinfra, sglfleet,
                       sshd_commands, sshd_logs_sessions, ssh_logins, tree_digest)
from paths import LAYOUT, UNIT

pytestmark = pytest.mark.fleet

# A change of the EAGLE-3 numbers: a new release on every host.
EAGLE_CHANGE = ("--data", "speculative_num_steps=4", "--data", "speculative_eagle_topk=1",
                "--data", "speculative_num_draft_tokens=5")
OTHER_CHANGE = ("--data", "speculative_num_steps=5", "--data", "speculative_eagle_topk=1",
                "--data", "speculative_num_draft_tokens=6")


def results(output: str) -> dict:
    """pyinfra's closing 'Grand total' row: hosts, success, error, no change."""
    row = re.search(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", output)
    assert row, output[-2000:]
    return dict(zip(("hosts", "success", "error", "no_change"),
                    (0 if cell == "-" else int(cell) for cell in row.groups())))


def started_at(fleet, host: str) -> int:
    """When sglang.service last became active, in µs of the kernel's monotonic clock,
    which every host of the local fleet shares: starts compare across hosts."""
    out = fleet.inside(host, f"systemctl show {UNIT} -p ActiveEnterTimestampMonotonic").stdout
    return int(out.strip().split("=", 1)[1])


def server_info(fleet, host: str) -> dict:
    fetch = ("python3 -c \"import urllib.request,sys; r=urllib.request.Request("
             "'http://127.0.0.1:30000/server_info', headers={'Authorization': 'Bearer ' + sys.argv[1]});"
             "print(urllib.request.urlopen(r).read().decode())\" " + SECRETS["SGLFLEET_API_KEY"])
    return json.loads(fleet.inside(host, fetch).stdout)


def serving(fleet) -> dict:
    return {host: (state["current"], state["health"]) for host, state in fleet_state(fleet).items()}


# When the module's tests began (its fixture's converge done): logins are looked at from
# there on, past any the booting of a fresh fleet left in the journal.
MODULE_START: dict[str, float] = {}


@pytest.fixture(scope="module")
def fleet_up(fleet):
    for up in converged(fleet):
        MODULE_START["at"] = time.time()
        yield up


def test_converge_serves_eagle3_on_every_host(fleet_up):
    for host in fleet_up.hosts:
        state = host_state(fleet_up, host)
        assert state["active_state"] == "active" and state["health"] == 200, (host, state)
        info = server_info(fleet_up, host)
        assert info["speculative_algorithm"] == "EAGLE3"
        assert info["speculative_draft_model_path"] == "lightseekorg/kimi-k2.5-eagle3"


def unit_run(fleet, host: str) -> str:
    """What changes when the unit restarts: its main pid, restart count, and start time."""
    return fleet.inside(host, f"systemctl show {UNIT} -p MainPID -p NRestarts "
                            "-p ActiveEnterTimestampMonotonic").stdout


def test_second_converge_changes_nothing_and_restarts_nothing(fleet_up):
    """Molecule's idempotence step: the same converge again, no change and no restart."""
    before = {host: unit_run(fleet_up, host) for host in fleet_up.hosts}
    sshd_logs_sessions(fleet_up, fleet_up.hosts)
    since = time.time()
    result = deploy()
    assert result.returncode == 0, result.stdout[-3000:]
    totals = results(result.stdout)
    assert totals["success"] == 0 and totals["error"] == 0, result.stdout[-3000:]
    assert totals["no_change"] == totals["hosts"]
    assert {host: unit_run(fleet_up, host) for host in fleet_up.hosts} == before
    # Everything it decided from came in one read per host (sglfleet.facts.host), counted by sshd.
    assert journal_shows_logins(fleet_up, fleet_up.hosts, since)
    assert {host: sshd_commands(fleet_up, host, since) for host in fleet_up.hosts} == dict.fromkeys(fleet_up.hosts, 1)


def test_dry_run_prints_the_plan_and_changes_no_byte(fleet_up):
    before = {host: tree_digest(fleet_up, host, LAYOUT.root, "/etc") for host in fleet_up.hosts}
    result = pyinfra("deploy.py", "--dry", "--diff", *EAGLE_CHANGE)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "+ --speculative-num-steps 4" in result.stdout
    assert not re.search(r"^\s+- --speculative-num-steps", result.stdout, re.M)  # none before
    for wave, host in (("canary", "node1"), ("wave1", "node2"), ("wave2", "node3")):
        assert re.search(rf"\[{host}\] {wave}: will switch \w+ -> \w+, gate", result.stdout)
    after = {host: tree_digest(fleet_up, host, LAYOUT.root, "/etc") for host in fleet_up.hosts}
    assert after == before


def test_change_rolls_out_canary_then_wave1_then_wave2(fleet_up):
    before = serving(fleet_up)
    result = deploy(*EAGLE_CHANGE)
    assert result.returncode == 0, result.stdout[-3000:]
    after = fleet_state(fleet_up)
    for host, state in after.items():
        assert state["current"] != before[host][0] and state["health"] == 200, (host, state)
        assert state["previous"] == before[host][0]
    node1, node2, node3 = (started_at(fleet_up, h) for h in ("node1", "node2", "node3"))
    assert node1 < node2 < node3
    assert server_info(fleet_up, "node1")["speculative_num_steps"] == 4

    status = sglfleet("status", "inventory/dev.py", "--json")  # as deploy, with sudo
    assert status.returncode == 0, status.stdout + status.stderr
    rows = {row["host"]: row for row in json.loads(status.stdout)}
    assert {host: rows[host]["current"] for host in fleet_up.hosts} == {h: s["current"] for h, s in after.items()}
    assert all(rows[host]["stack"].startswith("dev-") and rows[host]["health"] == 200 for host in fleet_up.hosts)


def test_canary_that_crashes_is_rolled_back_and_later_waves_are_untouched(fleet_up):
    before = serving(fleet_up)
    untouched = {host: started_at(fleet_up, host) for host in ("node2", "node3")}
    fleet_up.fault("node1", "crash")
    result = deploy(*OTHER_CHANGE, "--data", "gate_warmup_s=30")
    fleet_up.fault("node1", "clear")

    assert result.returncode != 0
    assert re.search(r"\[node1\] gate failed on release \w+: unit: ", result.stdout), result.stdout[-3000:]
    assert "wave1 not started: node1 of canary did not pass (1 of 1 hosts, above max_fail_percentage 0)" in result.stdout
    assert serving(fleet_up) == before  # node1 serves its old release again
    assert {host: started_at(fleet_up, host) for host in ("node2", "node3")} == untouched


def test_canary_never_ready_is_rolled_back_when_the_budget_runs_out(fleet_up):
    before = serving(fleet_up)
    fleet_up.fault("node1", "unready")
    result = deploy(*OTHER_CHANGE, "--data", "gate_warmup_s=5")
    fleet_up.fault("node1", "clear")

    assert result.returncode != 0
    assert re.search(r"\[node1\] gate failed on release \w+: health: not ready within 5 s",
                     result.stdout), result.stdout[-3000:]
    assert serving(fleet_up) == before


@pytest.mark.parametrize("data, message", [
    (('extra_flags=["--speculative-num-stepz", "3"]',),
     "--speculative-num-stepz is not a flag of sglang 0.5.9"),
    (("enable_torch_symm_mem=true", "gpu_compute_cap=12.0", "gpu_less=false", "patch_sets_skip=sm120_symm_mem"),
     "enable_torch_symm_mem: sglang 0.5.9 on SM120 (declared: gpu_compute_cap 12.0) fails at start-up"),
], ids=["misspelt-flag", "sm120-torch-symm-mem"])
def test_lint_refusal_changes_no_host(fleet_up, data, message):
    before = {host: tree_digest(fleet_up, host, LAYOUT.root, "/etc") for host in fleet_up.hosts}
    result = deploy(*(arg for pair in data for arg in ("--data", pair)))
    assert result.returncode == 2
    assert message in result.stdout, result.stdout[-2000:]
    assert "Connected" not in result.stdout
    after = {host: tree_digest(fleet_up, host, LAYOUT.root, "/etc") for host in fleet_up.hosts}
    assert after == before


def test_rollback_returns_every_host_to_its_previous_release(fleet_up):
    before = fleet_state(fleet_up)
    result = pyinfra("rollback.py", "-y")
    assert result.returncode == 0, result.stdout[-3000:]
    after = fleet_state(fleet_up)
    for host in fleet_up.hosts:
        assert after[host]["current"] == before[host]["previous"], host
        assert after[host]["previous"] == before[host]["current"], host
        assert after[host]["health"] == 200


def test_old_releases_are_collected_after_the_rollout(fleet_up):
    keep_none = ("--data", "releases_keep=0")
    result = deploy(*EAGLE_CHANGE, "--data", "speculative_num_steps=6",
                    "--data", "speculative_num_draft_tokens=7", *keep_none)
    assert result.returncode == 0, result.stdout[-3000:]
    for host, state in fleet_state(fleet_up).items():
        assert set(state["releases"]) == {state["current"], state["previous"]}, host
    again = deploy(*EAGLE_CHANGE, "--data", "speculative_num_steps=6",
                   "--data", "speculative_num_draft_tokens=7", *keep_none)
    assert results(again.stdout)["success"] == 0, again.stdout[-3000:]


def test_secrets_stay_in_the_root_only_env_file(fleet_up):
    for host in fleet_up.hosts:
        mode = fleet_up.inside(host, f"stat -c '%a %U %G' {LAYOUT.env_file}").stdout.split()
        assert mode == ["600", "root", "root"]
        env = fleet_up.inside(host, f"cat {LAYOUT.env_file}").stdout
        assert f"HF_TOKEN={SECRETS['SGLFLEET_HF_TOKEN']}" in env
        visible = fleet_up.inside(
            host, f"cat {LAYOUT.unit_file} {LAYOUT.current}/*; ps -eo args"
        ).stdout
        for value in SECRETS.values():
            assert value not in visible, host


def test_only_the_deploy_user_logged_in_through_the_module(fleet_up):
    """Every converge, dry run, status, failed gate and rollback above went as ``deploy``."""
    for host in fleet_up.hosts:
        users = {user for user, _ in ssh_logins(fleet_up, host, MODULE_START["at"])}
        assert users == {"deploy"}, (host, users)
