"""
``sglfleet devfleet traffic``'s clients against one stand-in process (real sglang 0.5.9 files):
every kind of the mix is answered in full and counted as such, and a server killed under
long streams shows as cut streams and refused connections, not as answers.
"""

import os
import signal
import time

import pytest

from sglfleet.devfleet.traffic import CLIENT_MIX, KINDS, Traffic
from test_standin import KIMI_PATH, launch, sglang_059, wait_for  # noqa: F401  (fixtures)


@pytest.fixture
def server(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH)
    wait_for(proc)
    return proc


def test_the_clients_mix_is_answered_in_full_and_counted_by_kind(server):
    load = Traffic(server.url, rate=40.0, max_requests=len(CLIENT_MIX) * 2, long_tokens=64)
    deadline = time.monotonic() + 60
    while len(load.requests) < len(CLIENT_MIX) * 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    load.stop()
    counts = load.by_kind()
    assert set(counts) == set(KINDS)
    assert all(counts[kind]["sent"] >= 1 and counts[kind]["full"] == counts[kind]["sent"] for kind in KINDS), \
        load.summary()
    assert load.failed() == [] and load.cut() == []
    first, *kinds = load.summary().splitlines()
    assert first.endswith(f"{len(load.requests)} as expected") and len(kinds) == len(KINDS)
    # The served model's name came from /v1/models, as a client finds it.
    assert load.model == "/models/kimi"


def test_a_server_killed_under_long_streams_shows_cut_streams_and_refusals(launch, sglang_059):
    server = launch(sglang_059, *KIMI_PATH, SGLFLEET_STANDIN_STEP_S="0.05")  # some 20 tokens a second
    wait_for(server)
    load = Traffic(server.url, mix=("long_chat",), threads=2, rate=10.0, long_tokens=2000, max_seconds=30)
    time.sleep(2)  # both streams under way, each far from its end
    os.kill(server.pid, signal.SIGKILL)
    time.sleep(1)
    load.stop()
    cut = load.cut()
    assert len(cut) == 2 and all(request.error.startswith("stream cut after") and "incomplete chunked read"
                                 in request.error for request in cut), load.summary()
    refused = [request for request in load.failed() if request not in cut]
    assert refused and all(request.status is None and "Connection refused" in request.error for request in refused)
    assert "2 cut" in load.summary() and "not" in load.summary().splitlines()[0]
