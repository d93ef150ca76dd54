"""
Several services on one host, as planned: the schema's checks, each service's
layout, unit and release, the one host read of every service, the gateway's
workers, the stand-in's view of CUDA_VISIBLE_DEVICES. Pure: no host.

A host without ``services`` is the one ``sglang`` service at today's paths, with
today's release id: existing hosts need no migration and restart nothing.
"""

import importlib.util
import json

import pytest

from sglfleet import FILES
from sglfleet.errors import ConfigError
from paths import LAYOUT, Layout, service
from sglfleet.facts.host import HostRead
from sglfleet.plan.gateway import gateway_problems
from sglfleet.plan.release import render_release
from sglfleet.plan.schema import validate_host_data
from sglfleet.plan.services import PP_FLAGS, flag_size, gpu_problems, host_services, parse_services
from sglfleet.plan.templates import render_unit

BASE = {"stack": "dev", "server": "standin", "gpu_less": True, "model_path": "moonshotai/Kimi-K2.5",
        "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3", "trust_remote_code": True,
        "allow_unpinned_models": True}
TWO = [{"name": "big", "gpus": [0, 1, 2, 3], "port": 30000, "tp_size": 4},
       {"name": "small", "gpus": [4, 5], "port": 30001, "tp_size": 2, "model_path": "org/small",
        "speculative_algorithm": None, "speculative_draft_model_path": None}]


def config(**data):
    return validate_host_data("node1", {**BASE, **data})


def problems(**data) -> list[str]:
    with pytest.raises(ConfigError) as error:
        config(**data)
    return error.value.problems


def test_a_host_without_services_is_the_one_sglang_service_at_todays_paths():
    (one,) = host_services(config())
    assert one.name == "sglang" and one.layout is LAYOUT and one.gpus is None
    assert (one.unit, one.layout.current, one.layout.env_file, one.layout.lock) == (
        "sglang.service", "/opt/sglfleet/current", "/etc/sglfleet/sglang.env", "/opt/sglfleet/.lock")
    assert LAYOUT.for_service("sglang") is LAYOUT  # a list of services may keep today's service by its name


def test_each_service_has_its_own_unit_user_env_file_and_releases_and_shares_stacks_and_models():
    big, small = host_services(config(services=TWO))
    assert (big.unit, small.unit) == ("sglang-big.service", "sglang-small.service")
    assert small.layout.current == "/opt/sglfleet/services/small/current"
    assert small.layout.releases == "/opt/sglfleet/services/small/releases"
    assert small.layout.lock == "/opt/sglfleet/services/small/.lock"
    assert (small.layout.env_file, small.layout.service_user) == ("/etc/sglfleet/sglang-small.env", "sglang-small")
    assert small.layout.runtime_dir != big.layout.runtime_dir
    # One copy on the host however many services use them.
    assert small.layout.venv("s") == big.layout.venv("s") == LAYOUT.venv("s")
    assert small.layout.model("o/n", "r") == LAYOUT.model("o/n", "r")
    assert small.layout.tool == LAYOUT.tool and small.layout.wheelhouse == LAYOUT.wheelhouse


def test_each_service_takes_the_hosts_launch_keys_and_its_own_on_top():
    big, small = host_services(config(services=TWO, mem_fraction_static=0.8))
    assert (big.port, big.config.launch.tp_size, big.config.launch.model_path) == (30000, 4, "moonshotai/Kimi-K2.5")
    assert (small.port, small.config.launch.tp_size, small.config.launch.model_path) == (30001, 2, "org/small")
    assert big.config.launch.mem_fraction_static == small.config.launch.mem_fraction_static == 0.8
    assert small.gpus == (4, 5)


def test_a_host_without_services_renders_the_release_and_unit_it_always_had():
    plain = config()
    before = render_release(plain, "dev-1", "p", service_digest="d")
    # The same host, its one service given the layout and no GPUs explicitly: nothing differs.
    assert render_release(plain, "dev-1", "p", service_digest="d", layout=Layout()).release_id == before.release_id
    assert "CUDA_VISIBLE_DEVICES" not in before.launch_script
    assert f"ExecStart={LAYOUT.current}/launch" in render_unit(plain)


def test_a_service_sees_its_own_gpus_and_runs_its_own_current():
    big, small = host_services(config(services=TWO))
    release = render_release(small.config, "dev-1", "p", layout=small.layout, gpus=small.gpus)
    assert "export CUDA_VISIBLE_DEVICES=4,5" in release.launch_script
    assert json.loads(release.release_json)["gpus"] == [4, 5]
    assert "--port 30001\n" in release.args_text and "--tp-size 2\n" in release.args_text
    unit = render_unit(small.config, layout=small.layout)
    assert f"ExecStart={small.layout.current}/launch" in unit
    assert f"User={small.layout.service_user}" in unit and f"EnvironmentFile={small.layout.env_file}" in unit
    other = render_release(big.config, "dev-1", "p", layout=big.layout, gpus=big.gpus)
    assert other.release_id != release.release_id


