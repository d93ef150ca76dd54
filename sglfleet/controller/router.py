"""
Take a worker out of a router and put it back, from the controller: an external
``sglang-router`` (``router_url``) or each of the fleet's own gateways (smg).

Both speak one control plane: ``GET /workers`` lists ``{"id", "url",
"is_healthy", "load", ...}``; ``POST /workers {"url"}`` and ``DELETE
/workers/<id>`` are queued and applied in the background (202), so both calls
wait until the list shows the change. Written against sglang-router 0.3.2 and
smg 1.13.0, whose list adds a ``status`` ("ready", "draining"): seen with the
1.13.0 wheel, a ``DELETE`` marks the worker "draining" (no new request, its
``load`` counts those in flight) and removes it ``drain_settle_secs`` (5) later,
whether or not they finished; they finish on the worker, which drains them
itself on SIGTERM before it restarts. smg asks for its API key on ``/workers``
(401 without it); sglang-router 0.3.2 asks none. A worker smg is given through
``POST /workers`` does not inherit its ``--api-key`` (its backend detection got
401 from sglang without it): the body carries the worker's key, which is smg's.

**Example:**

.. code:: python

    drain("http://10.0.0.5:30000", "http://node2:30000")   # before the switch
    join("http://10.0.0.5:30000", "http://node2:30000")    # after the gate passed
    drain("http://gw1:30080", "http://node2:30000", api_key=key, down_ok=True)  # a fleet gateway
"""

from __future__ import annotations

import json
import http.client
import ssl
import time
import urllib.error
import urllib.request


class RouterError(Exception):
    """The router refused a change or did not apply it in time."""


class RouterDown(RouterError):
    """Nothing listens where the router should be: it is not running."""


# A bearer key, or keys tried in order where the router answers one 401 (sglfleet.plan.fleet_plan's
# gateway_admin_key: gateway-admin, then the one it replaced).
ApiKeys = str | tuple[str, ...] | None


class RouterConflict(RouterError):
    """The router already has the worker it was asked to add (409), listed or not yet."""


def _call(method: str, url: str, body: dict | None = None, timeout: float = 5.0, api_key: ApiKeys = None,
          ca: str | None = None):
    # A gateway-admin rotated this run: the gateways take the new key only once they restart, after
    # the serving hosts. A key they answer 401 gives way to the next (the one rotated out).
    keys = [key for key in ((api_key,) if isinstance(api_key, str) or api_key is None else api_key)] or [None]
    for number, key in enumerate(keys):
        try:
            try:
                return _call_once(method, url, body, timeout, key, ca)
            except _OtherScheme as mismatch:
                # TLS turned on or off this run: the gateways serve the old scheme until they restart, last.
                try:
                    return _call_once(method, _other_scheme(url), body, timeout, key, ca)
                except (RouterDown, _OtherScheme):
                    raise RouterError(str(mismatch)) from None
        except urllib.error.HTTPError as error:
            if error.code == 401 and number + 1 < len(keys):
                continue
            if error.code == 409:
                raise RouterConflict(f"router {url}: {method} refused: it has that worker already (409)") from None
            raise RouterError(f"router {url}: {method} failed ({error})") from None


class _OtherScheme(RouterError):
    """The router speaks the other scheme on its port: TLS where plain HTTP was asked, or the reverse."""


def _other_scheme(url: str) -> str:
    return "http://" + url[len("https://"):] if url.startswith("https://") else "https://" + url[len("http://"):]


def _context(ca: str | None) -> ssl.SSLContext | None:
    """What an https call trusts: the fleet's CAs and the operators' gateway certificates (PEM), each an anchor."""
    if not ca:
        return None
    context = ssl.create_default_context(cadata=ca)
    # An operator's gateway certificate is pinned as it is, not through the CA that issued it.
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


