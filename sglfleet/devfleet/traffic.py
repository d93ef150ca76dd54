"""
Bounded client traffic through a gateway or router: ``/generate`` requests from
a few threads at a steady rate, until stopped or a limit, each answer kept.
The demo runs it through the fleet's gateway while it rolls a change out; the
tests measure a rollout or a gateway's restart with it.

**Example:**

.. code:: python

    traffic = Traffic("http://10.213.47.14:30080", api_key=os.environ.get("SGLFLEET_API_KEY"))
    ...  # a rollout
    traffic.stop()
    print(traffic.summary())  # "412 requests through http://10.213.47.14:30080 in 61.0 s: 412 answered 200"
"""

from __future__ import annotations

import collections
import json
import threading
import time
import urllib.error
import urllib.request

MAX_REQUESTS = 4000   # the traffic stops by itself at whichever limit comes first
MAX_SECONDS = 240


class Traffic:
    """
    ``/generate`` requests through ``url`` from ``threads`` threads, at most ``rate`` a
    second, until ``stop()`` or a limit (``max_requests``, ``max_seconds``).

    + url: the gateway's (or router's, or one server's) base URL
    + api_key: sent as a bearer token when given (the fleet's ``SGLFLEET_API_KEY``)
    + threads, rate, max_new_tokens: the traffic's shape

    ``outcomes`` holds each answer's status (or the error), ``sent`` each
    request's ``(time.time() when sent, outcome)``.
    """

    def __init__(self, url: str, api_key: str | None = None, threads: int = 4, max_new_tokens: int = 8,
                 rate: float = 15.0, max_requests: int = MAX_REQUESTS, max_seconds: float = MAX_SECONDS):
        self.url, self.outcomes, self.sent, self.done = url, [], [], threading.Event()
        self.pause, self.max_requests, self.max_seconds = threads / rate, max_requests, max_seconds
        self.body = json.dumps({"text": "Hello", "sampling_params": {"max_new_tokens": max_new_tokens}}).encode()
        self.headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
        self.started = time.monotonic()
        self.threads = [threading.Thread(target=self._send, daemon=True) for _ in range(threads)]
        for thread in self.threads:
            thread.start()

    def _send(self):
        while not self.done.is_set() and len(self.outcomes) < self.max_requests \
                and time.monotonic() - self.started < self.max_seconds:
            request = urllib.request.Request(f"{self.url}/generate", data=self.body, headers=self.headers)
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
        """Stop sending; wait for the answers under way; return the outcomes."""
        self.done.set()
        for thread in self.threads:
            thread.join(timeout=60)
        self.elapsed = time.monotonic() - self.started
        return self.outcomes

    def summary(self) -> str:
        """One line: how many requests, over how long, and how they were answered."""
        counts = collections.Counter(str(outcome) for outcome in self.outcomes)
        answered = ", ".join(f"{count} answered {outcome}" if outcome.isdigit() else f"{count} failed: {outcome}"
                             for outcome, count in counts.most_common())
        elapsed = getattr(self, "elapsed", time.monotonic() - self.started)
        return f"{len(self.outcomes)} requests through {self.url} in {elapsed:.1f} s: {answered or 'none sent'}"

    def failed(self) -> list:
        return [outcome for outcome in self.outcomes if outcome != 200]
