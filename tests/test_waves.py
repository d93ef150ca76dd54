"""The wave plan: canary, wave1, wave2, ... by number, then leftovers; bad plans refused."""

import pytest

from sglfleet.errors import ConfigError
from sglfleet.waves import Wave, limit_waves, plan_waves

FLEET = {
    "node1": ["all", "dev", "canary"],
    "node2": ["all", "dev", "wave2"],
    "node3": ["all", "dev", "wave10"],
    "node4": ["all", "dev", "wave2"],
    "node5": ["all", "dev"],
}


def test_default_order_is_canary_then_waves_by_number_then_leftovers():
    assert plan_waves(FLEET) == [
        Wave("canary", ("node1",)),
        Wave("wave2", ("node2", "node4")),
        Wave("wave10", ("node3",)),
        Wave("leftover", ("node5",)),
    ]


def test_rollout_waves_sets_the_order():
    names = [wave.name for wave in plan_waves(FLEET, ["canary", "wave10", "wave2"])]
    assert names == ["canary", "wave10", "wave2", "leftover"]


def test_unknown_group_is_refused_naming_the_known_ones():
    with pytest.raises(ConfigError) as caught:
        plan_waves(FLEET, ["canary", "wave3"])
    assert caught.value.problems == [
        "rollout_waves: 'wave3' is not a group of this inventory (groups: canary, dev, wave10, wave2); "
        "fix the name or define the group"]


def test_host_in_two_waves_is_refused():
    fleet = {**FLEET, "node2": ["all", "wave2", "wave10"]}
    with pytest.raises(ConfigError) as caught:
        plan_waves(fleet)
    assert caught.value.problems == ["node2: in waves wave2 and wave10; put the host in one wave group only"]


def test_limit_keeps_order_and_drops_empty_waves():
    assert limit_waves(plan_waves(FLEET), ["node4", "node5"]) == [
        Wave("wave2", ("node4",)), Wave("leftover", ("node5",))]
