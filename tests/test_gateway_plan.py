"""
The gateway's plan, without a host: gateways in no wave, their workers and
launch flags, the problems refused before any connection, the gateway's part
of the one read run for real in a shell, and the unit against smg's own parser.
The gateway on the local fleet is in test_gateway.
"""

import json
import shlex
import subprocess
import sys
import zipfile

from sglfleet.artifacts import wheelhouse
from sglfleet.artifacts.stacks import load_stack
from sglfleet.facts.gateway import GatewayService
from sglfleet.facts.host import HostRead
from sglfleet.host.layout import GATEWAY
from sglfleet.plan.gateway import gateway_args, gateway_problems, serving_groups, worker_url
from sglfleet.plan.schema import validate_host_data
from sglfleet.plan.templates import render_gateway_unit
from sglfleet.plan.waves import Wave, plan_waves

BASE = {"stack": "dev", "model_path": "m", "listen_host": "0.0.0.0"}
GROUPS = {"node1": ["all", "canary"], "node2": ["all", "wave1"], "node3": ["all"], "gw1": ["all", "gateways"]}
DATA = {name: {"ssh_hostname": f"10.0.0.{number}"} for number, name in enumerate(GROUPS, 1)}


def configs(**data):
    return {name: validate_host_data(name, {**BASE, **data}) for name in GROUPS}


def test_a_gateway_is_in_no_wave_not_even_the_leftover_one():
    assert plan_waves(serving_groups(GROUPS)) == [
        Wave("canary", ("node1",)), Wave("wave1", ("node2",)), Wave("leftover", ("node3",))]


def test_the_gateway_is_launched_with_the_inventory_settings_and_every_worker():
    config = validate_host_data("gw1", {**BASE, "gateway_policy": "round_robin", "gateway_health_check_interval_s": 2})
    workers = [worker_url(name, DATA[name], 30000) for name in ("node1", "node2", "node3")]
    assert gateway_args(config, workers) == [
        "--host", "0.0.0.0", "--port", "30080", "--policy", "round_robin",
        "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000",
        "--health-check-interval-secs", "2", "--health-check-timeout-secs", "5",
        "--health-failure-threshold", "3", "--health-success-threshold", "2",
        "--health-check-endpoint", "/health", "--log-level", "warn",
        "--worker-urls", "http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000",
    ]


def test_a_valid_fleet_with_a_gateway_has_no_problem():
    assert gateway_problems(GROUPS, DATA, configs(), ["canary", "wave1"]) == []


def test_no_gateway_no_problem_even_on_loopback():
    groups = {name: groups for name, groups in GROUPS.items() if name != "gw1"}
    assert gateway_problems(groups, DATA, configs(listen_host="127.0.0.1"), ["canary", "wave1"]) == []


def test_each_gateway_problem_is_one_line_that_names_the_fix():
    groups = {**GROUPS, "gw1": ["all", "gateways", "wave1"]}
    found = gateway_problems(groups, DATA, configs(listen_host="127.0.0.1", gateway_metrics_port=30080),
                             ["canary", "wave1", "gateways"])
    assert found == [
        "rollout_waves: 'gateways' is the gateways' group, not a wave; take it out of rollout_waves",
        "gw1: in group gateways and in wave wave1; a gateway serves no release: take it out of wave1",
        *(f"{name}: listen_host = '127.0.0.1': the gateways (gw1) cannot reach it; leave listen_host unset "
          "(None: the host's fleet address) or set the address they reach" for name in ("node1", "node2", "node3")),
        "10.0.0.4:30080: port collision between gw1's gateway_port and gw1's gateway_metrics_port; "
        "give each its own port",
    ]


def test_gateways_without_workers_and_a_gateway_on_a_workers_port():
    assert gateway_problems({"gw1": ["gateways"]}, {"gw1": {}}, {"gw1": configs()["gw1"]}, []) == [
        "gw1: gateways without workers: every host is in group gateways; add serving hosts to the inventory"]
    same_machine = {**DATA, "gw1": {"ssh_hostname": "10.0.0.1"}}
    assert gateway_problems(GROUPS, same_machine, configs(gateway_port=30000), []) == [
        "10.0.0.1:30000: port collision between gw1's gateway_port and node1's listen_port; give each its own port"]


def run(command: str) -> list[str]:
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_gateway_host_reads_its_stack_files_and_gateway_and_nothing_of_sglang():
    command = HostRead().command(stack_id="gateway-smg-1.13.0-0123456789ab", python="3.11", uv_version="0.13.9",
                                 user="nobody", paths=[GATEWAY.unit_file, GATEWAY.env_file], patch_path=None,
                                 patch_known=[], release_id=None, gateway_unit=GATEWAY.unit,
                                 gateway_runtime_dir="/nonexistent/run")
    assert "nvidia-smi" not in command and "sglfleet-read patch" not in command
    found = HostRead().process(run(command))
    # No such unit here (nor systemd, on some controllers): not active, and no configuration.
    assert found.gateway["active"] in ("inactive", "unknown") and found.gateway["config"] is None
    assert found.files["files"] == {GATEWAY.unit_file: None, GATEWAY.env_file: None}
    assert found.release is None and found.patch is None and found.gpus == []


