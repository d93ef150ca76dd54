"""
The PD rollout unit as data (sglfleet.plan.pd_units): how hosts are dealt into units, batches that
count units, the order decode -> prefill -> settle, and each host's choice when its batch settles,
as ``decide``'s table in test_rollout_decision. No pair of two releases is ever routable: checked
by walking each plan step by step.
"""

import pytest

from sglfleet.plan.pd_units import (capacity, over_budget, plan_units, rejoins, settle, unit_problems, unit_steps,
                                    units_of)
from sglfleet.plan.waves import Wave
from sglfleet.plan.pd import pairing_generation

P, D = "prefill", "decode"
ROLES = {"n1": P, "n2": D, "n3": P, "n4": D, "n5": P, "n6": D, "n7": D}


@pytest.mark.parametrize("hosts, units", [
    (["n1", "n2"], [("n1", "n2")]),
    (["n1", "n2", "n3", "n4"], [("n1", "n2"), ("n3", "n4")]),
    (["n1", "n2", "n4", "n6", "n7"], [("n1", "n2", "n4", "n6", "n7")]),       # one prefill: one unit
    (["n1", "n3", "n2", "n4", "n6"], [("n1", "n2", "n4"), ("n3", "n6")]),     # inventory order kept
    (["n2", "n4"], [("n2",), ("n4",)]),                                     # decodes only: one a host
])
def test_a_waves_hosts_are_dealt_into_units(hosts, units):
    assert units_of(hosts, ROLES) == units


def test_rollout_serial_counts_units_and_a_batch_never_crosses_a_wave():
    waves = [Wave("canary", ("n1", "n2")), Wave("wave1", ("n3", "n4", "n5", "n6"))]
    batches = plan_units(waves, [1], ROLES)
    assert [(b.name, b.units) for b in batches] == [
        ("canary batch 1", (("n1", "n2"),)), ("wave1 batch 2", (("n3", "n4"),)), ("wave1 batch 3", (("n5", "n6"),))]
    assert [b.units for b in plan_units(waves, ["100%"], ROLES)] == [
        (("n1", "n2"),), (("n3", "n4"), ("n5", "n6"))]


def test_each_batch_switches_decodes_then_prefills_then_settles():
    batches = plan_units([Wave("canary", ("n1", "n2")), Wave("wave1", ("n3", "n4"))], None, ROLES)
    steps = unit_steps(batches, ROLES)
    assert [(s.kind, s.batch.number, s.role, s.hold, s.flip) for s in steps] == [
        ("switch", 1, D, True, False), ("switch", 1, P, True, False), ("settle", 1, None, True, True),
        ("switch", 2, D, False, False), ("switch", 2, P, False, False), ("settle", 2, None, False, False)]


def test_the_first_batch_needs_a_prefill_and_a_decode():
    batches = plan_units([Wave("canary", ("n2",)), Wave("wave1", ("n1", "n3"))], None, ROLES)
    [line] = unit_problems(batches, ROLES)
    assert line.startswith("canary batch 1 (n2): the first batch of a PD rollout flips the gateways")
    assert unit_problems(plan_units([Wave("canary", ("n1", "n2"))], None, ROLES), ROLES) == []


# passed, rolled back (its gate failed and the tool put the old release back), first batch -> rejoins now
REJOINS = [
    (True, False, True, False),    # first batch: held out until the flip
    (True, False, False, True),    # after the flip: the gateways serve the new release
    (False, True, True, True),     # first batch, back on the old release: the gateways still serve it
    (False, True, False, False),   # after the flip, back on the old release: stays out
    (False, False, False, False),  # down
]


@pytest.mark.parametrize("passed, rolled_back, hold, expected", REJOINS)
def test_when_a_host_rejoins_after_its_gate(passed, rolled_back, hold, expected):
    assert rejoins(passed, rolled_back, hold) is expected


# switched, unit failed, batch over budget, first batch (the flip) -> what the host does at the settle
SETTLE = [
    (True, False, False, True, "join"),           # the flip: the new release's first units join
    (True, True, False, True, "rollback-out"),    # its unit failed, the batch flips: back, and out
    (False, True, False, True, "serve"),          # its unit failed before it switched: old, drained at the flip
    (True, False, True, True, "rollback"),        # over budget: no flip; back, and in again
    (True, True, True, True, "rollback"),
    (False, False, True, True, "serve"),          # never switched: still in, on the old release
    (True, False, False, False, "serve"),         # after the flip: joined after its gate
    (True, True, False, False, "rollback-out"),   # after the flip, its unit failed
    (False, True, True, False, "serve"),
]


