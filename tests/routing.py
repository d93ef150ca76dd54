"""A real sglang-router in front of the local fleet, and bounded traffic through it."""

from __future__ import annotations

import contextlib
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

from deploying import SECRETS

MAX_REQUESTS = 4000   # the load stops by itself at whichever limit comes first
MAX_SECONDS = 240


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


class Load:
    """
    ``/generate`` requests through the router from a few threads, at most
    ``rate`` a second, until ``stop()`` or a limit (``MAX_REQUESTS``,
    ``MAX_SECONDS``); ``outcomes`` holds each answer's status (or the error),
    ``sent`` each request's ``(time.time() when sent, outcome)``.
    """

    def __init__(self, url: str, threads: int = 4, max_new_tokens: int = 8, rate: float = 15.0):
        self.url, self.outcomes, self.sent, self.done = url, [], [], threading.Event()
        self.pause = threads / rate
        self.body = json.dumps({"text": "Hello", "sampling_params": {"max_new_tokens": max_new_tokens}}).encode()
        self.started = time.monotonic()
        self.threads = [threading.Thread(target=self._send, daemon=True) for _ in range(threads)]
        for thread in self.threads:
            thread.start()

    def _send(self):
        headers = {"Content-Type": "application/json",
                   "Authorization": f"Bearer {SECRETS['SGLFLEET_API_KEY']}"}
        while not self.done.is_set() and len(self.outcomes) < MAX_REQUESTS \
                and time.monotonic() - self.started < MAX_SECONDS:
            request = urllib.request.Request(f"{self.url}/generate", data=self.body, headers=headers)
            sent = time.time()
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    outcome = response.status
            except urllib.error.HTTPError as error:
                outcome = error.code
            except OSError as error:
                outcome = repr(error)
            self.outcomes.append(outcome)
            self.sent.append((sent, outcome))
            self.done.wait(self.pause)  # a steady rate, so traffic lasts through a whole rollout

    def stop(self) -> list:
        self.done.set()
        for thread in self.threads:
            thread.join(timeout=60)
        return self.outcomes