def test_the_running_gateways_configuration_is_what_its_runtime_directory_says(tmp_path):
    (tmp_path / "config").write_text("9c41d0e2a7b35f18\n")
    command = GatewayService().command(GATEWAY.unit, str(tmp_path))
    assert GatewayService().process(run(command))["config"] == "9c41d0e2a7b35f18"
    assert GatewayService().process(["active=active"]) == {"active": "active", "config": None}


def test_the_units_command_line_is_what_smg_parses(tmp_path):
    """The rendered ExecStart, parsed by smg 1.13.0's own parser: the stack's wheels from the wheelhouse, unpacked."""
    for local in wheelhouse.ensure(load_stack("gateway-smg-1.13.0")).values():
        if local.path.name.endswith(".whl") and not local.path.name.startswith("uv-"):
            zipfile.ZipFile(local.path).extractall(tmp_path)
    config = validate_host_data("gw1", {**BASE, "gateway_policy": "least_load"})
    unit = render_gateway_unit(config, gateway_args(config, ["http://10.0.0.1:30000"]), "/venv/bin/python", "d1")
    exec_start = unit.split("ExecStart=", 1)[1].split("\nRestart=", 1)[0].replace("\\\n", " ")
    assert "SGLANG_API_KEY" not in exec_start and "--api-key" not in exec_start
    argv = shlex.split(exec_start)[2:]
    parsed = subprocess.run(
        [sys.executable, "-c", "import json, sys; from smg.launch_router import parse_router_args; "
         "a = parse_router_args(sys.argv[1:]); print(json.dumps([a.port, a.policy, a.worker_urls, "
         "a.health_check_interval_secs, a.api_key]))", *argv],
        env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert parsed.returncode == 0, parsed.stderr
    assert json.loads(parsed.stdout) == [30080, "least_load", ["http://10.0.0.1:30000"], 60, None]


def test_the_tls_flags_are_what_smg_parses_into_its_tls_settings(tmp_path):
    """smg 1.13.0's own parser: --tls-cert-path/--tls-key-path to server_cert_path/server_key_path
    (router_args.py:2443-2447), --ca-cert-paths to ca_cert_paths; https workers as given (docs/tls.md)."""
    from sglfleet.artifacts.tls import FleetCA
    from sglfleet.plan.tls import HostTls, gateway_tls_args

    for local in wheelhouse.ensure(load_stack("gateway-smg-1.13.0")).values():
        if local.path.name.endswith(".whl") and not local.path.name.startswith("uv-"):
            zipfile.ZipFile(local.path).extractall(tmp_path)
    ca = FleetCA(tmp_path / "ca")
    ca.ensure()
    tls = HostTls(pair=ca.issue("gw1", ["10.0.0.4"]), ca=ca.cert)
    config = validate_host_data("gw1", BASE)
    unit = render_gateway_unit(config, gateway_args(config, ["https://10.0.0.1:30000"], gateway_tls_args(tls, GATEWAY)),
                               "/venv/bin/python", "d1", credentials=tls.credentials(GATEWAY))
    exec_start = unit.split("ExecStart=", 1)[1].split("\nRestart=", 1)[0].replace("\\\n", " ")
    assert "PRIVATE" not in unit and "BEGIN" not in unit
    parsed = subprocess.run(
        [sys.executable, "-c", "import json, sys; from smg.launch_router import parse_router_args; "
         "a = parse_router_args(sys.argv[1:]); print(json.dumps([a.server_cert_path, a.server_key_path, "
         "a.ca_cert_paths, a.worker_urls]))", *shlex.split(exec_start)[2:]],
        env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert parsed.returncode == 0, parsed.stderr
    folder = "/run/credentials/sglang-gateway.service"
    assert json.loads(parsed.stdout) == [f"{folder}/tls.crt", f"{folder}/tls.key", [f"{folder}/ca.crt"],
                                         ["https://10.0.0.1:30000"]]
    assert [line for line in unit.splitlines() if line.startswith("LoadCredential=")] == [
        f"LoadCredential=tls.crt:{GATEWAY.tls_cert}", f"LoadCredential=tls.key:{GATEWAY.tls_key}",
        f"LoadCredential=ca.crt:{GATEWAY.tls_ca}"]


def test_the_unit_holds_its_port_in_the_firewall_while_it_restarts_and_only_with_one():
    """The unit's own steps fill the policy's sets (test_network_plan tries them with nft): none without a firewall."""
    config = validate_host_data("gw1", {**BASE, "gateway_start_timeout_s": 90, "service_restart_s": 5})
    unit = render_gateway_unit(config, gateway_args(config, ["http://10.0.0.1:30000"]), "/venv/bin/python", "d1")
    steps = [line for line in unit.splitlines() if line.startswith(("ExecStop", "ExecStartPost"))]
    assert steps == [
        "ExecStop=-+/usr/sbin/nft add element inet sglfleet gateway_stopping { 30080 timeout 200s }",
        "ExecStopPost=-+/usr/sbin/nft add element inet sglfleet gateway_starting { 30080 timeout 95s }",
        "ExecStopPost=-+/usr/sbin/nft delete element inet sglfleet gateway_stopping { 30080 }",
        "ExecStartPost=-+/usr/sbin/nft delete element inet sglfleet gateway_starting { 30080 }",
    ]
    bare = validate_host_data("gw1", {**BASE, "firewall": False})
    assert "nft" not in render_gateway_unit(bare, gateway_args(bare, ["http://10.0.0.1:30000"]), "/venv/bin/python", "d1")