@pytest.mark.parametrize("services, fragments", [
    ([{"name": "a", "gpus": [0, 1], "port": 30001, "tp_size": 2}, {"name": "b", "gpus": [1], "port": 30002}],
     ["services[1] (b): GPU 1 is already services[0] (a)'s"]),
    ([{"name": "a", "gpus": [0], "port": 30001}, {"name": "b", "gpus": [1], "port": 30001}],
     ["services[1] (b): port 30001 is already services[0] (a)'s"]),
    ([{"name": "a", "gpus": [0], "port": 30001}, {"name": "a", "gpus": [1], "port": 30002}],
     ["services[1] (a): the name 'a' is already services[0] (a)'s"]),
    ([{"name": "a", "gpus": [0, 1], "port": 30001, "tp_size": 4}], ["tp_size 4 needs 4 GPUs", "holds 2"]),
    ([{"name": "a", "gpus": [0, 1], "port": 30001, "tp_size": 2, "extra_flags": ["--dp-size=2"]}],
     ["tp_size 2 times dp_size 2 needs 4 GPUs"]),
    ([{"name": "a", "gpus": [0, 1], "port": 30001, "tp_size": 2, "extra_flags": ["--pp-size", "2"]}],
     ["tp_size 2 times pp_size 2 needs 4 GPUs"]),
    ([{"name": "a", "gpus": [], "port": 30001}], ["gpus = []: must be a non-empty list"]),
    ([{"name": "a", "gpus": [0, 0], "port": 30001}], ["names a GPU twice"]),
    ([{"name": "Big", "gpus": [0], "port": 30001}], ["name = 'Big': must be lower case"]),
    ([{"name": "gateway", "gpus": [0], "port": 30001}], ["name = 'gateway'"]),
    ([{"name": "a", "gpus": [0], "port": 30001, "listen_port": 1}], ["listen_port: a service's port is its 'port'"]),
    ([{"name": "a", "gpus": [0], "port": 30001, "tp_sise": 1}], ["tp_sise: not a service key; did you mean 'tp_size'?"]),
    ([{"name": "a", "gpus": [0], "port": 30001, "tp_size": 0}], ["services[0] (a): tp_size = 0"]),
    ([{"name": "a", "gpus": [0]}], ["services[0] (a): port: missing"]),
    ([{"name": "a", "gpus": [0], "port": 30001, "model_revision": "main"}], ["model_revision = 'main'"]),
    ([], ["services = []: must be a non-empty list"]),
    ([{"name": "a", "gpus": [0], "port": 30089}], ["share_port: port 30089 is already services[0] (a)'s"]),
])
def test_bad_services_get_one_precise_message_each(services, fragments):
    (line,) = problems(services=services)
    assert line.startswith("node1: ")
    for fragment in fragments:
        assert fragment in line


def test_the_gpus_a_service_needs_are_the_ones_sglang_places_its_schedulers_on():
    # tp x pp, times dp; with dp attention the dp ranks share the tensor-parallel GPUs.
    fits = [{"name": "pp", "gpus": [0, 1, 2, 3], "port": 30001, "tp_size": 2, "extra_flags": ["--pp-size", "2"]},
            {"name": "dpa", "gpus": [4, 5], "port": 30002, "tp_size": 2,
             "extra_flags": ["--dp-size", "2", "--enable-dp-attention"]},
            {"name": "dp", "gpus": [6, 7], "port": 30003, "tp_size": 1, "extra_flags": ["--dp=2"]}]
    assert [service.gpus for service in host_services(config(gpu_count=8, services=fits))] == [
        (0, 1, 2, 3), (4, 5), (6, 7)]


def test_a_service_gpu_beyond_gpu_count_is_refused_before_any_connection():
    (line,) = problems(gpu_count=4, services=[{"name": "a", "gpus": [3, 4], "port": 30001, "tp_size": 2}])
    assert "GPU 4 does not exist on a host of gpu_count 4" in line


def test_each_problem_of_a_list_is_its_own_line():
    found, _ = parse_services("node1", [{"name": "a", "gpus": [0], "port": 30001},
                                        {"name": "b", "gpus": [0], "port": 30001}], {**config().launch.model_dump()})
    assert len(found) == 2 and "GPU 0" in found[0] and "port 30001" in found[1]


def test_preflight_checks_services_gpus_against_the_gpu_fact():
    services = host_services(config(services=TWO))
    assert gpu_problems("node1", services, 8) == []
    (line,) = gpu_problems("node1", services, 5)
    assert line == ("node1: service small: GPU 5 does not exist (nvidia-smi reports 5 GPUs, indices 0 to 4): "
                    "fix its gpus")


