"""
One server over several hosts, planned without a host: each rank's flags and release, the head alone a
gateway worker, the group one rollout unit (its drain, its switch at once, its settle), the group's
ports in the firewall policy, and the settle that rolls a failed group back whole. The stand-in's ranks
are in test_standin_multinode; the local fleet in test_multinode_fleet.
"""

from types import SimpleNamespace

import pytest
from pyinfra.api import Inventory

from sglfleet.plan.network import EPHEMERAL
from sglfleet.plan.pd_units import Wave, plan_units, settle, unit_steps
from sglfleet.plan.rollout_plan import RolloutPlan
from sglfleet.plan.rollout_steps import host_steps
from sglfleet.plan.validation import plan_inventory

BASE = {"stack": "dev", "server": "standin", "gpu_less": True, "model_path": "m", "allow_unpinned_models": True}
GROUP = {"nodes": ["node1", "node2"], "tp_size": 2}


def fleet_of(own=None, **groups):
    """node1 + node2 one group (node1 the head) in the canary, node3 alone in wave1, gw the gateway."""
    own = own or {"node1": GROUP, "node2": GROUP}
    names = ["node1", "node2", "node3", "gw"]
    hosts = [(name, {**BASE, "ssh_hostname": f"10.0.0.{i}", **own.get(name, {})}) for i, name in enumerate(names, 1)]
    groups = groups or {"canary": ["node1", "node2"], "wave1": ["node3"], "gateways": ["gw"]}
    return plan_inventory(Inventory((hosts, {}), **{name: (members, {}) for name, members in groups.items()}))


def args_of(fleet, name):
    return list(fleet.hosts[name].build(None).releases["sglang"].args)


def test_each_rank_launches_with_its_rank_and_the_heads_init_address():
    fleet = fleet_of()
    group = ["--nnodes", "2", "--node-rank", "{}", "--dist-init-addr", "10.0.0.1:20000"]
    for rank, name in enumerate(("node1", "node2")):
        args = args_of(fleet, name)
        at = args.index("--nnodes")
        assert args[at:at + 6] == [flag.format(rank) for flag in group]
    assert "--nnodes" not in args_of(fleet, "node3")  # a server on one host: its release as before


def test_a_server_on_one_host_keeps_its_release_id():
    alone = fleet_of(own={})
    assert args_of(alone, "node3") == args_of(fleet_of(), "node3")
    assert (alone.hosts["node3"].build(None).releases["sglang"].release_id
            == fleet_of().hosts["node3"].build(None).releases["sglang"].release_id)


def test_only_the_head_is_a_worker_of_the_gateways():
    assert [worker.url for worker in fleet_of().workers] == ["http://10.0.0.1:30000", "http://10.0.0.3:30000"]


def test_a_group_is_one_unit_and_rollout_serial_counts_groups():
    groups = {"n1": ("n1", "n2"), "n2": ("n1", "n2"), "n3": ("n3", "n4"), "n4": ("n3", "n4")}
    waves = [Wave("canary", ("n1", "n2")), Wave("wave1", ("n3", "n4", "n5"))]
    assert [batch.units for batch in plan_units(waves, [1], {}, groups)] == [
        (("n1", "n2"),), (("n3", "n4"),), (("n5",),)]
    steps = unit_steps(plan_units(waves, None, {}, groups), {})
    assert [(step.label({}), step.flip) for step in steps[:4]] == [
        ("canary batch 1 drain", False), ("canary batch 1 stop", False), ("canary batch 1", False),
        ("canary batch 1 settle", False)]


def test_each_host_drains_switches_and_settles_in_step_with_its_group():
    fleet = fleet_of()
    restarts = RolloutPlan(actions={name: {"sglang": "switch"} for name in ("node1", "node2", "node3")})
    seen = {}
    for name in ("node1", "node2", "node3"):
        seen[name] = [step[:2] if isinstance(step, tuple) and step[0] == "idle" else
                      (step[0], step[1].label, step[1].worker_url, step[1].gateways != ()) if isinstance(step, tuple)
                      else ("switch", step.label, step.pd_unit, step.together, step.drained, step.gateways != ())
                      for step in host_steps(fleet, fleet.hosts[name], restarts)]
    assert seen["node1"][:4] == [("drain", "canary batch 1 drain", "http://10.0.0.1:30000", True),
                                 ("stop", "canary batch 1 stop", "http://10.0.0.1:30000", True),
                                 ("switch", "canary batch 1", ("node1", "node2"), True, True, True),
                                 ("settle", "canary batch 1 settle", "http://10.0.0.1:30000", True)]
    # rank 1 serves no API: it leaves and joins no gateway, stops and switches at the same steps as its head
    assert seen["node2"][:4] == [("drain", "canary batch 1 drain", None, False),
                                 ("stop", "canary batch 1 stop", None, False),
                                 ("switch", "canary batch 1", ("node1", "node2"), True, True, False),
                                 ("settle", "canary batch 1 settle", None, False)]
    assert seen["node3"][:4] == [("idle", "canary batch 1 drain"), ("idle", "canary batch 1 stop"),
                                 ("idle", "canary batch 1"), ("idle", "canary batch 1 settle")]
    # a failed group's settle in three turns: it leaves the gateways, stops whole, then goes back
    assert [step[0] for step in seen["node1"][3:6]] == ["settle", "halt", "flip"]
    assert seen["node3"][4:6] == [("idle", "canary batch 1 settle"), ("idle", "canary batch 1 settle")]
    assert seen["node3"][8][:2] == ("switch", "wave1 batch 2") and seen["node3"][8][3] is False
    assert {len(steps) for steps in seen.values()} == {12}


