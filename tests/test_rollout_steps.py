"""
Each host's rollout steps (``sglfleet.plan.rollout_steps``), planned from the fleet's plan before any
host is read: one position a batch on every host (pyinfra orders operations by loop position), the
host's step where it is in the batch, with the batch's label, the batches before it, the failure budget,
where it drains and rejoins, and each service's own worker and compile-cache share. Each case is an
inventory's rollout keys and what the steps are; a PD fleet's are in test_pd_units.
"""

import pytest
from pyinfra.api import Inventory

from sglfleet.facts.host import HostState
from sglfleet.facts.release import Installed
from sglfleet.plan.validation import plan_inventory
from sglfleet.plan.rollout_plan import RolloutPlan
from sglfleet.plan.rollout_steps import cache_shares, host_steps, retired_services, retired_steps, service_steps

BASE = {"stack": "dev", "server": "standin", "gpu_less": True, "model_path": "moonshotai/Kimi-K2.5",
        "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3", "allow_unpinned_models": True,
        "listen_host": "0.0.0.0"}
TWO = [{"name": "big", "gpus": [0], "port": 30000}, {"name": "small", "gpus": [1], "port": 30001}]


def fleet_of(data=None, gateway=False, **groups):
    """An inventory of hosts n1.. (address 10.0.0.i) in the groups given, planned."""
    names = [name for hosts in groups.values() for name in hosts]
    hosts = [(name, {**BASE, "ssh_hostname": f"10.0.0.{name[1:]}", **(data or {})}) for name in names]
    if gateway:
        hosts.append(("gw", {**BASE, "ssh_hostname": "10.0.0.9", **(data or {})}))
        groups["gateways"] = ["gw"]
    return plan_inventory(Inventory((hosts, {}), **{name: (list(members), {}) for name, members in groups.items()}))


def shape(steps):
    return [None if step is None else (step.label, step.hosts, step.earlier) for step in steps]


TWO_WAVES = {"canary": ["n1"], "wave1": ["n2", "n3"]}
FIVE = {"canary": ["n1"], "wave1": ["n2", "n3", "n4", "n5"]}
# rollout keys, the waves, the host asked about, its steps as (label, hosts, earlier), None where it is not in the batch
TABLE = [
    # whole waves: one step a wave, labelled by the wave, each knowing the waves before it
    ({}, TWO_WAVES, "n2", [None, ("wave1", ("n2", "n3"), (("canary", ("n1",)),))]),
    ({}, TWO_WAVES, "n1", [("canary", ("n1",), ()), None]),
    # rollout_serial cuts the waves: batches are labelled by their number, and the percentages count every host
    ({"rollout_serial": [1, "50%"]}, FIVE, "n4",
     [None, None, ("wave1 batch 3", ("n4", "n5"), (("canary batch 1", ("n1",)), ("wave1 batch 2", ("n2", "n3"))))]),
    # rollout_until holds the later waves back: no position for them at all
    ({"rollout_until": "canary"}, TWO_WAVES, "n1", [("canary", ("n1",), ())]),
]


@pytest.mark.parametrize("keys, waves, name, expected", TABLE)
def test_each_host_has_a_position_in_every_batch_and_its_step_where_it_is_in_one(keys, waves, name, expected):
    fleet = fleet_of(keys, **waves)
    assert shape(host_steps(fleet, fleet.hosts[name])) == expected


def test_a_step_carries_the_budget_the_bake_the_lock_wait_and_where_the_host_drains():
    fleet = fleet_of({"max_fail_percentage": 20, "gate_bake_s": 30, "gate_warmup_s": 100, "releases_keep": 4},
                     gateway=True, canary=["n1"], wave1=["n2"])
    step = list(host_steps(fleet, fleet.hosts["n2"]))[1]
    assert (step.max_fail_percentage, step.bake_s, step.releases_keep) == (20, 30, 4)
    # Without router_url, the host leaves and rejoins every gateway of the fleet, with the workers' own key.
    assert step.gateways == ("http://10.0.0.9:30080",) and step.router_url is None
    # The host tool may wait for another run's lock (a gate, a bake, a rollback's gate), then gate and gate back.
    assert step.timeout_s == step.lock_wait_s + 2 * 100 + 300
    # A fleet without a gateway or a router is drained nowhere.
    alone = fleet_of(canary=["n1"])
    assert list(host_steps(alone, alone.hosts["n1"]))[0].gateways == ()


def test_each_service_of_a_host_switches_as_its_own_worker_with_its_own_share():
    fleet = fleet_of({"services": TWO}, gateway=True, canary=["n1"])
    plan = fleet.hosts["n1"]
    step = list(host_steps(fleet, plan))[0]
    own = RolloutPlan(actions={"n1": {"big": "switch", "small": "switch"}},
                      keys={("n1", "big"): "dev+cpu@big", ("n1", "small"): "dev+cpu@small"})
    shares = cache_shares(plan, own, later={("n1", "big"): True}, stack_id="dev-0a24")
    steps = [(service.name, one.service, one.worker_url, one.cache.key, one.cache.later)
             for service, one in service_steps(step, plan, True, shares)]
    assert steps == [("big", "big", "http://10.0.0.1:30000", "dev+cpu@big", True),
                     ("small", "small", "http://10.0.0.1:30001", "dev+cpu@small", False)]
    # Not routed: no worker URL to drain; and no share where compile caches are not shared.
    assert {one.worker_url for _, one in service_steps(step, plan, False, {})} == {None}
    unshared = fleet_of({"services": TWO, "share_compile_caches": False}, canary=["n1"])
    assert cache_shares(unshared.hosts["n1"], own, {}, "dev-0a24") == {}


def test_a_service_the_inventory_no_longer_names_is_retired_at_its_own_port():
    fleet = fleet_of({"services": TWO}, gateway=True, canary=["n1"])
    plan = fleet.hosts["n1"]
    found = HostState(installed=Installed(services={"big": 30000, "old": 30005, "lost": None}))
    retired = retired_services(found, plan.services)
    assert retired == {"old": 30005, "lost": None}
    step = list(host_steps(fleet, plan))[0]
    assert [(one.service, one.worker_url, one.cache) for one in retired_steps(step, plan, retired, True)] == [
        ("old", "http://10.0.0.1:30005", None), ("lost", None, None)]  # a port unknown: nothing to drain
