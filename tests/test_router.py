"""
A staged rollout behind a real sglang-router, under bounded traffic: each host
leaves the router before its restart and rejoins after its gate, so no request
fails.
"""

import json
import time
import urllib.request

import pytest

from deploying import converged, deploy, fleet_state
from routing import Load, running_router

pytestmark = pytest.mark.fleet

LISTEN = ("--data", "listen_host=0.0.0.0")
CHANGE = ("--data", "speculative_num_steps=2", "--data", "speculative_eagle_topk=1",
          "--data", "speculative_num_draft_tokens=3")


@pytest.fixture(scope="module")
def router(fleet):
    for up in converged(fleet, *LISTEN):
        with running_router(up) as url:
            yield url


def test_rollout_behind_the_router_loses_no_request(fleet, router):
    before = fleet_state(fleet)
    load = Load(router)
    time.sleep(2)  # traffic flows before the first host leaves
    try:
        result = deploy(*LISTEN, *CHANGE, "--data", f"router_url={router}")
    finally:
        time.sleep(2)  # and after the last one rejoined
        outcomes = load.stop()

    assert result.returncode == 0, result.stdout[-3000:]
    after = fleet_state(fleet)
    assert all(after[h]["current"] != before[h]["current"] for h in fleet.hosts)
    failed = [outcome for outcome in outcomes if outcome != 200]
    print(f"through the router during the rollout: {len(outcomes)} requests, {len(failed)} failed")
    assert len(outcomes) > 50, f"too little traffic to mean anything: {len(outcomes)} requests"
    assert failed == [], f"{len(failed)} of {len(outcomes)} requests failed: {failed[:5]}"
    listed = json.load(urllib.request.urlopen(f"{router}/workers", timeout=5))["workers"]
    assert sorted(w["url"] for w in listed if w["is_healthy"]) == sorted(
        f"http://{fleet.address(h)}:30000" for h in fleet.hosts)
