"""
TLS planned without a host (issue 41, part 5): which flags the gateway and the workers get, the
files each host gets (root-only, shown by fingerprint), https in every URL the fleet uses, a
release that restarts when its certificate changes and not otherwise, and the refusals before
any connection: a stack whose sglang has no ``--ssl-certfile``, an operator's pair that does not fit.
"""

import pytest
from pyinfra.api import Inventory

from sglfleet.artifacts.tls import FleetCA
from sglfleet.host.layout import GATEWAY, LAYOUT
from sglfleet.plan.validation import check_inventory, plan_inventory

BASE = {"stack": "dev-sglang-0.5.23", "server": "standin", "gpu_less": True, "model_path": "moonshotai/Kimi-K2.5",
        "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3", "allow_unpinned_models": True}


def inventory(tmp_path, **data):
    hosts = {"node1": {}, "node2": {}, "gw": {}}
    common = {**BASE, "secrets_file": str(tmp_path / "secrets.env"), **data}
    return Inventory(([(name, {**common, "ssh_hostname": f"10.0.0.{number}", **one})
                       for number, (name, one) in enumerate(hosts.items(), 1)], {}),
                     canary=(["node1"], {}), wave1=(["node2"], {}), gateways=(["gw"], {}))


def test_off_by_default_nothing_changes_and_no_ca_is_made(tmp_path):
    fleet = plan_inventory(inventory(tmp_path))
    assert fleet.gateways == (("gw", "http://10.0.0.3:30080"),) and fleet.trust == ""
    assert [worker.url for worker in fleet.workers] == ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]
    gateway = fleet.hosts["gw"].build(None).gateway
    assert gateway.tls == () and "LoadCredential" not in gateway.unit and "--tls-cert-path" not in gateway.unit
    node = fleet.hosts["node1"]
    assert node.service_files["sglang"].tls == () and "--ssl-certfile" not in node.build(None).releases["sglang"].args
    assert not (tmp_path / "secrets.env.tls").exists()


def test_fleet_ca_serves_the_gateway_and_the_workers_with_https_everywhere(tmp_path):
    fleet = plan_inventory(inventory(tmp_path, gateway_tls="fleet_ca", worker_tls=True))
    ca = FleetCA.beside(tmp_path / "secrets.env")
    assert fleet.gateways == (("gw", "https://10.0.0.3:30080"),) and fleet.trust == ca.cert
    assert [worker.url for worker in fleet.workers] == ["https://10.0.0.1:30000", "https://10.0.0.2:30000"]
    gateway = fleet.hosts["gw"].build(None).gateway
    folder = "/run/credentials/sglang-gateway.service"
    for line in (f"--tls-cert-path {folder}/tls.crt", f"--tls-key-path {folder}/tls.key",
                 f"--ca-cert-paths {folder}/ca.crt", f"LoadCredential=tls.key:{GATEWAY.tls_key}",
                 "--worker-urls https://10.0.0.1:30000 https://10.0.0.2:30000"):
        assert line in gateway.unit
    assert [one["path"] for one in gateway.tls] == [GATEWAY.tls_cert, GATEWAY.tls_key, GATEWAY.tls_ca]
    node = fleet.hosts["node1"]
    release = node.build(None).releases["sglang"]
    folder = "/run/credentials/sglang.service"
    assert release.args[-6:] == ("--ssl-certfile", f"{folder}/tls.crt", "--ssl-keyfile", f"{folder}/tls.key",
                                 "--ssl-ca-certs", f"{folder}/ca.crt")
    files = node.service_files["sglang"]
    assert f"LoadCredential=tls.crt:{LAYOUT.tls_cert}" in files.unit
    # What a diff shows: a fingerprint and the names, never key material; the key itself only in content.
    shown = {one["path"]: one["redacted"] for one in files.tls}
    assert shown[LAYOUT.tls_key].startswith("<private key of sha256:") and "10.0.0.1" in shown[LAYOUT.tls_cert]
    assert all("PRIVATE KEY" not in text and "BEGIN" not in text for text in shown.values())
    assert "PRIVATE KEY" in dict((one["path"], one["content"]) for one in files.tls)[LAYOUT.tls_key]
    assert "PRIVATE KEY" not in repr(files) + repr(gateway) + release.launch_script + release.args_text


