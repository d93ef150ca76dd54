"""The inventory schema: defaults from group_data/all.py, --data coercion, one line per problem."""

import re
from dataclasses import FrozenInstanceError

import pytest
from pyinfra.api import State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory_from_files
from pyinfra_cli.util import parse_cli_arg

from sglfleet.errors import ConfigError
from sglfleet.plan.fleet import FleetConfig
from sglfleet.plan.schema import DEFAULTS_FILE, defaults, validate_host_data
from sglfleet.plan.settings import LAUNCH_KEYS, SCHEMA_KEYS, LaunchSettings
from sglfleet.plan.validation import validate_inventory

BASE = {"stack": "dev", "model_path": "moonshotai/Kimi-K2.5",
        "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3"}


def problems(data, name="node1"):
    with pytest.raises(ConfigError) as caught:
        validate_host_data(name, {**BASE, **data})
    return caught.value.problems


def test_defaults_live_in_group_data_all_with_a_comment_each():
    # Every schema key has its default in all.py except what each inventory must say.
    assert set(defaults()) == set(SCHEMA_KEYS) - {"stack", "model_path"}
    for line in DEFAULTS_FILE.read_text().splitlines():
        if re.match(r"^[a-z_]+ = ", line):
            assert "#" in line, f"default without its one-line comment: {line}"


def test_defaults_apply_under_the_hosts_data():
    config = validate_host_data("node1", BASE)
    assert config.launch.listen_port == 30000 and config.gate_warmup_s == 1800 and config.launch.speculative_algorithm == "EAGLE3"
    assert config.allow_unhashed_lock is False


def test_data_overrides_are_coerced_as_pyinfra_parses_them():
    raw = {"tp_size": "8", "mem_fraction_static": "0.85", "enable_metrics": "false",
           "rollout_waves": "canary,wave1", "extra_flags": "--max-running-requests 64",
           "gpu_compute_cap": "12.0", "speculative_num_steps": "null"}
    config = validate_host_data("node1", {**BASE, **{k: parse_cli_arg(v) for k, v in raw.items()}})
    assert config.launch.tp_size == 8 and config.launch.mem_fraction_static == 0.85
    assert config.launch.enable_metrics is False and config.launch.speculative_num_steps is None
    assert config.rollout_waves == ["canary", "wave1"]
    assert config.launch.extra_flags == ["--max-running-requests", "64"]
    assert config.gpu_compute_cap == "12.0"
    # From the Python API, plain strings coerce the same way.
    assert validate_host_data("node1", {**BASE, "tp_size": "8", "trust_remote_code": "yes"}).launch.tp_size == 8


def test_a_bool_is_not_a_number():
    assert problems({"tp_size": True}) == [
        "node1: tp_size = True: Input should be a valid integer; set it to a whole number >= 1, e.g. 8"]


def test_launch_settings_are_a_typed_sub_model_and_the_launch_keys_come_from_it():
    config = validate_host_data("node1", {**BASE, "tp_size": "8", "listen_host": "0.0.0.0"})
    assert isinstance(config.launch, LaunchSettings)
    assert (config.launch.tp_size, config.launch.listen_host) == (8, "0.0.0.0")
    assert LAUNCH_KEYS == tuple(key for key in LaunchSettings.model_fields if key != "extra_flags")
    assert (LaunchSettings.flag("listen_host"), LaunchSettings.flag("listen_port"),
            LaunchSettings.flag("tp_size"), LaunchSettings.flag("extra_flags")) == ("--host", "--port", "--tp-size", None)


def test_the_old_host_and_port_keys_point_to_their_new_names():
    assert problems({"host": "0.0.0.0", "port": 30001}) == [
        "node1: host: unknown key; did you mean 'listen_host'?",
        "node1: port: unknown key; did you mean 'listen_port'?"]


def test_misspelt_key_gets_a_suggestion_and_pyinfra_keys_pass():
    assert problems({"tp_sise": 8, "ssh_user": "root", "_sudo": True}) == [
        "node1: tp_sise: unknown key; did you mean 'tp_size'?"]


