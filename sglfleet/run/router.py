"""
Take a worker out of an ``sglang-router`` and put it back, from the controller.

Written against sglang-router 0.3.2's control plane: ``GET /workers`` lists
``{"id", "url", "is_healthy", "load"}``; ``POST /workers {"url"}`` and
``DELETE /workers/<id>`` are queued and applied in the background, so both
calls wait until the router's list shows the change.

**Example:**

.. code:: python

    drain("http://10.0.0.5:30000", "http://node2:30000")   # before the switch
    join("http://10.0.0.5:30000", "http://node2:30000")    # after the gate passed
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request


class RouterError(Exception):
    """The router refused a change or did not apply it in time."""


def _call(method: str, url: str, body: dict | None = None, timeout: float = 5.0):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise RouterError(f"router {url}: {method} failed ({error})") from None


def workers(router_url: str) -> dict[str, dict]:
    """The router's workers, by URL."""
    listing = _call("GET", f"{router_url}/workers")
    return {worker["url"]: worker for worker in listing.get("workers", [])}


def _wait(router_url: str, done, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done(workers(router_url)):
        if time.monotonic() >= deadline:
            raise RouterError(f"router {router_url}: {what} not applied within {timeout:g} s")
        time.sleep(0.2)


def drain(router_url: str, worker_url: str, timeout: float = 60.0) -> None:
    """
    Remove ``worker_url`` from the router and wait until the router stops
    listing it, so no new request reaches it. Requests already in flight
    finish on the worker: the host waits for them before it restarts.

    + router_url: the router's base URL
    + worker_url: the worker as the router knows it
    + timeout: seconds to wait for the removal
    """
    listed = workers(router_url).get(worker_url)
    if listed is None:
        return
    _call("DELETE", f"{router_url}/workers/{listed['id']}")
    _wait(router_url, lambda now: worker_url not in now, f"removal of {worker_url}", timeout)


def join(router_url: str, worker_url: str, timeout: float = 60.0) -> None:
    """
    Add ``worker_url`` to the router and wait until the router lists it healthy.

    + router_url: the router's base URL
    + worker_url: the worker as the router should know it
    + timeout: seconds to wait for the router to accept it
    """
    if worker_url not in workers(router_url):
        _call("POST", f"{router_url}/workers", {"url": worker_url})
    _wait(
        router_url,
        lambda now: now.get(worker_url, {}).get("is_healthy", False),
        f"addition of {worker_url}",
        timeout,
    )