def test_a_second_plan_is_the_same_and_a_new_certificate_restarts_behind_the_gate(tmp_path):
    first = plan_inventory(inventory(tmp_path, gateway_tls="fleet_ca", worker_tls=True))
    again = plan_inventory(inventory(tmp_path, gateway_tls="fleet_ca", worker_tls=True))

    def ids(fleet):
        return (fleet.hosts["node1"].build(None).releases["sglang"].release_id, fleet.hosts["gw"].build(None).gateway.digest)

    assert ids(first) == ids(again)  # idempotent: the certificates were reused, nothing restarts
    (tmp_path / "secrets.env.tls" / "issued" / "node1.crt").unlink()  # node1's is issued anew
    renewed = plan_inventory(inventory(tmp_path, gateway_tls="fleet_ca", worker_tls=True))
    assert ids(renewed)[0] != ids(first)[0] and ids(renewed)[1] == ids(first)[1]


def lint(tmp_path, **data):
    return [line for line in check_inventory(inventory(tmp_path, **data)) if ": error: " in line]


def test_worker_tls_on_a_stack_without_the_flags_is_one_line_before_any_connection(tmp_path):
    errors = lint(tmp_path, stack="dev", worker_tls=True)
    assert len(errors) == 1, errors
    assert errors[0] == ("node1, node2: error: worker_tls: stack dev's sglang 0.5.9 has no --ssl-certfile (sglang "
                         "0.5.14 and later have it); set worker_tls = false, or move the host to a stack with "
                         "sglang 0.5.14 or later (e.g. cu130-sglang-0.5.23)")


def test_the_operators_pair_is_refused_in_one_line_when_it_does_not_fit(tmp_path):
    other = FleetCA(tmp_path / "other")
    other.ensure()
    good, wrong = other.issue("gw", ["10.0.0.3"]), other.issue("x", ["10.0.0.3"])
    elsewhere = other.issue("gw-elsewhere", ["gateway.example.com"])
    for name, text in (("gw.crt", good.cert), ("gw.key", good.key), ("x.key", wrong.key),
                       ("else.crt", elsewhere.cert), ("else.key", elsewhere.key)):
        (tmp_path / name).write_text(text)
    assert lint(tmp_path, gateway_tls={"cert": str(tmp_path / "gw.crt"), "key": str(tmp_path / "gw.key")}) == []
    cases = {("gw.crt", "missing.key"): "missing.key: no such file",
             ("gw.crt", "x.key"): "x.key: not the private key of",
             ("else.crt", "else.key"): "else.crt names gateway.example.com, 127.0.0.1, localhost, not 10.0.0.3"}
    for (cert, key), expected in cases.items():
        errors = lint(tmp_path, gateway_tls={"cert": str(tmp_path / cert), "key": str(tmp_path / key)})
        assert len(errors) == 1 and errors[0].startswith("gw: error: gateway_tls: ") and expected in errors[0], errors
        assert "PRIVATE" not in errors[0]


@pytest.mark.parametrize("stack", ["dev-sglang-0.5.23"])
def test_the_operators_pair_serves_the_gateway_and_is_pinned_by_the_controller(tmp_path, stack):
    other = FleetCA(tmp_path / "other")
    other.ensure()
    pair = other.issue("gw", ["10.0.0.3"])
    (tmp_path / "gw.crt").write_text(pair.cert)
    (tmp_path / "gw.key").write_text(pair.key)
    fleet = plan_inventory(inventory(tmp_path, stack=stack,
                                     gateway_tls={"cert": str(tmp_path / "gw.crt"), "key": str(tmp_path / "gw.key")}))
    gateway = fleet.hosts["gw"].build(None).gateway
    assert [one["content"] for one in gateway.tls] == [pair.cert, pair.key]  # no CA: the workers are plain http
    assert "--ca-cert-paths" not in gateway.unit and fleet.trust == pair.cert
    assert not (tmp_path / "secrets.env.tls").exists()  # no fleet CA where nothing asks for one