def _call_once(method: str, url: str, body: dict | None, timeout: float, api_key: str | None, ca: str | None = None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=_context(ca)) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError:
        raise
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            raise RouterDown(f"router {url}: {method} refused (nothing listens)") from None
        if isinstance(error.reason, ssl.SSLCertVerificationError):
            anchors = f"the fleet's {ca.count('BEGIN CERTIFICATE')} certificates" if ca else "the system's CAs"
            raise RouterError(f"router {url}: {method} refused its certificate ({error.reason.verify_message}; "
                              f"trusting {anchors})") from None
        if url.startswith("https://") and isinstance(error.reason, ssl.SSLError) \
                and error.reason.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
            raise _OtherScheme(f"router {url}: {method} failed ({error}; not plain HTTP either)") from None
        raise RouterError(f"router {url}: {method} failed ({error})") from None
    except (http.client.HTTPException, ConnectionResetError) as error:
        # A TLS server met with plain HTTP: an alert where a status line should be (rustls, smg's), or a reset.
        if url.startswith("http://"):
            raise _OtherScheme(f"router {url}: {method} failed ({error!r}; not https either)") from None
        raise RouterError(f"router {url}: {method} failed ({error!r})") from None
    except (OSError, ValueError) as error:
        raise RouterError(f"router {url}: {method} failed ({error})") from None


def workers(router_url: str, api_key: ApiKeys = None, ca: str | None = None) -> dict[str, dict]:
    """The router's workers, by URL."""
    listing = _call("GET", f"{router_url}/workers", api_key=api_key, ca=ca)
    return {worker["url"]: worker for worker in listing.get("workers", [])}


