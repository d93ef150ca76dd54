"""
Who may reach what, planned without a host: where each engine listens, and each host's nftables policy
as the inventory renders it. The policy applied on real hosts, and tried from outside, is in test_network_fleet.
"""

import ast
import os
import shutil
import subprocess
import sys

import pytest
from pyinfra.api import Inventory

from sglfleet.errors import ConfigError
from sglfleet.plan.network import EPHEMERAL, MOONCAKE
from sglfleet.plan.validation import plan_inventory

BASE = {"stack": "dev", "server": "standin", "gpu_less": True, "model_path": "moonshotai/Kimi-K2.5",
        "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3", "allow_unpinned_models": True}


def plan(hosts: dict, **groups):
    """Plan ``{name: data}`` hosts (addresses 10.0.0.N) with ``groups`` of names."""
    inventory = Inventory(([(name, {**BASE, "ssh_hostname": f"10.0.0.{number}", **data})
                            for number, (name, data) in enumerate(hosts.items(), 1)], {}),
                          **{group: (names, {}) for group, names in groups.items()})
    return plan_inventory(inventory)


def listens(fleet, name):
    return [service.config.launch.listen_host for service in fleet.hosts[name].services]


def rules(fleet, name):
    return [line.strip() for line in fleet.hosts[name].policy.text.splitlines() if "accept comment" in line]


def test_an_engine_listens_on_loopback_unless_something_outside_the_host_needs_it():
    lone = plan({"node1": {}}, canary=["node1"])
    assert listens(lone, "node1") == ["127.0.0.1"]  # sglang's own default: an existing release keeps its id
    behind = plan({"node1": {}, "node2": {}, "gw": {}}, canary=["node1"], wave1=["node2"], gateways=["gw"])
    assert listens(behind, "node1") == ["10.0.0.1"] and listens(behind, "node2") == ["10.0.0.2"]
    routed = plan({"node1": {"router_url": "http://10.0.0.9:30080"}}, canary=["node1"])
    assert listens(routed, "node1") == ["10.0.0.1"]
    own = plan({"node1": {"fleet_address": "192.168.7.1"}, "node2": {"listen_host": "0.0.0.0"}, "gw": {}},
               canary=["node1"], wave1=["node2"], gateways=["gw"])
    assert listens(own, "node1") == ["192.168.7.1"] and listens(own, "node2") == ["0.0.0.0"]  # given: kept
    assert own.workers[0].url == "http://192.168.7.1:30000"  # the gateways reach it where it listens


def test_behind_gateways_an_engine_is_open_to_them_and_the_monitoring_hosts_alone():
    fleet = plan({"node1": {"monitoring_networks": ["10.9.0.0/24"]}, "node2": {}, "gw": {}},
                 canary=["node1"], wave1=["node2"], gateways=["gw"])
    found = rules(fleet, "node1")
    assert 'ip saddr { 10.0.0.3, 10.9.0.0/24 } tcp dport 30000 accept comment "engines: the gateways and monitoring"' \
        in found
    assert 'ip saddr { 10.9.0.0/24 } tcp dport 9100 accept comment "node_exporter"' in found
    assert 'tcp dport 22 accept comment "ssh"' in found  # ssh_networks None: from anywhere
    assert not any("30000" in line and "ip saddr" not in line for line in found)  # never from anywhere
    text = fleet.hosts["node1"].policy.text
    assert "policy drop;" in text and text.index("ct state established,related accept") < text.index('"ssh"')
    gateway = rules(fleet, "gw")
    assert 'tcp dport 30080 accept comment "gateway: clients and the controller"' in gateway
    assert not any("30000" in line for line in gateway)  # a gateway host serves no engine


def test_without_gateways_the_engines_open_to_the_client_networks():
    fleet = plan({"node1": {"router_url": "http://10.0.0.9:30080", "client_networks": ["10.0.0.9"],
                            "ssh_networks": ["10.0.0.0/24", "fd00::/64"]}}, canary=["node1"])
    found = rules(fleet, "node1")
    assert 'ip saddr { 10.0.0.9 } tcp dport 30000 accept comment "engines: clients and monitoring"' in found
    assert 'ip saddr { 10.0.0.0/24 } tcp dport 22 accept comment "ssh"' in found
    assert 'ip6 saddr { fd00::/64 } tcp dport 22 accept comment "ssh"' in found


def test_pd_ports_open_between_the_prefills_and_decodes_alone():
    fleet = plan({"node1": {"disaggregation_mode": "prefill"}, "node2": {"disaggregation_mode": "decode"},
                  "gw": {}}, canary=["node1", "node2"], gateways=["gw"])
    pd = f'tcp dport {{ 8998, {MOONCAKE[0]}-{MOONCAKE[1]}, {EPHEMERAL[0]}-{EPHEMERAL[1]} }} accept'
    assert any(line.startswith(f"ip saddr {{ 10.0.0.2 }} {pd}") for line in rules(fleet, "node1"))
    assert any(line.startswith(f"ip saddr {{ 10.0.0.1 }} {pd}") for line in rules(fleet, "node2"))
    assert not any("8998" in line for line in rules(fleet, "gw"))  # smg only names the bootstrap port
    nixl = plan({"node1": {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "nixl"},
                 "node2": {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "nixl"}, "gw": {}},
                canary=["node1", "node2"], gateways=["gw"])
    assert not any(str(MOONCAKE[0]) in line for line in rules(nixl, "node1"))  # nixl opens no port of its own