@pytest.mark.parametrize("switched, unit_failed, budget, flip, action", SETTLE)
def test_what_a_host_does_when_its_batch_settles(switched, unit_failed, budget, flip, action):
    assert settle(switched, unit_failed, budget, flip) == action


def test_the_failure_budget_counts_units():
    [batch] = plan_units([Wave("wave1", ("n1", "n2", "n3", "n4"))], None, ROLES)
    assert not over_budget(batch, {"n2"}, 50)       # one unit of two
    assert over_budget(batch, {"n2"}, 0)
    assert over_budget(batch, {"n2", "n3"}, 50)     # both units


def routable(plan_states):
    """Every (prefill, decode) pair the gateways could pick in a state: the releases of each."""
    for routed, release in plan_states:
        prefills = [h for h in routed if ROLES[h] == P]
        decodes = [h for h in routed if ROLES[h] == D]
        yield {(release[p], release[d]) for p in prefills for d in decodes}


def walk(batches):
    """The gateways' workers and each host's release after every step of a rollout where every gate passes."""
    steps = unit_steps(batches, ROLES)
    hosts = [h for b in batches for h in b.hosts]
    release = {h: "old" for h in hosts}
    routed = set(hosts)
    states = []
    for step in steps:
        if step.kind == "switch":
            for host in (h for h in step.hosts if ROLES[h] == step.role):
                routed.discard(host)          # drained
                states.append((set(routed), dict(release)))
                release[host] = "new"         # switched behind its gate
                if rejoins(True, False, step.hold):
                    routed.add(host)
                states.append((set(routed), dict(release)))
        elif step.flip:
            routed -= {h for h in hosts if release[h] == "old"}   # the old release leaves first
            states.append((set(routed), dict(release)))
            routed |= {h for h in step.hosts if settle(True, False, False, True) == "join"}
            states.append((set(routed), dict(release)))
    return states


@pytest.mark.parametrize("waves", [
    [Wave("canary", ("n1", "n2"))],
    [Wave("canary", ("n1", "n2")), Wave("wave1", ("n3", "n4", "n5", "n6", "n7"))],
])
def test_no_pair_of_two_releases_is_ever_routable(waves):
    for pairs in routable(walk(plan_units(waves, [1], ROLES))):
        assert all(prefill == decode for prefill, decode in pairs), pairs


def test_what_each_batch_costs():
    roles = {"n1": P, "n2": D, "n3": P, "n4": D}
    batches = plan_units([Wave("canary", ("n1", "n2")), Wave("wave1", ("n3", "n4"))], None, roles)
    assert capacity(batches, roles) == [("canary batch 1 switching", 0.5), ("flip", 0.5),
                                        ("wave1 batch 2 switching", 0.5), ("done", 1.0)]
    one_pair = {"n1": P, "n2": D}
    assert capacity(plan_units([Wave("canary", ("n1", "n2"))], None, one_pair), one_pair) == [
        ("canary batch 1 switching", 0.0), ("flip", 1.0), ("done", 1.0)]


