"""
Fleet state in Prometheus, with real parts: each host's Debian node_exporter serves
the host tool's ``sglfleet.prom``; Debian's Prometheus on the controller scrapes the
fleet's exporters and stand-ins (fleet addresses and loopback only, for as long as
the module runs) and answers queries about the rollout.
"""

import json
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from deploying import converged, deploy, eagle_change, host_state
from faulting import new_release
from paths import LAYOUT
from reaching import closed_port
from sglfleet.devfleet import FAULT_FILE
from sglfleet.host.prometheus import parse

pytestmark = pytest.mark.fleet


CHANGE = eagle_change(2)
SCRAPE_LABELS = ("__name__", "instance", "job")
FAILING = (*eagle_change(1), "--data", "gate_warmup_s=30")  # with the canary made to crash


@pytest.fixture(scope="module")
def fleet_up(fleet):
    # The controller is the monitoring host: the firewall opens node_exporter and the stand-ins' /metrics to it.
    yield from converged(fleet, *monitored(fleet))


def monitored(fleet) -> tuple[str, ...]:
    """``--data`` naming the controller (the fleet bridge's own address) as the monitoring host."""
    return ("--data", f"monitoring_networks={json.dumps([fleet.state()['gateway']])}")


@pytest.fixture(scope="module")
def prometheus(fleet_up, tmp_path_factory):
    """Debian's prometheus on 127.0.0.1, scraping every host each second; its API's base URL."""
    folder = tmp_path_factory.mktemp("prometheus")
    exporters = [f"{fleet_up.address(host)}:9100" for host in fleet_up.hosts]
    standins = [f"{fleet_up.address(host)}:30000" for host in fleet_up.hosts]
    relabel = [{"source_labels": ["__address__"], "regex": rf"{fleet_up.address(host).replace('.', '[.]')}:.*",
                "target_label": "host", "replacement": host} for host in fleet_up.hosts]
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": [
        {"job_name": "node", "static_configs": [{"targets": exporters}], "relabel_configs": relabel},
        {"job_name": "sglang", "static_configs": [{"targets": standins}], "relabel_configs": relabel}]}
    (folder / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = closed_port()  # free: nothing listens there yet
    process = subprocess.Popen(
        ["prometheus", f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
        stdout=subprocess.DEVNULL, stderr=open(folder / "prometheus.log", "w"))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(base + "/-/ready", timeout=2).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, (folder / "prometheus.log").read_text()
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        process.wait(30)


def query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def eventually(base: str, promql: str, want, timeout: float = 30.0) -> list[dict]:
    """Query until ``want(result)`` holds (a scrape a second), or fail with the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        result = query(base, promql)
        if want(result) or time.monotonic() > deadline:
            # Each series' own labels and value, shortly: pytest cuts a long message before them.
            assert want(result), (promql, [({k: v for k, v in series["metric"].items() if k not in SCRAPE_LABELS},
                                             series["value"][1]) for series in result])
            return result
        time.sleep(0.5)


def by_host(result: list[dict], label: str) -> dict[str, str]:
    return {series["metric"]["host"]: series["metric"].get(label, series["value"][1]) for series in result}


def test_node_exporter_serves_the_release_each_host_serves(fleet_up):
    fleet = fleet_up
    for host in fleet.hosts:
        text = fleet.exec(host, "python3 -c \"import urllib.request; print(urllib.request.urlopen("
                                "'http://127.0.0.1:9100/metrics').read().decode())\"").stdout
        current = host_state(fleet, host)["current"]
        assert "sglfleet_release_info{previous=" in text and f'release="{current}"' in text, host


def test_prometheus_sees_a_rollout_on_every_host_and_a_failed_canary(fleet_up, prometheus):
    fleet = fleet_up
    before = {host: host_state(fleet, host)["current"] for host in fleet.hosts}
    done = deploy(*monitored(fleet_up), *CHANGE)
    assert done.returncode == 0, done.stdout[-3000:]
    # Each host's own release: each listens on its own fleet address (--host), for Prometheus.
    release = {host: host_state(fleet, host)["current"] for host in fleet.hosts}
    assert release["node1"] == new_release(done.stdout) and all(release[h] != before[h] for h in fleet.hosts)
    serving = eventually(prometheus, "sglfleet_release_info", lambda result: by_host(result, "release") == release)
    assert {series["metric"]["service"] for series in serving} == {"sglang"}
    gates = eventually(prometheus, "sglfleet_gate_passed", lambda result: len(result) == len(fleet.hosts))
    assert by_host(gates, "value") == {host: "1" for host in fleet.hosts}
    # sglang's own series, scraped from the stand-ins beside sglfleet's.
    assert eventually(prometheus, 'sglang:generation_tokens_total{job="sglang"}',
                      lambda result: len(result) == len(fleet.hosts))

    fleet.fault("node1", "crash")
    try:
        failed = deploy(*monitored(fleet_up), *FAILING)
    finally:
        fleet.fault("node1", "clear")
    assert failed.returncode != 0
    canary = eventually(prometheus, 'sglfleet_gate_passed{host="node1"}',
                        lambda result: result and result[0]["value"][1] == "0")
    assert canary[0]["metric"]["release"] != release["node1"]  # the release that failed its gate
    # node1 serves its earlier release again; the later waves never moved.
    assert by_host(query(prometheus, "sglfleet_release_info"), "release") == release


def exported(fleet, host: str) -> dict:
    """What ``host``'s node_exporter serves, from the controller as Prometheus scrapes it."""
    with urllib.request.urlopen(f"http://{fleet.address(host)}:9100/metrics", timeout=10) as response:
        return parse(response.read().decode())


def drift_of(samples: dict) -> dict[str, float]:
    return {labels["kind"]: value for labels, value in samples.get("sglfleet_drift", [])}


def test_drift_stays_marked_until_repaired_and_a_rebuilt_stack_shows_its_build_time(fleet_up, prometheus):
    """A stack changed by hand on node1, whose repair (a rebuild, then a restart behind the gate) fails:
    ``sglfleet_drift{kind="stack"} 1`` stays; the build that ran shows its time; the next converge
    that gets through puts every kind back to 0, and when each was found stays."""
    fleet = fleet_up
    settled = deploy(*monitored(fleet_up), *CHANGE)  # as the test before left it: a quiet run
    assert settled.returncode == 0, settled.stdout[-3000:]
    assert set(drift_of(exported(fleet, "node1")).values()) == {0.0}
    stack = host_state(fleet, "node1")["stack"]
    site = f"lib/python{fleet.python_of('node1')}/site-packages"
    fleet.inside("node1", f"echo 'import os' > {LAYOUT.stacks}/{stack}/venv/{site}/sitecustomize.py")
    before = time.time()

    fleet.fault("node1", "crash")
    fleet.inside("node1", f"sed -i '/^spare /d' {FAULT_FILE}")  # the restart of the serving release crashes too
    try:
        failed = deploy(*monitored(fleet_up), *CHANGE, "--data", "gate_warmup_s=30")
    finally:
        fleet.fault("node1", "clear")
    assert failed.returncode != 0 and f"[node1] Drift: stack {stack} changed on the host" in failed.stdout, \
        failed.stdout[-3000:]
    found = exported(fleet, "node1")
    assert drift_of(found) == {"current": 0, "firewall": 0, "model": 0, "release": 0, "service": 0, "stack": 1}
    when = {labels["kind"]: value for labels, value in found["sglfleet_drift_found_timestamp_seconds"]}
    assert before - 1 < when["stack"] < time.time() + 1
    # The rebuild ran, and recorded itself, before the restart failed.
    built = {labels["stack"]: value for labels, value in found["sglfleet_stack_build_timestamp_seconds"]}
    took = {labels["stack"]: value for labels, value in found["sglfleet_stack_build_duration_seconds"]}
    assert built[stack] > before and 0 < took[stack] < built[stack] - before + 1
    assert set(drift_of(exported(fleet, "node2")).values()) == {0.0}  # the other hosts never drifted
    eventually(prometheus, 'sglfleet_drift{kind="stack"} == 1',
               lambda result: by_host(result, "value") == {"node1": "1"})

    repaired = deploy(*monitored(fleet_up), *CHANGE)  # nothing serves on node1: switched behind the gate
    assert repaired.returncode == 0, repaired.stdout[-3000:]
    found = exported(fleet, "node1")
    assert set(drift_of(found).values()) == {0.0}
    assert {labels["kind"]: value for labels, value in found["sglfleet_drift_found_timestamp_seconds"]}["stack"] \
        == when["stack"]  # when it was found stays
    assert {labels["stack"]: value for labels, value in found["sglfleet_stack_build_timestamp_seconds"]} == built
    eventually(prometheus, 'sglfleet_drift{kind="stack"} == 1', lambda result: result == [])
    assert eventually(prometheus, f'sglfleet_stack_build_duration_seconds{{stack="{stack}"}}',
                      lambda result: "node1" in by_host(result, "value"))
