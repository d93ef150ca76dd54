"""
Prefill and decode on separate hosts, planned without a host: what a PD fleet must hold (one line a
problem), each worker's role at the gateway, and smg's own parser reading the PD command line.
The stand-in's roles behind a real smg are in test_standin_pd; the local fleet in test_pd_fleet.
"""

import json
import shlex
import subprocess
import sys
import zipfile

import pytest

from sglfleet.artifacts import wheelhouse
from sglfleet.artifacts.stacks import load_stack
from sglfleet.plan.gateway import gateway_args
from sglfleet.plan.pd import Worker, fingerprint, kv_shape, pairing_generation, pd_problems, worker_of
from sglfleet.plan.release import launch_args
from sglfleet.plan.schema import validate_host_data
from sglfleet.plan.templates import render_gateway_unit

BASE = {"stack": "dev", "server": "standin", "gpu_less": True, "model_path": "m", "listen_host": "0.0.0.0"}
GROUPS = {"node1": ["canary"], "node2": ["wave1"], "node3": ["wave2"], "gw1": ["gateways"]}
ROLES = {"node1": "prefill", "node2": "decode", "node3": "prefill"}


def configs(own=None, **data):
    """Every host's config: node1 and node3 prefills, node2 a decode, gw1 the gateway; ``own`` per host."""
    own = own or {}
    return {name: validate_host_data(name, {**BASE, **data, "disaggregation_mode": ROLES.get(name),
                                            **own.get(name, {})}) for name in GROUPS}


def test_a_fleet_without_roles_has_no_pd_problem():
    plain = {name: validate_host_data(name, BASE) for name in GROUPS}
    assert pd_problems(GROUPS, plain, ["gw1"]) == []


def test_a_valid_pd_fleet_has_no_problem():
    assert pd_problems(GROUPS, configs(), ["gw1"]) == []


@pytest.mark.parametrize("own, fragment", [
    ({"node2": {"disaggregation_mode": "prefill"}}, "a PD fleet needs a decode behind its gateway"),
    ({"node2": {"disaggregation_mode": None}}, "node2: a whole server in a PD fleet"),
    ({"node2": {"extra_flags": ["--page-size", "16"]}}, "node2: page_size = '16', but the prefill node1 has '1'"),
    ({"node2": {"extra_flags": ["--kv-cache-dtype", "fp8_e4m3"]}}, "node2: kv_cache_dtype = 'fp8_e4m3'"),
    ({"node3": {"stack": "dev-sglang-0.5.23"}}, "node3: stack = 'dev-sglang-0.5.23', but the prefill node1 has 'dev'"),
    ({"node2": {"disaggregation_transfer_backend": "nixl"}}, "node2: transfer_backend = 'nixl'"),
    ({"node1": {"tp_size": 2}, "node2": {"tp_size": 3}}, "node2: tp_size = 3 and the prefill node1's 2"),
    ({"node2": {"tp_size": 2}}, "node1: its decodes run tp_size 2 and it 1: pass [\"--disaggregation-decode-tp\""),
])
def test_each_pd_problem_is_one_line_that_names_the_fix(own, fragment):
    problems = pd_problems(GROUPS, configs(own), ["gw1"])
    assert any(fragment in line for line in problems), problems


def test_without_a_gateway_roles_are_refused():
    groups = {name: groups for name, groups in GROUPS.items() if name != "gw1"}
    assert any("disaggregation_mode without a gateway" in line
               for line in pd_problems(groups, configs(), []))


def test_a_prefill_decode_tp_that_names_the_decodes_is_accepted():
    own = {"node2": {"tp_size": 2}, "node1": {"extra_flags": ["--disaggregation-decode-tp", "2"]},
           "node3": {"extra_flags": ["--disaggregation-decode-tp", "2"]}}
    assert pd_problems(GROUPS, configs(own), ["gw1"]) == []


def test_the_pd_flags_render_only_for_a_server_with_a_role():
    plain = launch_args(validate_host_data("n", BASE).launch)
    assert not any(arg.startswith("--disaggregation") for arg in plain)
    prefill = launch_args(configs()["node1"].launch)
    assert prefill[prefill.index("--disaggregation-mode") + 1] == "prefill"
    assert prefill[prefill.index("--disaggregation-transfer-backend") + 1] == "mooncake"
    assert prefill[prefill.index("--disaggregation-bootstrap-port") + 1] == "8998"
    assert "--disaggregation-ib-device" not in prefill


def test_a_prefills_bootstrap_port_is_a_port_of_its_host():
    from sglfleet.errors import ConfigError
    with pytest.raises(ConfigError, match="share_port: port 30089 is already disaggregation_bootstrap_port's"):
        validate_host_data("n", {**BASE, "disaggregation_mode": "prefill", "disaggregation_bootstrap_port": 30089})