def test_dp_and_pp_sizes_are_read_from_extra_flags_as_sglang_parses_them():
    assert flag_size([]) == 1
    assert flag_size(["--dp-size", "2"]) == flag_size(["--dp=2"]) == flag_size(["--data-parallel-size", "2"]) == 2
    assert flag_size(["--pp-size", "2"], PP_FLAGS) == flag_size(["--pipeline-parallel-size=2"], PP_FLAGS) == 2


def test_the_host_read_reads_every_services_releases_in_its_one_command():
    command = HostRead().command(stack_id="s", python="3.11", uv_version="0.9", user="sglang", paths=[],
                                 patch_path=None, patch_known=[], release_id="r0",
                                 service_releases={"big": "r1", "small": "r2"})
    big, small = service("big"), service("small")
    assert big.release("r1") in command and small.unit in command
    assert LAYOUT.release("r0") not in command  # no release at the host's root
    marks = ["#sglfleet-read os", "#sglfleet-read release:big", "ActiveState=active", "current=/x/r1",
             "#sglfleet-read release:small", "ActiveState=failed",
             "#sglfleet-read user:big", f"sglang-big:x:998:998::{big.state_dir}:/usr/sbin/nologin",
             "#sglfleet-read end"]
    found = HostRead().process(marks)
    assert found.services["big"].current == "r1" and found.services["small"].active_state == "failed"
    assert found.users["big"]["home"] == big.state_dir and found.users.get("small") is None
    plain = HostRead().process(["#sglfleet-read release", "current=/x/r0", "#sglfleet-read end"])
    assert plain.services == {"sglang": plain.release} and plain.release.current == "r0"


def test_each_service_is_its_own_gateway_worker_and_must_be_reachable():
    worker = config(services=[{**TWO[0], "listen_host": "0.0.0.0"}, {**TWO[1], "listen_host": "127.0.0.1"}])
    gateway = validate_host_data("gw", {**BASE})
    found = gateway_problems({"node1": ["canary"], "gw": ["gateways"]}, {"node1": {}, "gw": {}},
                             {"node1": worker, "gw": gateway}, ["canary"])
    assert found == ["node1: service small's listen_host = '127.0.0.1': the gateways (gw) cannot reach it; "
                     "leave listen_host unset (None: the host's fleet address) or set the address they reach"]
    clash = config(services=[{**TWO[0], "listen_host": "0.0.0.0"},
                             {**TWO[1], "listen_host": "0.0.0.0", "port": 30080}])
    found = gateway_problems({"node1": ["canary"], "gw": ["gateways"]}, {"node1": {"ssh_hostname": "h"},
                             "gw": {"ssh_hostname": "h"}}, {"node1": clash, "gw": gateway}, ["canary"])
    assert any("port collision between gw's gateway_port and node1's service small's port" in line for line in found)


def _standin():
    spec = importlib.util.spec_from_file_location("sglang_standin_for_services", FILES / "standin" / "sglang_standin.py")
    module = importlib.util.module_from_spec(spec)
    import sys

    sys.path.insert(0, str(FILES / "standin"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(FILES / "standin"))
    return module


def test_the_standin_refuses_a_gpu_its_cuda_visible_devices_hide_as_torch_does():
    missing = _standin().missing_gpu
    assert missing({"tp_size": 2}, None) is None  # no GPUs named: the stand-in checks nothing
    assert missing({"tp_size": 2}, "4,5") is None
    assert missing({"tp_size": 4}, "4,5") == 2  # ranks take ordinals 0..3 of the two visible
    assert missing({"tp_size": 2, "dp_size": 2}, "0,1") == 2
    assert missing({"tp_size": 2, "dp_size": 2, "enable_dp_attention": True}, "0,1") is None
    assert missing({"tp_size": 1, "base_gpu_id": 1}, "3") == 1
    assert missing({"tp_size": 2, "pp_size": 2}, "0,1,2") == 3 and missing({"tp_size": 2, "pp_size": 2}, "0,1,2,3") is None


def test_the_gateways_route_to_each_service_of_a_host_as_its_own_worker():
    from pyinfra.api import Inventory

    from sglfleet.plan.validation import plan_inventory

    data = {**BASE, "listen_host": "0.0.0.0"}
    inventory = Inventory(([("node1", {**data, "ssh_hostname": "10.0.0.1", "services": TWO}),
                            ("node2", {**data, "ssh_hostname": "10.0.0.2"})], {}),
                          gateways=(["gw"], {}))
    assert [one.url for one in plan_inventory(inventory).workers] == ["http://10.0.0.1:30000", "http://10.0.0.1:30001",
                                                                     "http://10.0.0.2:30000"]
