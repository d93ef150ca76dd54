"""
Rollouts in batches on a local fleet of six hosts, as Ansible's ``serial`` and
``max_fail_percentage`` cut and budget a play: batches in order and within
their waves, a failure within the budget rolled back while the run goes on, a
failure above it stopping the run, and a rollout paused after a wave and resumed.
"""

import re

import pytest

from deploying import converged, deploy, fleet_state, sglfleet
from paths import UNIT

pytestmark = pytest.mark.fleet

# Six hosts: canary node1, wave1 node2-node4, wave2 node5-node6 (inventory/dev.py).
SERIAL = ("--data", "rollout_serial=[1, 2]")


def change(steps: int) -> tuple[str, ...]:
    """A new release on every host: the EAGLE numbers move."""
    return ("--data", f"speculative_num_steps={steps}", "--data", "speculative_eagle_topk=1",
            "--data", f"speculative_num_draft_tokens={steps + 1}")


def started(fleet) -> dict[str, int]:
    out = {}
    for host in fleet.hosts:
        line = fleet.inside(host, f"systemctl show {UNIT} -p ActiveEnterTimestampMonotonic").stdout
        out[host] = int(line.strip().split("=", 1)[1])
    return out


def currents(fleet) -> dict[str, str]:
    return {host: state["current"] for host, state in fleet_state(fleet).items()}


@pytest.fixture(scope="module")
def six(fleet):
    fleet.up(6)
    yield from converged(fleet)  # the new hosts fetch the stack's wheels from their peers
    fleet.up(3)


def test_batches_switch_in_order_and_never_cross_a_wave(six):
    before = started(six)
    done = deploy(*change(2), *SERIAL)
    assert done.returncode == 0, done.stdout[-3000:]
    labels = {host: re.search(rf"\[{host}\] ([\w ]+): will switch", done.stdout).group(1) for host in six.hosts}
    assert labels == {"node1": "canary batch 1", "node2": "wave1 batch 2", "node3": "wave1 batch 2",
                      "node4": "wave1 batch 3", "node5": "wave2 batch 4", "node6": "wave2 batch 4"}
    after = started(six)
    assert all(after[host] != before[host] for host in six.hosts)
    batches = [["node1"], ["node2", "node3"], ["node4"], ["node5", "node6"]]
    for earlier, later in zip(batches, batches[1:]):
        assert max(after[h] for h in earlier) < min(after[h] for h in later), (earlier, later, after)
    assert "--> Rollout: 6 passed (node1, node2, node3, node4, node5, node6)" in done.stdout


def test_a_failure_within_the_budget_is_rolled_back_and_the_run_goes_on(six):
    before = currents(six)
    six.fault("node3", "crash")
    done = deploy(*change(3), *SERIAL, "--data", "max_fail_percentage=50", "--data", "gate_warmup_s=30")
    six.fault("node3", "clear")
    assert done.returncode == 1  # a host failed: the exit status says so
    after = currents(six)
    assert after["node3"] == before["node3"]  # rolled back to what it served
    assert all(after[host] != before[host] for host in six.hosts if host != "node3")
    assert re.search(r"--> Rollout: 1 failed: node3 \(gate failed on release \w+: unit: ", done.stdout), \
        done.stdout[-3000:]
    assert "--> Rollout: 5 passed (node1, node2, node4, node5, node6)" in done.stdout


def test_above_the_budget_the_run_stops_before_the_next_batch(six):
    before = currents(six)
    untouched = {host: started(six)[host] for host in ("node4", "node5", "node6")}
    six.fault("node3", "crash")
    done = deploy(*change(4), *SERIAL, "--data", "max_fail_percentage=40", "--data", "gate_warmup_s=30")
    six.fault("node3", "clear")
    assert done.returncode == 1
    assert "[node4] wave1 batch 3 not started: node3 of wave1 batch 2 did not pass (1 of 2 hosts, above " \
           "max_fail_percentage 40)" in done.stdout, done.stdout[-3000:]
    after = currents(six)
    assert after["node1"] != before["node1"] and after["node2"] != before["node2"]
    assert {host: after[host] for host in ("node3", "node4", "node5", "node6")} == \
        {host: before[host] for host in ("node3", "node4", "node5", "node6")}
    now = started(six)
    assert {host: now[host] for host in ("node4", "node5", "node6")} == untouched


def test_a_rollout_paused_after_the_canary_resumes_where_it_stopped(six):
    paused = deploy(*change(5), "--data", "rollout_until=canary")
    assert paused.returncode == 0, paused.stdout[-3000:]
    assert "--> Rollout: paused after wave canary: wave1, wave2 not started; run again without rollout_until " \
           "to go on" in paused.stdout
    status = sglfleet("status", "inventory/dev.py", *change(5))
    assert "rollout: 1 of 6 hosts serve their declared release (canary 1/1, wave1 0/3, wave2 0/2)" in status.stdout, \
        status.stdout
    canary = started(six)["node1"]

    resumed = deploy(*change(5))
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "--> Rollout: 5 passed (node2, node3, node4, node5, node6)" in resumed.stdout
    assert started(six)["node1"] == canary  # the canary, done, is not switched again
    assert len(set(currents(six).values())) == 1
    status = sglfleet("status", "inventory/dev.py", *change(5))
    assert "rollout: 6 of 6 hosts serve their declared release (canary 1/1, wave1 3/3, wave2 2/2)" in status.stdout


def test_a_new_release_while_paused_starts_again_from_the_canary(six):
    paused = deploy(*change(6), "--data", "rollout_until=canary")
    assert paused.returncode == 0, paused.stdout[-3000:]
    on_paused = currents(six)
    # Another release is declared before the paused one went further: it rolls out
    # from the canary again, and the paused release goes nowhere else.
    done = deploy(*change(2), *SERIAL)
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(rf"\[node1\] canary batch 1: will switch {on_paused['node1']} -> \w+, gate", done.stdout)
    now = currents(six)
    assert len(set(now.values())) == 1 and now["node1"] != on_paused["node1"]
    starts = started(six)
    assert starts["node1"] < min(starts[host] for host in six.hosts if host != "node1")