def _wait(router_url: str, done, what: str, timeout: float, api_key: ApiKeys, ca: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not done(workers(router_url, api_key, ca)):
        if time.monotonic() >= deadline:
            raise RouterError(f"router {router_url}: {what} not applied within {timeout:g} s")
        time.sleep(0.2)


def drain(router_url: str, worker_url: str, timeout: float = 60.0, api_key: ApiKeys = None, ca: str | None = None,
          down_ok: bool = False) -> None:
    """
    Remove ``worker_url`` from the router and wait until no request the router
    sent it is in flight (its ``load`` is 0) or the router let it go, then until
    the router stops listing it, so no new request reaches it.

    + router_url: the router's base URL
    + worker_url: the worker as the router knows it
    + timeout: seconds to wait for the removal
    + api_key: the router's admin key (gateway-admin for the fleet's own gateways), if it asks one
    + ca: what an https router is verified with (PEM: ``FleetPlan.trust``); None for plain http
    + down_ok: a router that is not running (nothing listens) sends the worker nothing: done
    """
    try:
        listed = workers(router_url, api_key, ca).get(worker_url)
        if listed is None:
            return
        if listed.get("status") != "draining":
            _call("DELETE", f"{router_url}/workers/{listed['id']}", api_key=api_key, ca=ca)
        _wait(router_url, lambda now: not now.get(worker_url, {}).get("load"), f"drain of {worker_url}",
              timeout, api_key, ca)
        _wait(router_url, lambda now: worker_url not in now, f"removal of {worker_url}", timeout, api_key, ca)
    except RouterDown:
        if not down_ok:
            raise


def join(router_url: str, worker_url: str, timeout: float = 60.0, api_key: ApiKeys = None, ca: str | None = None,
         down_ok: bool = False, spec: dict | None = None) -> None:
    """
    Add ``worker_url`` to the router and wait until the router lists it healthy.

    + router_url: the router's base URL
    + worker_url: the worker as the router should know it
    + timeout: seconds to wait for the router to accept it
    + api_key: the router's admin key (gateway-admin for the fleet's own gateways), if it asks one
    + down_ok: a router that is not running is not joined: it lists the worker from its
      own command line when it starts
    + spec: a PD worker's role, ``{"worker_type": "prefill", "bootstrap_port": 8998}`` or
      ``{"worker_type": "decode"}`` (``sglfleet.plan.pd.Worker.spec``): smg registers a worker
      without one as a whole server (``worker_type`` defaults to regular, smg
      ``crates/protocols/src/worker.rs`` ``WorkerSpec``), which its PD router never picks
    """
    try:
        listed = workers(router_url, api_key, ca).get(worker_url)
        if listed is not None and listed.get("status") == "draining":
            # A worker that is still leaving (a bake that failed, then a revert) leaves first.
            _wait(router_url, lambda now: worker_url not in now, f"removal of {worker_url}", timeout, api_key, ca)
            listed = None
        if listed is None:
            try:
                # No worker key in the body: smg would send it to the worker on its own calls
                # (health, loads), and the engines behind it ask for none (sglfleet.plan.secrets).
                _call("POST", f"{router_url}/workers", {"url": worker_url, **(spec or {})}, api_key=api_key, ca=ca)
            except RouterConflict:
                # smg 1.13.0 still registers it (from its command line, or a call before), unlisted
                # until its start-up job ends: seen on the local fleet. It is joining; wait for it.
                pass
        _wait(
            router_url,
            lambda now: now.get(worker_url, {}).get("is_healthy", False)
            and now[worker_url].get("status", "ready") != "draining",
            f"addition of {worker_url}",
            timeout,
            api_key,
            ca,
        )
    except RouterDown:
        if not down_ok:
            raise


def stop_routing(router_url: str, worker_urls, timeout: float = 60.0, api_key: ApiKeys = None, ca: str | None = None,
                 down_ok: bool = False) -> None:
    """
    Take every one of ``worker_urls`` out of the router at once and wait until none of them gets a new
    request (each gone or "draining"), not until their requests finish: a PD gateway's flip, where the
    old release must stop being picked before the new one joins (``sglfleet.plan.pd_units``). The
    requests in flight finish on their pair; each worker's own drain waits for them before it switches.

    + router_url: the router's base URL
    + worker_urls: the workers to take out
    + timeout: seconds to wait for the router to apply it
    + api_key: the router's API key, if it asks one
    + down_ok: a router that is not running routes nothing: done
    """
    wanted = set(worker_urls)
    try:
        for url, listed in workers(router_url, api_key, ca).items():
            if url in wanted and listed.get("status") != "draining":
                _call("DELETE", f"{router_url}/workers/{listed['id']}", api_key=api_key, ca=ca)
        _wait(router_url, lambda now: not any(url in wanted and w.get("status") != "draining" for url, w in now.items()),
              f"removal of {len(wanted)} workers", timeout, api_key, ca)
    except RouterDown:
        if not down_ok:
            raise


def _explicit_pairing(listed: dict) -> str | None:
    """The ``pairing_protocol`` a worker was given (its spec's or its label), None where smg derives one."""
    return listed.get("pairing_protocol") or (listed.get("labels") or {}).get("pairing_protocol")


def flip(router_url: str, old_urls, new: dict[str, dict], timeout: float = 60.0, api_key: ApiKeys = None, ca: str | None = None,
         down_ok: bool = False) -> None:
    """
    Move a PD gateway from one release to the next with no instant at which it has no pair to pick
    and none at which it could pair the two releases: the new release's workers join beside the old
    ones, each under its own ``pairing_protocol``, then the old prefills leave, then the old decodes.

    smg 1.13.0 refuses a request it has no pair for with a 503 its retries skip (``placement.rs:401-434``),
    and picks a prefill and a decode from one snapshot only where their ``pairing_protocol`` is equal
    (``worker/pd_pairing.rs:262-273``; one side without one falls back to comparing what it derived of
    the engines). So the old workers are first given one of their own where they lack it (the gateway's
    command line gives none), and the old prefills leave before their decodes: a prefill picked just
    before has its decode still there (``placement.rs:1021-1033``).

    + router_url: the gateway's base URL
    + old_urls: the old release's workers
    + new: the new release's workers, URL -> ``Worker.spec()`` (each with its ``pairing_protocol``)
    + timeout: seconds to wait for each change
    + api_key: the gateway's API key
    + down_ok: a gateway that is not running routes nothing: done
    """
    generations = {spec.get("pairing_protocol") for spec in new.values()}
    try:
        listing = workers(router_url, api_key, ca)
        old = {url: listing[url] for url in old_urls if url in listing and listing[url].get("status") != "draining"}
        labels = [_explicit_pairing(w) for w in old.values() if _explicit_pairing(w) not in (None, *generations)]
        label = max(set(labels), key=labels.count) if labels else f"before-{min(g or '' for g in generations)}"
        unlabelled = {url: w for url, w in old.items() if _explicit_pairing(w) != label}
        for listed in unlabelled.values():
            _call("PATCH", f"{router_url}/workers/{listed['id']}", {"labels": {"pairing_protocol": label}},
                  api_key=api_key, ca=ca)
        _wait(router_url, lambda now: all(now.get(url, {}).get("pd_pairing", label) == label for url in unlabelled),
              f"the pairing of {len(unlabelled)} workers of the old release", timeout, api_key, ca)
        for url, spec in new.items():
            join(router_url, url, timeout=timeout, api_key=api_key, ca=ca, spec=spec)
        for role in ("prefill", "decode"):
            leaving = {url for url, w in old.items() if w.get("worker_type", role) == role}
            stop_routing(router_url, leaving, timeout=timeout, api_key=api_key, ca=ca)
    except RouterDown:
        if not down_ok:
            raise
