"""
The gate on the local fleet, against a stand-in that reports as sglang 0.5.9
does: the start-up gate's accept length from its own generations, the bake's
figures from /metrics under traffic through a real sglang-router, and the
verdicts in the run's summary and in ``sglfleet status``.
"""

import json
import re
import time

import pytest

from deploying import converged, deploy, fleet_state, host_state, sglfleet
from paths import LAYOUT, UNIT
from routing import Load, running_router

pytestmark = pytest.mark.fleet

LISTEN = ("--data", "listen_host=0.0.0.0")
# A new release on every host each time (the EAGLE numbers move), so every gate runs.
CHANGES = [("--data", f"speculative_num_steps={steps}", "--data", "speculative_eagle_topk=1",
            "--data", f"speculative_num_draft_tokens={steps + 1}") for steps in (2, 3, 4, 5, 6)]
SHORT_BAKE = ("--data", "gate_bake_s=6", "--data", "gate_interval_s=1")


def started(fleet, host: str) -> str:
    return fleet.inside(host, f"systemctl show {UNIT} -p ActiveEnterTimestampMonotonic").stdout


def currents(fleet) -> dict:
    return {host: state["current"] for host, state in fleet_state(fleet).items()}


def status_rows() -> dict:
    done = sglfleet("status", "inventory/dev.py", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return {row["host"]: row for row in json.loads(done.stdout)}


@pytest.fixture(scope="module")
def fleet_up(fleet):
    yield from converged(fleet, *LISTEN)


def test_accept_length_threshold_passes_on_a_standin_that_reports_as_059(fleet_up):
    fleet = fleet_up
    done = deploy(*LISTEN, *CHANGES[0], "--data", "gate_min_spec_accept_length=2.0")
    assert done.returncode == 0, done.stdout[-3000:]
    for wave, host in (("canary", "node1"), ("wave1", "node2"), ("wave2", "node3")):
        line = re.search(rf"\[{host}\] {wave}: gate passed on \w+ \(accept length ([\d.]+), 256 tokens in 4 "
                         rf"generations", done.stdout)
        assert line and float(line.group(1)) >= 2.0, done.stdout[-3000:]
        startup = host_state(fleet, host)["startup"]
        assert startup["passed"] and startup["figures"]["tokens"] == 256
        # The run's closing summary, after pyinfra's results, names each host's verdict and figures.
        closing = done.stdout[done.stdout.index("--> Rollout: 3 passed"):]
        assert re.search(rf"-->   {host}: gate passed on \w+ \(accept length {line.group(1)}, 256 tokens", closing), \
            closing


def test_a_low_accept_length_rolls_the_canary_back_and_touches_no_later_wave(fleet_up):
    fleet = fleet_up
    before = currents(fleet)
    untouched = {host: started(fleet, host) for host in ("node2", "node3")}
    done = deploy(*LISTEN, *CHANGES[1], "--data", "gate_min_spec_accept_length=2.0",
                  "--data", "standin_spec_accept_length=1.2")
    assert done.returncode != 0
    assert re.search(r"\[node1\] gate failed on release \w+: accept length: 1\.\d+ over 256 tokens of 4 "
                     r"generations is below 2; rolled back to \w+, which serves again", done.stdout), done.stdout[-3000:]
    assert "wave1 not started: node1 of canary did not pass (1 of 1 hosts, above max_fail_percentage 0)" in done.stdout
    assert currents(fleet) == before
    assert {host: started(fleet, host) for host in ("node2", "node3")} == untouched


def test_a_bake_without_traffic_is_inconclusive_and_the_policy_decides(fleet_up):
    fleet = fleet_up
    before = currents(fleet)
    failed = deploy(*LISTEN, *CHANGES[2], "--data", "gate_bake_s=3", "--data", "gate_interval_s=1")
    assert failed.returncode != 0
    assert re.search(r"\[node1\] bake inconclusive on release \w+: no request finished during the bake: no data "
                     r"to judge; gate_on_inconclusive is fail", failed.stdout), failed.stdout[-3000:]
    assert currents(fleet) == before  # the canary was reverted, the rest never switched

    passed = deploy(*LISTEN, *CHANGES[2], "--data", "gate_bake_s=3", "--data", "gate_interval_s=1",
                    "--data", "gate_on_inconclusive=pass")
    assert passed.returncode == 0, passed.stdout[-3000:]
    for host, state in fleet_state(fleet).items():
        assert state["current"] != before[host] and state["bake"]["verdict"] == "inconclusive", (host, state)
        assert state["bake"]["passed"] is True


def test_the_bake_catches_a_latency_regression_and_rolls_the_host_back(fleet_up):
    fleet = fleet_up
    with running_router(fleet) as router:
        routed = ("--data", f"router_url={router}")
        load = Load(router)
        try:
            time.sleep(2)
            # Under traffic, every host bakes its release and keeps its figures.
            baseline = deploy(*LISTEN, *CHANGES[3], *routed, *SHORT_BAKE)
            assert baseline.returncode == 0, baseline.stdout[-3000:]
            for wave, host in (("canary", "node1"), ("wave1", "node2"), ("wave2", "node3")):
                assert re.search(rf"\[{host}\] {wave}: bake pass on \w+ \(\d+ requests, TTFT p99 ", baseline.stdout)
                assert re.search(rf"-->   {host}: bake pass on \w+ \(\d+ requests, TTFT p99 ", baseline.stdout)
            rows = status_rows()
            assert all(rows[host]["bake"]["verdict"] == "pass" and rows[host]["bake"]["figures"]["requests"] > 0
                       for host in fleet.hosts), rows
            before = currents(fleet)
            untouched = {host: started(fleet, host) for host in ("node2", "node3")}

            # The canary's next release slows down once its start-up gate has passed.
            fleet.fault("node1", "slow-after 4")
            regressed = deploy(*LISTEN, *CHANGES[4], *routed, *SHORT_BAKE)
            fleet.fault("node1", "clear")
        finally:
            outcomes = load.stop()

    assert regressed.returncode != 0
    assert re.search(r"\[node1\] canary: gate passed on \w+", regressed.stdout), regressed.stdout[-3000:]
    failed = re.search(r"\[node1\] bake fail on release (\w+): (TTFT|inter-token) p99 [\d.]+ s is \d+% above "
                       r"[\d.]+ s under the previous release", regressed.stdout)
    assert failed, regressed.stdout[-3000:]
    assert re.search(rf"-->   node1: bake fail on {failed.group(1)} \(\d+ requests, TTFT p99 ", regressed.stdout)
    assert "wave1 not started: node1 of canary did not pass (1 of 1 hosts, above max_fail_percentage 0)" in regressed.stdout
    assert currents(fleet) == before
    assert {host: started(fleet, host) for host in ("node2", "node3")} == untouched
    assert len(outcomes) > 50, f"too little traffic to mean anything: {len(outcomes)} requests"
    # The failed release keeps its verdict and figures; the host serves its earlier, baked one.
    verdict = json.loads(fleet.inside("node1", f"cat {LAYOUT.releases}/{failed.group(1)}/verdict.json").stdout)
    assert verdict["bake"]["verdict"] == "fail" and verdict["bake"]["figures"]["requests"] > 0
    assert verdict["bake"]["baseline_release"] == before["node1"]
    row = status_rows()["node1"]
    assert row["current"] == before["node1"] and row["bake"]["verdict"] == "pass"
