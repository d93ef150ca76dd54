"""
A staged rollout behind a real sglang-router, under bounded traffic: each host
leaves the router before its restart and rejoins after its gate, so no request
fails.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from deploying import SECRETS, deploy, fleet_state

pytestmark = pytest.mark.fleet

LISTEN = ("--data", "host=0.0.0.0")
CHANGE = ("--data", "speculative_num_steps=2", "--data", "speculative_eagle_topk=1",
          "--data", "speculative_num_draft_tokens=3")
MAX_REQUESTS = 3000   # the load stops by itself at whichever limit comes first
MAX_SECONDS = 180


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def router(fleet):
    """A real sglang-router on loopback in front of every host of the fleet."""
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    first = deploy(*LISTEN)
    assert first.returncode == 0, first.stdout[-3000:]
    port = free_port()
    workers = [f"http://{fleet.address(host)}:30000" for host in fleet.hosts]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
         "--port", str(port),
         "--log-level", "warn", "--worker-urls", *workers],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                listed = json.load(urllib.request.urlopen(f"{url}/workers", timeout=2))
                if sum(w["is_healthy"] for w in listed["workers"]) == len(workers):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "router did not come up"
            time.sleep(0.5)
        yield url
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def load(url: str, done: threading.Event, outcomes: list, threads: int = 4) -> list[threading.Thread]:
    """Send /generate requests through the router until ``done`` or a limit."""
    started = time.monotonic()
    body = json.dumps({"text": "Hello", "sampling_params": {"max_new_tokens": 8}}).encode()
    headers = {"Content-Type": "application/json",
               "Authorization": f"Bearer {SECRETS['SGLFLEET_API_KEY']}"}

    def send():
        while not done.is_set() and len(outcomes) < MAX_REQUESTS \
                and time.monotonic() - started < MAX_SECONDS:
            request = urllib.request.Request(f"{url}/generate", data=body, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    outcomes.append(response.status)
            except urllib.error.HTTPError as error:
                outcomes.append(error.code)
            except OSError as error:
                outcomes.append(repr(error))

    workers = [threading.Thread(target=send, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    return workers


def test_rollout_behind_the_router_loses_no_request(fleet, router):
    before = fleet_state(fleet)
    done, outcomes = threading.Event(), []
    senders = load(router, done, outcomes)
    time.sleep(2)  # traffic flows before the first host leaves
    try:
        result = deploy(*LISTEN, *CHANGE, "--data", f"router_url={router}")
    finally:
        time.sleep(2)  # and after the last one rejoined
        done.set()
        for sender in senders:
            sender.join(timeout=60)

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