def test_each_hosts_operations_follow_the_units_in_step_with_the_others():
    """Each host's rollout steps (sglfleet.plan.rollout_steps, as tasks/rollout.py calls them) for a 2 + 2 fleet behind a gateway: the same positions on every host (pyinfra runs
    them in step), each host's turn where its role and batch are, and its settle with its worker and role."""
    from pyinfra.api import Inventory

    from sglfleet.plan.validation import plan_inventory
    from sglfleet.plan.rollout_plan import RolloutPlan
    from sglfleet.plan.rollout_steps import host_steps

    base = {"stack": "dev", "server": "standin", "gpu_less": True, "model_path": "m", "listen_host": "0.0.0.0"}
    roles = {"node1": P, "node2": D, "node3": P, "node4": D}
    hosts = [(name, {**base, "ssh_hostname": f"10.0.0.{i}", "disaggregation_mode": role})
             for i, (name, role) in enumerate(roles.items(), 1)]
    inventory = Inventory((hosts + [("gw", {**base, "ssh_hostname": "10.0.0.9"})], {}),
                          canary=(["node1", "node2"], {}), wave1=(["node3", "node4"], {}), gateways=(["gw"], {}))
    fleet = plan_inventory(inventory)
    # Every host restarts (sglfleet.plan.rollout_plan); the steps share no compile caches (roll_out adds them).
    restarts = RolloutPlan(actions={name: {"sglang": "switch"} for name in roles})

    seen = {name: [step[:3] if isinstance(step, tuple) and step[0] == "idle" else
                   (step[0], step[1].label, step[2].flip, step[2].leader, step[1].worker_url,
                    dict(step[1].worker_spec)) if isinstance(step, tuple) else
                   ("switch", step.label, step.hold, step.pd_unit, len(step.earlier_units))
                   for step in host_steps(fleet, fleet.hosts[name], restarts)]
            for name in roles}
    generation = {"pairing_protocol": pairing_generation(fleet.hosts["node2"].config)}
    assert seen["node2"][:4] == [("switch", "canary batch 1 decodes", True, ("node1", "node2"), 0),
                                 ("idle", "canary batch 1 prefills", "switch"),
                                 ("settle", "canary batch 1 settle", True, False, "http://10.0.0.2:30000",
                                  {"worker_type": "decode", **generation}),
                                 ("flip", "canary batch 1 settle", True, False, "http://10.0.0.2:30000",
                                  {"worker_type": "decode", **generation})]
    assert seen["node1"][1] == ("switch", "canary batch 1 prefills", True, ("node1", "node2"), 0)
    assert seen["node1"][2][3] is True  # the batch's leader takes the old release out at the flip
    assert seen["node3"][5] == ("switch", "wave1 batch 2 prefills", False, ("node3", "node4"), 1)
    assert seen["node4"][4] == ("switch", "wave1 batch 2 decodes", False, ("node3", "node4"), 1)
    assert {len(steps) for steps in seen.values()} == {8}
    # An operation at every step on every host, a no-op where it is not in it: pyinfra orders a host's
    # operations only after its own, so without it wave1's switches ran before the canary's flip.
    assert seen["node3"][:5] == [("idle", "canary batch 1 decodes", "switch"),
                                 ("idle", "canary batch 1 prefills", "switch"),
                                 ("idle", "canary batch 1 settle", "settle"), ("idle", "canary batch 1 settle", "flip"),
                                 ("idle", "wave1 batch 2 decodes", "switch")]


class _Host:
    def __init__(self, name):
        self.name, self.lines = name, []

    def log(self, line, *_):
        self.lines.append(line)


@pytest.mark.parametrize("failed, passed, flips, rolled", [
    (set(), {"n1", "n2"}, [(["http://n3:30000", "http://n4:30000"],   # within budget: the old release leaves
                            ["http://n1:30000", "http://n2:30000"])], []),  # once the unit joined beside it
    ({"n2"}, {"n1"}, [], ["n1"]),                                          # the decode failed: back, no flip
    ({"n1"}, {"n2"}, [], ["n2"]),                                          # the prefill failed: the unit rolls back
])
def test_the_first_batch_settles_by_flipping_or_rolling_back(monkeypatch, failed, passed, flips, rolled):
    from types import SimpleNamespace

    from sglfleet.controller import pd, router
    from sglfleet.plan.rollout_steps import BatchStep
    from sglfleet.record.run import record

    calls = {"flip": [], "rolled": []}
    monkeypatch.setattr(router, "flip", lambda url, old, new, **kw: calls["flip"].append((list(old), sorted(new))))
    monkeypatch.setattr(pd, "roll_back", lambda state, host, args, step, undo: calls["rolled"].append(host.name) or True)
    state = SimpleNamespace(failed_hosts=[SimpleNamespace(name=name) for name in failed])
    record(state).passed.update({name: "serves the new release" for name in passed})
    turn = pd.SettleTurn(units=(("n1", "n2"),), flip=True, leader=True,
                         workers=tuple((f"n{i}", f"http://n{i}:30000", (("worker_type", "decode"),)) for i in range(1, 5)))
    for name in ("n1", "n2"):
        if name in failed:
            continue  # pyinfra runs nothing more on a failed host
        step = BatchStep("canary batch 1 settle", gateways=("http://gw:30080",), pd_unit=("n1", "n2"), hold=True)
        assert pd.settled(state, _Host(name), {}, step, replace_leader(turn, name == "n1"))
    assert calls["flip"] == flips
    assert calls["rolled"] == rolled


def replace_leader(turn, leader):
    from dataclasses import replace
    return replace(turn, leader=leader)
