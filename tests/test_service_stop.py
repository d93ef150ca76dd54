"""
How the unit ends, on the local fleet: sglang drains on SIGTERM and then SIGKILLs
itself (0.5.9 ``tokenizer_manager.py:2113-2149``), and the stand-in does the same.
A stop or restart that systemd asked for ends with ``Result=success``; a crash, or
a SIGKILL that nobody asked for, stays a failure and ``Restart=on-failure`` brings
the server back.
"""

import json
import time

import pytest

from deploying import SECRETS, converged, deploy, eagle_change, server_pid, sglfleet
from faulting import wait_serving
from paths import UNIT

pytestmark = pytest.mark.fleet

HOST = "node3"


@pytest.fixture(scope="module")
def fleet_up(fleet):
    yield from converged(fleet)


def unit(fleet, *properties: str) -> dict[str, str]:
    out = fleet.inside(HOST, f"systemctl show {UNIT} " + " ".join(f"-p {p}" for p in properties)).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal_since(fleet, since: float) -> str:
    return fleet.inside(HOST, f"journalctl -u {UNIT} --since @{since:.3f} -o cat --no-pager").stdout


def test_a_stop_asked_for_is_a_success(fleet_up):
    fleet = fleet_up
    since = time.time()
    fleet.inside(HOST, f"systemctl stop {UNIT}", timeout=120)
    try:
        ended = unit(fleet, "ActiveState", "Result")
        log = journal_since(fleet, since)
    finally:
        fleet.inside(HOST, f"systemctl start {UNIT}")
    assert ended == {"ActiveState": "inactive", "Result": "success"}, log[-2000:]
    assert "SIGTERM received" in log  # the server itself drained, then ended as sglang ends
    assert "Failed with result" not in log
    wait_serving(fleet, HOST)


def test_a_restart_asked_for_is_a_success_and_no_restart_by_systemd(fleet_up):
    fleet = fleet_up
    before = unit(fleet, "NRestarts", "MainPID")
    since = time.time()
    fleet.inside(HOST, f"systemctl restart {UNIT}", timeout=120)
    wait_serving(fleet, HOST)
    after = unit(fleet, "NRestarts", "MainPID", "Result")
    assert after["Result"] == "success" and after["MainPID"] != before["MainPID"]
    assert after["NRestarts"] == before["NRestarts"]  # systemd restarted nothing on its own
    assert "Failed with result" not in journal_since(fleet, since)


@pytest.mark.parametrize("whom", ["server", "unit"])
def test_a_sigkill_nobody_asked_for_fails_and_is_restarted(fleet_up, whom):
    """``server``: the OOM killer takes the sglang process; ``unit``: every process of the unit."""
    fleet = fleet_up
    before = unit(fleet, "NRestarts", "MainPID")
    since = time.time()
    if whom == "server":
        fleet.inside(HOST, f"kill -KILL {server_pid(fleet, HOST)}")
    else:
        fleet.inside(HOST, f"systemctl kill -s KILL {UNIT}")
    deadline = time.monotonic() + 30
    while unit(fleet, "NRestarts")["NRestarts"] == before["NRestarts"]:
        assert time.monotonic() < deadline, f"systemd did not restart {UNIT}: {unit(fleet, 'ActiveState', 'Result')}"
        time.sleep(0.2)
    wait_serving(fleet, HOST)
    after = unit(fleet, "NRestarts", "MainPID")
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1
    assert after["MainPID"] != before["MainPID"]
    assert "Failed with result 'signal'" in journal_since(fleet, since)


def test_a_stop_that_outlasts_stop_timeout_s_counts_the_requests_it_cut(fleet_up, tmp_path):
    """A generation longer than the stop's bound is cut: the run says so, an event and status name it."""
    fleet, events = fleet_up, tmp_path / "events.jsonl"
    short = ("--limit", HOST, "--data", "stop_timeout_s=2", "--data", f"events_file={events}")
    try:
        assert deploy(*short).returncode == 0  # the unit's TimeoutStopSec=2
        assert "TimeoutStopUSec=2s" in fleet.inside(HOST, f"systemctl show {UNIT} -p TimeoutStopUSec").stdout
        # One generation of some 60 s at the stand-in's pace, from the host itself (it listens on loopback).
        fleet.inside(HOST, "systemd-run --unit=sglfleet-long-request --collect python3 -c 'import json, urllib.request; "
                           "urllib.request.urlopen(urllib.request.Request(\"http://127.0.0.1:30000/generate\", "
                           "data=json.dumps({\"text\": \"Hi\", \"sampling_params\": {\"max_new_tokens\": 40000}})"
                           f".encode(), headers={{\"Authorization\": \"Bearer {SECRETS['SGLFLEET_API_KEY']}\"}}), "
                           "timeout=300).read()'")
        time.sleep(2)  # it runs
        done = deploy(*short, *eagle_change(5))
        shown = sglfleet("status", "inventory/dev.py", *short[2:4], timeout=120)
    finally:
        fleet.inside(HOST, "systemctl stop sglfleet-long-request 2>/dev/null || true")
        restored = deploy("--limit", HOST)
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"1 requests in flight cut: the stop of" in done.stdout, done.stdout[-3000:]
    (cut,) = [json.loads(line) for line in events.read_text().splitlines() if '"RequestsCut"' in line]
    assert (cut["host"], cut["figures"], cut["service"]) == (HOST, {"cut": 1}, "sglang"), cut
    row = next(line for line in shown.stdout.splitlines() if line.startswith(HOST))
    assert "its stop cut 1 requests" in row, shown.stdout
    assert restored.returncode == 0, restored.stdout[-3000:]
