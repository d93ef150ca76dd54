"""
The rollout step's decision (``sglfleet.operations.release.decide``) over its inputs:
what the host's links point at, what its process serves, whether the unit is
active, another run's lock, a stack this run rebuilt, and the bake. The fleet
tests drive each branch through real hosts; this table holds every combination
that tells them apart.
"""

import pytest

from sglfleet.facts.release import ReleaseHostState
from sglfleet.operations.release import ACTIONS, decide

R, OLD = "3f2a9c1d0b7e6a55", "9c41d0e2a7b35f18"
BAKED = {"startup": {"passed": True}, "bake": {"passed": True}}
GATED = {"startup": {"passed": True}}

# current, serving, unit, busy, rebuilt, bake_s, verdict -> action
TABLE = [
    (R, R, "active", False, False, 0, {}, "noop"),
    (R, R, "active", False, False, 600, BAKED, "noop"),
    (R, R, "active", False, False, 600, GATED, "bake"),  # a run was cut during the bake
    (R, R, "active", False, True, 0, BAKED, "restart"),  # its stack drifted and was built again
    (R, R, "active", False, True, 600, GATED, "restart"),
    (OLD, R, "active", False, False, 0, {}, "relink"),  # a hand moved current
    (None, R, "active", False, False, 0, {}, "relink"),
    (OLD, R, "active", False, True, 0, {}, "switch"),  # moved by hand, and a rebuilt stack: a real restart
    (OLD, R, "active", True, False, 0, {}, "wait"),
    (R, R, "active", True, False, 0, BAKED, "wait"),  # another run holds it: not known until it ends
    (OLD, OLD, "active", True, False, 0, {}, "wait"),
    (R, OLD, "active", False, False, 0, {}, "switch"),  # current moved, the process was never restarted
    (R, None, "failed", False, False, 0, {}, "switch"),
    (R, R, "failed", False, False, 0, BAKED, "switch"),  # the unit died: start it again behind the gate
    (R, R, "activating", False, False, 0, {}, "switch"),
    (OLD, OLD, "active", False, False, 0, BAKED, "switch"),  # the change being rolled out
    (OLD, OLD, "active", False, False, 600, BAKED, "switch"),
    (None, None, None, False, False, 0, {}, "switch"),  # a new host
]


@pytest.mark.parametrize("current, serving, unit, busy, rebuilt, bake_s, verdict, action", TABLE)
def test_the_step_does_what_the_host_needs(current, serving, unit, busy, rebuilt, bake_s, verdict, action):
    found = ReleaseHostState(current=current, serving=serving, active_state=unit, busy=busy, verdict=verdict,
                             previous=OLD if current == R else None)
    assert decide(found, R, rebuilt, bake_s) == action


def test_every_action_is_reached_by_the_table():
    # "update", a weights-only change loaded in place, has its own table in test_weights_plan
    assert {row[-1] for row in TABLE} | {"update"} == set(ACTIONS)