def test_a_converge_that_changes_nothing_drains_and_stops_nothing():
    fleet = fleet_of()
    steady = RolloutPlan(actions={})
    steps = [step for step in host_steps(fleet, fleet.hosts["node1"], steady) if isinstance(step, tuple) and step[0] in ("drain", "stop")]
    assert [(step[0], step[3]) for step in steps] == [("drain", False), ("stop", False)]  # no command


def test_only_a_host_that_restarts_is_stopped():
    fleet = fleet_of()
    rank_only = RolloutPlan(actions={"node2": {"sglang": "switch"}})
    steps = {name: {step[0]: step[3] for step in host_steps(fleet, fleet.hosts[name], rank_only)
                    if isinstance(step, tuple) and step[0] in ("drain", "stop")} for name in ("node1", "node2")}
    # its operation would not start the head again: it keeps serving, and NCCL restarts the group
    assert steps == {"node1": {"drain": True, "stop": False}, "node2": {"drain": True, "stop": True}}


@pytest.mark.parametrize("switched, unit_failed, action", [
    (True, False, "serve"),
    (True, True, "rollback"),     # its own gate passed, another rank's failed: back with the group
    (False, True, "rollback"),    # its own gate failed, and it did not go back alone (--together)
])
def test_a_failed_group_goes_back_whole(switched, unit_failed, action):
    assert settle(switched, unit_failed, over_budget=False, flip=False, together=True) == action


def test_a_failed_group_stops_whole_then_goes_back_together_and_fails(monkeypatch):
    from sglfleet.controller import pd
    from sglfleet.plan.rollout_steps import BatchStep, SettleTurn
    from sglfleet.record.run import record

    calls = []
    monkeypatch.setattr(pd, "leave", lambda state, host, step: calls.append(("leave", host.name)) or True)
    monkeypatch.setattr(pd, "stopped", lambda state, host, args, step: calls.append(("stop", host.name)) or True)
    monkeypatch.setattr(pd, "roll_back", lambda state, host, args, step, undo: calls.append(
        ("back", host.name, step.together, step.drained, undo)) or True)
    state = SimpleNamespace(failed_hosts=[])
    record(state).failed.update({"node1": "gate failed"})  # the head's gate (or bake) failed; it stayed up
    record(state).passed.update({"node2": "serves the new release"})
    turn = SettleTurn(units=(("node1", "node2"),), flip=False, leader=True, workers=())
    host = SimpleNamespace(name="node2", log=lambda *a: None, log_styled=lambda *a, **k: None)
    step = BatchStep("canary batch 1 settle", pd_unit=("node1", "node2"), together=True)
    # The settle: every member leaves the gateways (the head drains), and none stops yet: a rank that stopped
    # would take the head's server down with the streams still on it.
    for name in ("node2", "node1"):
        host.name = name
        assert pd.settled(state, host, {}, step, turn) is True
    assert calls == [("leave", "node2"), ("leave", "node1")]
    # The next turn: every member stops; none goes back while another still runs.
    for name in ("node2", "node1"):
        host.name = name
        assert pd.halted(state, host, {}, step, turn) is True
    assert calls[2:] == [("stop", "node2"), ("stop", "node1")]
    # The last: each goes back (rollback --together, already out of the gateways), and fails with its group.
    for name in ("node2", "node1"):
        host.name = name
        assert pd.flipped(state, host, {}, step, turn, undo=True) is False
    assert calls[4:] == [("back", "node2", True, True, True), ("back", "node1", True, True, True)]
    assert record(state).failed["node2"] == "canary batch 1 settle: rolled back with its group: node1 failed"


def test_a_group_that_passed_neither_stops_nor_goes_back(monkeypatch):
    from sglfleet.controller import pd
    from sglfleet.plan.rollout_steps import BatchStep, SettleTurn
    from sglfleet.record.run import record

    monkeypatch.setattr(pd, "stopped", lambda *a: pytest.fail("a group that passed was stopped"))
    monkeypatch.setattr(pd, "roll_back", lambda *a: pytest.fail("a group that passed went back"))
    state = SimpleNamespace(failed_hosts=[])
    record(state).passed.update({"node1": "serves", "node2": "serves"})
    turn = SettleTurn(units=(("node1", "node2"),), flip=False, leader=True, workers=())
    host = SimpleNamespace(name="node1", log=lambda *a: None, log_styled=lambda *a, **k: None)
    step = BatchStep("canary batch 1 settle", pd_unit=("node1", "node2"), together=True)
    monkeypatch.setattr(pd, "leave", lambda *a: pytest.fail("a group that passed left the gateways"))
    assert all(turn_of(state, host, {}, step, turn) is True for turn_of in (pd.settled, pd.halted, pd.flipped))


def test_the_init_and_nccl_ports_open_only_between_the_groups_hosts():
    fleet = fleet_of()
    head, rank, alone = (fleet.hosts[name].policy.text for name in ("node1", "node2", "node3"))
    ephemeral = f"{EPHEMERAL[0]}-{EPHEMERAL[1]}"
    assert f'ip saddr {{ 10.0.0.2 }} tcp dport {{ 20000, {ephemeral} }} accept' in head
    assert f'ip saddr {{ 10.0.0.1 }} tcp dport {ephemeral} accept' in rank
    assert "20000" not in alone and "group:" not in alone