def test_each_worker_joins_with_its_role_and_its_release_generation():
    all_configs = configs()
    prefill = worker_of("http://n1:30000", all_configs["node1"]).spec()
    decode = worker_of("http://n2:30000", all_configs["node2"]).spec()
    generation = prefill.pop("pairing_protocol")
    assert prefill == {"worker_type": "prefill", "bootstrap_port": 8998}
    assert decode == {"worker_type": "decode", "pairing_protocol": generation}  # one release: they pair
    assert worker_of("http://n3:30000", validate_host_data("n", BASE)).spec() == {}


def test_a_shared_flag_or_the_model_changes_the_generation_and_a_role_flag_does_not():
    node1 = configs()["node1"]
    generation = pairing_generation(node1)
    steps = node1.model_copy(update={"launch": node1.launch.model_copy(update={"speculative_num_steps": 4})})
    fraction = node1.model_copy(update={"launch": node1.launch.model_copy(update={"mem_fraction_static": 0.5})})
    assert pairing_generation(steps) != generation
    assert pairing_generation(node1.model_copy(update={"model_revision": "b" * 40})) != generation
    assert pairing_generation(fraction) == generation  # a server's own flag: the pair stays one release


def test_the_fingerprint_follows_the_kv_shape():
    node1, node3 = configs()["node1"], configs({"node3": {"extra_flags": ["--page-size", "16"]}})["node3"]
    assert fingerprint(kv_shape(node1)) == fingerprint(kv_shape(configs()["node2"]))
    assert fingerprint(kv_shape(node1)) != fingerprint(kv_shape(node3))


def test_the_gateway_runs_pd_mode_where_its_workers_have_roles():
    config = validate_host_data("gw1", BASE)
    workers = [Worker("http://10.0.0.1:30000", "prefill", 8998), Worker("http://10.0.0.2:30000", "decode")]
    args = gateway_args(config, workers)
    assert args[-6:] == ["--pd-disaggregation", "--prefill", "http://10.0.0.1:30000", "8998",
                         "--decode", "http://10.0.0.2:30000"]
    assert "--worker-urls" not in args


def test_the_pd_command_line_is_what_smg_parses(tmp_path):
    """The rendered ExecStart of a PD gateway, parsed by smg 1.13.0's own parser."""
    for local in wheelhouse.ensure(load_stack("gateway-smg-1.13.0")).values():
        if local.path.name.endswith(".whl") and not local.path.name.startswith("uv-"):
            zipfile.ZipFile(local.path).extractall(tmp_path)
    config = validate_host_data("gw1", BASE)
    workers = [Worker("http://10.0.0.1:30000", "prefill", 8998), Worker("http://10.0.0.3:30000", "prefill", 8999),
               Worker("http://10.0.0.2:30000", "decode")]
    unit = render_gateway_unit(config, gateway_args(config, workers), "/venv/bin/python", "d1")
    exec_start = unit.split("ExecStart=", 1)[1].split("\nRestart=", 1)[0].replace("\\\n", " ")
    argv = shlex.split(exec_start)[2:]
    parsed = subprocess.run(
        [sys.executable, "-c", "import json, sys; from smg.launch_router import parse_router_args; "
         "a = parse_router_args(sys.argv[1:]); print(json.dumps([a.pd_disaggregation, a.prefill_urls, "
         "a.decode_urls, a.worker_urls]))", *argv],
        env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert parsed.returncode == 0, parsed.stderr
    assert json.loads(parsed.stdout) == [True, [["http://10.0.0.1:30000", 8998], ["http://10.0.0.3:30000", 8999]],
                                         ["http://10.0.0.2:30000"], []]


def test_the_standins_role_flags_are_the_lints():
    from sglfleet import FILES
    import ast
    tree = ast.parse((FILES / "standin" / "standin_disagg.py").read_text())
    found = next(ast.literal_eval(node.value) for node in tree.body
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "ROLE_FLAGS")
    from sglfleet.plan.pd import ROLE_FLAGS
    assert found == ROLE_FLAGS


def test_a_decode_with_a_flag_its_prefills_lack_is_refused():
    problems = pd_problems(GROUPS, configs({"node2": {"extra_flags": ["--max-running-requests", "32"]}}), ["gw1"])
    assert any(line.startswith("node2: its launch flags differ from the prefill node1's") for line in problems), problems
    own = {"node2": {"mem_fraction_static": 0.5}}  # a server's own: fine
    assert pd_problems(GROUPS, configs(own), ["gw1"]) == []


def test_status_shows_each_workers_role():
    from sglfleet.commands.status import _gateway_lines

    row = {"host": "gw1", "gateway": "http://10.0.0.9:30080", "active_state": "active", "workers": [
        {"url": "http://10.0.0.1:30000", "healthy": True, "status": "ready", "load": 0, "role": "prefill"},
        {"url": "http://10.0.0.2:30000", "healthy": True, "status": "ready", "load": 1, "role": "decode"}]}
    assert [line[4] for line in _gateway_lines(row)] == ["http://10.0.0.1:30000 (prefill)",
                                                         "http://10.0.0.2:30000 (decode)"]
