"""The wave plan: canary, wave1, wave2, ... by number, then leftovers; bad plans refused."""

import pytest

from sglfleet.errors import ConfigError
from sglfleet.plan.waves import Wave, batch_sizes, limit_waves, plan_batches, plan_waves, until

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


def test_serial_sizes_are_numbers_or_percentages_and_the_last_repeats():
    assert batch_sizes([1, "25%", "100%"], 24) == [1, 6, 24]
    assert batch_sizes([1, "10%", "50%"], 100) == [1, 10, 50]
    assert batch_sizes(["1%"], 12) == [1]  # never an empty batch
    assert batch_sizes(None, 7) == [7]


def test_batches_follow_serial_across_waves_and_never_cross_a_wave():
    waves = [Wave("canary", ("n1",)), Wave("wave1", tuple(f"n{i}" for i in range(2, 8))),
             Wave("wave2", tuple(f"n{i}" for i in range(8, 13)))]
    batches = plan_batches(waves, [1, "25%", "100%"])  # 12 hosts: 1, 3, then 12 at a time
    assert [(b.wave, b.number, b.hosts) for b in batches] == [
        ("canary", 1, ("n1",)),
        ("wave1", 2, ("n2", "n3", "n4")),
        ("wave1", 3, ("n5", "n6", "n7")),   # cut at the end of wave1
        ("wave2", 4, ("n8", "n9", "n10", "n11", "n12")),
    ]
    # Without serial, each wave switches whole, as before.
    assert [b.hosts for b in plan_batches(waves, None)] == [wave.hosts for wave in waves]


def test_a_pause_holds_batches_back_but_sizes_them_as_the_whole_rollout(tmp_path):
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory_from_files
    from sglfleet.plan.validation import plan_inventory

    # 8 targeted hosts, serial 25 %: batches of 2, whether paused after wave1 or not.
    path = tmp_path / "paused_inventory.py"
    path.write_text(
        "D = {'stack': 'dev', 'model_path': 'moonshotai/Kimi-K2.5', "
        "'speculative_draft_model_path': 'lightseekorg/kimi-k2.5-eagle3', 'allow_unpinned_models': True, "
        "'rollout_serial': [1, '25%'], 'rollout_until': 'wave1'}\n"
        "canary = [('n1', D)]\nwave1 = [(f'n{i}', D) for i in range(2, 6)]\n"
        "wave2 = [(f'n{i}', D) for i in range(6, 9)]\n")
    with ctx_state.use(State()):
        inventory = make_inventory_from_files(str(path))
    rollout = plan_inventory(inventory, targets=[f"n{i}" for i in range(1, 9)]).rollout
    assert [(b.wave, b.hosts) for b in rollout.batches] == [
        ("canary", ("n1",)), ("wave1", ("n2", "n3")), ("wave1", ("n4", "n5"))]
    assert [wave.name for wave in rollout.held] == ["wave2"]


def test_rollout_until_stops_after_the_named_wave():
    waves = [Wave("canary", ("n1",)), Wave("wave1", ("n2",)), Wave("wave2", ("n3",))]
    assert [w.name for w in until(waves, "wave1")] == ["canary", "wave1"]
    assert until(waves, None) == waves
    with pytest.raises(ConfigError) as caught:
        until(waves, "wave3")
    assert caught.value.problems == ["rollout_until: 'wave3' is not a wave of this rollout "
                                     "(waves: canary, wave1, wave2); name one of them"]
