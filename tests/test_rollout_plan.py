"""
The fleet's rollout plan (``sglfleet.plan.rollout_plan.plan_rollout``): which hosts, and which of
their services, this run restarts, as each one's rollout step will decide it (``decide``, tabled in
test_rollout_decision), and which services hand compile caches on to a later batch. Each case is the
batches, each host's read (None: it failed) and its releases, and what the plan answers.
"""

import pytest

from sglfleet.facts.gpu import Gpu
from sglfleet.facts.host import HostState
from sglfleet.facts.release import ReleaseHostState
from sglfleet.facts.stack import StackHostState
from sglfleet.host.compile_cache import cache_key
from sglfleet.plan.rollout_plan import HostRollout, plan_rollout

R, OLD, STACK = "3f2a9c1d0b7e6a55", "9c41d0e2a7b35f18", "dev-0a24832cc36f"
H200 = [Gpu("H200", "580.95.05", "9.0", 143771)]
B200 = [Gpu("B200", "580.95.05", "10.0", 183359)]
KEY = cache_key(STACK, [("9.0", "580.95.05")])


def serving(release, busy=False, active="active", verdict=None):
    return ReleaseHostState(current=release, serving=release, active_state=active, busy=busy,
                            verdict=verdict or {"startup": {"passed": True}})


def read(services, gpus=H200, drift=(), built=True):
    """A host's read: ``{service: ReleaseHostState or None}``; ``drift`` and ``built`` its stack's."""
    marker = {"stack_id": STACK, "ok": True} if built else None
    return HostState(gpus=list(gpus), stack=StackHostState(stack_id=STACK, marker=marker, venv=True, drift=list(drift)),
                     release=next(iter(services.values()), None), services=dict(services))


def one(services, releases=None, **kwargs):
    """One host of one service each, ``sglang``: ``services`` its read, ``releases`` the run's (R)."""
    return HostRollout(found=read(services, **kwargs) if services is not None else None,
                       releases=releases or {name: R for name in services or {"sglang": None}}, bake_s=0,
                       stack_id=STACK)


# batches, hosts, restarting hosts, restarting with ("switch", "restart"), services handing caches on
TABLE = [
    # a change rolled out: every host switches; the canary's caches go to wave1, wave1's to nobody
    ([("n1",), ("n2",)], {"n1": one({"sglang": serving(OLD)}), "n2": one({"sglang": serving(OLD)})},
     {"n1", "n2"}, {"n1", "n2"}, {("n1", "sglang")}),
    # n2 serves R already: nobody after n1 restarts, so n1 packs nothing
    ([("n1",), ("n2",)], {"n1": one({"sglang": serving(OLD)}), "n2": one({"sglang": serving(R)})},
     {"n1"}, {"n1"}, set()),
    # another run holds n2's lock: it most likely switches once free, so n1 hands on; a wait moves no link
    ([("n1",), ("n2",)], {"n1": one({"sglang": serving(OLD)}), "n2": one({"sglang": serving(OLD, busy=True)})},
     {"n1", "n2"}, {"n1"}, {("n1", "sglang")}),
    # n1's stack drifted and is built again: it restarts though it serves R
    ([("n1",), ("n2",)], {"n1": one({"sglang": serving(R)}, drift=["sglang/x.py"]), "n2": one({"sglang": serving(R)})},
     {"n1"}, {"n1"}, set()),
    # a hand moved n1's current: a relink restarts nothing
    ([("n1",)], {"n1": one({"sglang": ReleaseHostState(current=OLD, serving=R, active_state="active")})},
     set(), set(), set()),
    # a read that failed: the host restarts nothing and shares nothing, and n2 is not waited for
    ([("n1",), ("n2",)], {"n1": one({"sglang": serving(OLD)}), "n2": one(None)},
     {"n1"}, {"n1"}, set()),
    # another GPU architecture is another key: B200 hosts take nothing from the H200 canary
    ([("n1",), ("n2",), ("n3",)], {"n1": one({"sglang": serving(OLD)}), "n2": one({"sglang": serving(OLD)}, gpus=B200),
                                   "n3": one({"sglang": serving(OLD)}, gpus=B200)},
     {"n1", "n2", "n3"}, {"n1", "n2", "n3"}, {("n2", "sglang")}),
    # named services: each its own key; only b changes on n2, so only n1's b hands on
    ([("n1",), ("n2",)], {"n1": one({"a": serving(OLD), "b": serving(OLD)}),
                          "n2": one({"a": serving(R), "b": serving(OLD)})},
     {"n1", "n2"}, {"n1", "n2"}, {("n1", "b")}),
    # a named service the read did not find (new to the host): it has no action, the host's others decide
    ([("n1",)], {"n1": one({"a": serving(R)}, releases={"a": R, "b": R})}, set(), set(), set()),
]


@pytest.mark.parametrize("batches, hosts, restarts, switches, later", TABLE)
def test_the_plan_restarts_what_each_hosts_steps_will(batches, hosts, restarts, switches, later):
    plan = plan_rollout(batches, hosts)
    assert {name for name in hosts if plan.restarts(name)} == restarts
    assert {name for name in hosts if plan.restarts(name, ("switch", "restart"))} == switches
    assert {entry for entry, hands_on in plan.later.items() if hands_on} == later


def test_each_service_shares_under_its_own_key_and_the_legacy_one_under_the_hosts():
    plan = plan_rollout((), {"n1": one({"a": serving(OLD)}), "n2": one({"sglang": serving(OLD)}), "n3": one(None)})
    # n3's read failed: a key of its own, which matches nobody's
    assert plan.keys == {("n1", "a"): f"{KEY}+a", ("n2", "sglang"): KEY, ("n3", "sglang"): "n3+unread+sglang"}
    assert plan.actions == {"n1": {"a": "switch"}, "n2": {"sglang": "switch"}, "n3": {}}