def test_every_problem_at_once_one_line_each_naming_host_key_fix():
    lines = problems({"tp_size": "eight", "listen_port": 0, "mem_fraction_static": 1.5, "model_path": None})
    assert len(lines) == 4
    for line, key in zip(sorted(lines), ["listen_port", "mem_fraction_static", "model_path", "tp_size"]):
        assert line.startswith(f"node1: {key}") and "set it to" in line


@pytest.mark.parametrize("data", [
    {"hf_token": "hf_abcdefghijklmnopqrstuvwxyz123456"},
    {"SGLANG_API_KEY": "abc"},
    {"db_password": "abc"},
    {"served_model_name": "hf_abcdefghijklmnopqrstuvwxyz123456"},
    {"extra_flags": ["--api-key", "abc"]},
])
def test_secrets_in_inventory_are_refused_without_echoing_them(data):
    (line,) = problems(data)
    assert "SGLFLEET_HF_TOKEN / SGLFLEET_API_KEY" in line
    assert "hf_abc" not in line and "'abc'" not in line


def test_control_characters_cannot_reach_the_unit_or_script():
    (line,) = problems({"model_path": "m\nExecStartPre=/bin/sh"})
    assert line.startswith("node1: model_path = ") and "wrong form" in line


def test_unknown_stack_suggests_the_close_one():
    (line,) = problems({"stack": "cu130-sglang-0.5.8"})
    assert "did you mean 'cu130-sglang-0.5.9'?" in line and "files/stacks/cu130-sglang-0.5.8.toml" in line


def load(tmp_path, text, name="inventory.py"):
    path = tmp_path / name  # pyinfra caches compiled inventory code by file name
    path.write_text(text)
    with ctx_state.use(State()):
        return make_inventory_from_files(str(path))


def test_validate_inventory_collapses_a_group_mistake_into_one_line(tmp_path):
    inventory = load(tmp_path, f"""
_d = {BASE!r}
canary = [("node1", dict(_d, tp_size=0))]
wave1 = [("node2", dict(_d, tp_size=0))]
wave2 = [("node3", _d)]
""")
    with pytest.raises(ConfigError) as caught:
        validate_inventory(inventory)
    assert caught.value.problems == [
        "node1, node2: tp_size = 0: Input should be greater than or equal to 1; set it to a whole number >= 1, e.g. 8"]


def test_validate_inventory_checks_waves_and_returns_configs(tmp_path):
    text = f"""
_d = {BASE!r}
canary = [("node1", _d)]
wave1 = [("node2", _d)]
"""
    assert set(validate_inventory(load(tmp_path, text))) == {"node1", "node2"}
    text = text.replace("[(\"node1\", _d)]", "[(\"node1\", dict(_d, rollout_waves=['wave1']))]")
    inventory = load(tmp_path, text, "disagreeing.py")
    with pytest.raises(ConfigError) as caught:
        validate_inventory(inventory)
    assert caught.value.problems[0].startswith("node2: rollout_waves = None differs from node1's ['wave1']")


def test_fleet_config_is_what_every_host_agrees_on_and_each_host_that_differs_is_one_line():
    hook = {"url": "https://hooks.example.internal/x/{token}", "reasons": ["RunFinished"]}
    agreed = {name: validate_host_data(name, {**BASE, "events_file": "~/events.jsonl", "notify_webhooks": [hook],
                                              "rollout_serial": [1, "50%"]}) for name in ("node1", "node2")}
    fleet = FleetConfig.agreed(agreed)
    assert fleet.events_file == "~/events.jsonl" and fleet.rollout_serial == (1, "50%")
    assert [entry.url for entry in fleet.notify_webhooks] == [hook["url"]]
    with pytest.raises(FrozenInstanceError):
        fleet.events_file = "elsewhere"  # one value for the whole run
    differing = {**agreed, "node3": validate_host_data("node3", {**BASE, "rollout_serial": [1, "50%"]})}
    with pytest.raises(ConfigError) as caught:
        FleetConfig.agreed(differing)
    assert caught.value.problems == [
        "node3: events_file = None differs from node1's '~/events.jsonl'; "
        "set it once for the fleet (group_data/all.py, the inventory's all group, or --data)",
        f"node3: notify_webhooks = [] differs from node1's {agreed['node1'].notify_webhooks!r}; "
        "set it once for the fleet (group_data/all.py, the inventory's all group, or --data)"]