def test_extra_rules_come_before_sglfleets_own_and_change_the_policy():
    plain = plan({"node1": {}}, canary=["node1"])
    extra = plan({"node1": {"firewall_extra_rules": ["tcp dport 22 drop"]}}, canary=["node1"])
    text = extra.hosts["node1"].policy.text
    assert text.index("tcp dport 22 drop") < text.index('tcp dport 22 accept comment "ssh"')  # it may refuse
    assert extra.hosts["node1"].policy.digest != plain.hosts["node1"].policy.digest
    assert plan({"node1": {"firewall": False}}, canary=["node1"]).hosts["node1"].policy is None


def test_the_policy_replaces_sglfleets_table_alone_in_one_transaction():
    text = plan({"node1": {}}, canary=["node1"]).hosts["node1"].policy.text
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[:3] == ["table inet sglfleet", "delete table inet sglfleet", "table inet sglfleet {"]
    assert "flush" not in text and sum("table " in line for line in lines) == 3  # no other table is named


@pytest.mark.parametrize("data, fragment", [
    ({"ssh_networks": ["10.0.0.300/8"]}, "ssh_networks"),
    ({"fleet_address": "node-one"}, "is not an IP address"),
    ({"firewall_extra_rules": ["tcp dport 22 drop; flush ruleset"]}, "firewall_extra_rules"),
    ({"firewall_confirm_s": 3}, "firewall_confirm_s"),
])
def test_bad_network_settings_get_one_line_before_any_connection(data, fragment):
    with pytest.raises(ConfigError) as error:
        plan({"node1": data}, canary=["node1"])
    assert len(error.value.problems) == 1 and fragment in error.value.problems[0]


HOLD_PROBE = """
import socket, subprocess, sys, time
ATTEMPT = '''
import socket
s = socket.socket(); s.settimeout(1.5)
try:
    s.connect(("10.77.0.1", 30080)); print("connected")
except socket.timeout:
    print("waits")  # the SYN was dropped: the client's kernel would send it again
except ConnectionRefusedError:
    print("refused")
'''
def attempt():  # from the client's namespace, through the veth: not loopback, which the policy accepts first
    return subprocess.run(["ip", "netns", "exec", sys.argv[1], sys.executable, "-c", ATTEMPT],
                          capture_output=True, text=True, check=True, timeout=30).stdout.strip()
def listener():
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.bind(("10.77.0.1", 30080)); l.listen()
    return l
def nft(command):
    subprocess.run(["nft", command], check=True)
seen = {"nothing held, nothing listens": attempt()}
one = listener(); seen["nothing held, a gateway listens"] = attempt()
nft("add element inet sglfleet gateway_stopping { 30080 timeout 60s }")
seen["stopping, the old gateway still listens"] = attempt()
one.close(); seen["stopping, the old gateway gone"] = attempt()
nft("add element inet sglfleet gateway_starting { 30080 timeout 60s }")
nft("delete element inet sglfleet gateway_stopping { 30080 }")
two = listener(); seen["starting, the new gateway listens, not READY"] = attempt()
nft("delete element inet sglfleet gateway_starting { 30080 }")
seen["READY"] = attempt()
nft("add element inet sglfleet gateway_starting { 30080 timeout 1s }"); two.close(); time.sleep(1.5)
seen["a hold that nothing ended, gone by itself"] = attempt()
print(repr(seen))
"""



@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nft"), reason="needs root and nft (a network namespace)")
def test_a_restarting_gateways_port_drops_what_nothing_could_answer_yet_and_refuses_nothing(tmp_path):
    """
    The gateway's policy, applied by nft in a namespace of its own, through a restart's steps as the
    unit takes them: a client's SYN is answered while the old gateway listens and once the new one is
    READY, and dropped (the client's kernel sends it again) in between; never refused, never a 404.
    """
    policy = plan({"node1": {}, "gw": {"client_networks": ["10.77.0.0/24"]}}, canary=["node1"], gateways=["gw"])
    text = policy.hosts["gw"].policy.text
    assert "set gateway_starting" in text and "socket transparent 0 return" in text
    assert "gateway_starting" not in policy.hosts["node1"].policy.text  # an engine host holds nothing
    (tmp_path / "policy.nft").write_text(text)
    (tmp_path / "probe.py").write_text(HOLD_PROBE)
    gateway, client = (f"sglfleet-hold-{os.getpid()}-{side}" for side in ("gw", "client"))
    try:
        for namespace in (gateway, client):
            subprocess.run(["ip", "netns", "add", namespace], check=True)
        steps = [["ip", "link", "add", "h0", "netns", gateway, "type", "veth", "peer", "h1", "netns", client],
                 *(["ip", "netns", "exec", ns, "ip", "addr", "add", f"10.77.0.{n}/24", "dev", dev]
                   for ns, n, dev in ((gateway, 1, "h0"), (client, 2, "h1"))),
                 *(["ip", "netns", "exec", ns, "ip", "link", "set", dev, "up"] for ns, dev in ((gateway, "h0"), (client, "h1"))),
                 ["ip", "netns", "exec", gateway, "nft", "-f", str(tmp_path / "policy.nft")]]
        for step in steps:
            subprocess.run(step, check=True, timeout=30)
        probe = subprocess.run(["ip", "netns", "exec", gateway, sys.executable, str(tmp_path / "probe.py"), client],
                               capture_output=True, text=True, timeout=60)
    finally:
        for namespace in (gateway, client):
            subprocess.run(["ip", "netns", "del", namespace], check=False, capture_output=True)
    assert probe.returncode == 0, probe.stderr
    assert ast.literal_eval(probe.stdout) == {
        "nothing held, nothing listens": "refused",
        "nothing held, a gateway listens": "connected",
        "stopping, the old gateway still listens": "connected",
        "stopping, the old gateway gone": "waits",
        "starting, the new gateway listens, not READY": "waits",
        "READY": "connected",
        "a hold that nothing ended, gone by itself": "refused",
    }
