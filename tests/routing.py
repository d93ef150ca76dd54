"""A real sglang-router in front of the local fleet, and bounded traffic through it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from deploying import SECRETS
from sglfleet.devfleet.traffic import GENERATE_ONLY, Traffic


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_router(fleet):
    """A real sglang-router on loopback in front of every host of ``fleet``; yields its URL."""
    port = free_port()
    workers = [f"http://{fleet.address(host)}:30000" for host in fleet.hosts]
    proc = subprocess.Popen(
        # Round robin: every host gets its share of the load's one repeated prompt, which the
        # default cache-aware policy would send to a single worker (the bake judges each host).
        # Its metrics on a port of its own too (29000 by default): two routers may run at once.
        [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
         "--port", str(port), "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
         "--log-level", "warn", "--policy", "round_robin", "--worker-urls", *workers],
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


def Load(url: str, mix=GENERATE_ONLY, **shape) -> Traffic:
    """Bounded traffic through ``url`` with the suite's API key (``sglfleet.devfleet.traffic``): ``/generate``
    alone unless ``mix`` says (``CLIENT_MIX``: the OpenAI SDK's streamed chats and completions too)."""
    return Traffic(url, api_key=SECRETS["SGLFLEET_API_KEY"], mix=mix, **shape)
