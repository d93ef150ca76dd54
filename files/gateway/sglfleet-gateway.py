"""
Run SGLang's gateway (smg) as ``sglang-gateway.service``: smg's own launcher,
with its keys taken from the environment, and systemd told once it serves.

``smg launch ARGS`` is ``parse_router_args`` then ``launch_router`` (smg 1.13.0
``smg/cli.py:78-84``); this does the same with two differences:

- the keys come from the unit's root-only env file, never from argv, which every
  user of the host can read in ``/proc``: each ``SGLFLEET_CLIENT_KEY_<name>`` is
  a tenant key (``RouterArgs.tenant_api_keys``, ``(name, key)``), the data plane's
  only keys: ``/generate`` and the OpenAI routes answer 401 without one (seen
  with 1.13.0). ``SGLFLEET_GATEWAY_ADMIN_KEY`` is the one control-plane key,
  role admin (``control_plane_api_keys``, ``(id, name, key, role)``,
  ``smg/router_args.py:2654-2676``), with the audit log on: ``/workers``,
  ``/flush_cache`` and the rest answer it alone, a client key 401. No shared
  ``--api-key``: smg passes each client's own ``Authorization`` to the worker it
  picks (``header_utils.rs:296-315``), so the engines behind it ask for none and
  their network policy lets the gateways alone reach them.
- the configuration's digest (the unit's ``SGLFLEET_GATEWAY_CONFIG``) goes to
  ``$RUNTIME_DIRECTORY/config``, which lives as long as the process: a converge
  reads there what the running gateway started from. (Not from
  ``/proc/<pid>/environ``: smg's launcher calls setproctitle
  (``smg/launch_router.py:32``), which writes its title over that memory.)
- ``READY=1`` goes to systemd (``Type=notify``) once ``/health`` answers 200 and
  ``GET /workers`` lists one of its workers healthy: a restart returns when this
  gateway routes again, so the next gateway restarts only then. (Not every
  worker: smg registers a worker that does not answer in the background, and
  retries, so a host that is down would hold the gateway back; seen with 1.13.0.)
  Where every worker's host refuses the connection (up, no server listening), as
  on a new fleet whose first converge starts the gateway before any server,
  there is nothing to wait for: ``READY=1`` once smg listens, and each worker
  joins after its gate (``POST /workers``). A worker that cannot be reached at
  all (a timeout) does not count: a gateway cut off from its workers waits.
- with TLS (docs/tls.md), those looks go over https: at its own client port, trusting
  its own certificate (``--tls-cert-path``, smg's ``server_cert_path``) on loopback, and
  at the workers, trusting ``--ca-cert-paths`` (smg 1.13.0 ``router_args.py:2212-2234``,
  mapped at :2443-2447). The files are in the unit's credentials folder; no key here.

Standard library and smg only; run by the gateway stack's python.

**Example:**

.. code:: shell

    SGLFLEET_CLIENT_KEY_billing=... SGLFLEET_GATEWAY_ADMIN_KEY=... venv/bin/python sglfleet-gateway \\
        --host 0.0.0.0 --port 30080 \\
        --worker-urls http://node1:30000 http://node2:30000 --policy round_robin
"""

import json
import os
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request

from smg.launch_router import launch_router, parse_router_args

# The env file's names (sglfleet.plan.secrets.gateway_env): a client key per tenant, and the control plane's.
CLIENT_PREFIX = "SGLFLEET_CLIENT_KEY_"
GATEWAY_ADMIN = "SGLFLEET_GATEWAY_ADMIN_KEY"


def _notify(message: str) -> None:
    """One datagram to systemd's notify socket (sd_notify(3)); nothing without one."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(message.encode())


# What the readiness looks trust over https: (its own certificate, the workers' CAs), set once in main().
TRUST = {"own": None, "workers": None}


def _context(url: str):
    """None for http; for https, its own certificate on loopback, else the workers' CAs."""
    if not url.startswith("https://"):
        return None
    own = url.startswith("https://127.0.0.1:")
    context = ssl.create_default_context(cafile=TRUST["own" if own else "workers"])
    if own:  # its own listener: its own certificate pinned, whatever names it carries
        context.check_hostname = False
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


def _get(url: str, key):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=5, context=_context(url)) as response:
        return response.status, response.read()


def _answers(url: str) -> bool:
    """Whether anything answers HTTP at ``url`` (any status): a server that serves or is starting."""
    try:
        _get(f"{url}/health", None)
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def _refused(url: str) -> bool:
    """Whether ``url``'s host refuses the connection: it is up, and no server listens there yet."""
    try:
        _get(f"{url}/health", None)
    except urllib.error.URLError as error:
        return isinstance(error.reason, ConnectionRefusedError)
    except OSError:
        return False
    return False


def _ready(base: str, workers: list, key) -> bool:
    """Whether the gateway answers ``/health`` and lists one of the workers it was started with healthy."""
    try:
        status, _ = _get(f"{base}/health", None)
        if status != 200:
            return False
        _, body = _get(f"{base}/workers", key)
    except (OSError, ValueError):
        return False
    # smg 1.13.0 GET /workers: {"workers": [{"id", "url", "is_healthy", "status", "load", ...}], "total": N}
    listed = json.loads(body).get("workers", [])
    return any(worker.get("url") in workers and worker.get("is_healthy") for worker in listed)


def notify_when_ready(port: int, workers: list, key) -> None:
    """Tell systemd READY=1 once the gateway serves (the unit's TimeoutStartSec bounds the wait)."""
    base = f"{'https' if TRUST['own'] else 'http'}://127.0.0.1:{port}"
    while not _ready(base, workers, key):
        # Every worker's host up, none serving yet (a new fleet): nothing to wait for. Not where a
        # worker cannot be reached (a timeout): a gateway cut off from its workers must not pass.
        if _answers(base) and all(_refused(worker) for worker in workers):
            break
        time.sleep(0.5)
    _notify("READY=1")


def main() -> None:
    args = parse_router_args(sys.argv[1:])
    if os.environ.get("RUNTIME_DIRECTORY"):
        with open(os.path.join(os.environ["RUNTIME_DIRECTORY"], "config"), "w") as config:
            config.write(os.environ.get("SGLFLEET_GATEWAY_CONFIG", "") + "\n")
    # The keys leave the environment here: smg and its children never see them there.
    args.tenant_api_keys = [(variable[len(CLIENT_PREFIX):], key) for variable in sorted(os.environ)
                            if variable.startswith(CLIENT_PREFIX) for key in [os.environ.pop(variable)] if key]
    admin = os.environ.pop(GATEWAY_ADMIN, None)
    if admin:
        args.control_plane_api_keys = [("sglfleet", "sglfleet controller", admin, "admin")]
        args.control_plane_audit_enabled = True
    TRUST.update(own=args.server_cert_path, workers=(args.ca_cert_paths or [None])[0])
    # In PD mode the workers are its prefills (URL, bootstrap port) and decodes, not --worker-urls.
    workers = [*args.worker_urls, *(url for url, _ in args.prefill_urls or ()), *(args.decode_urls or ())]
    threading.Thread(target=notify_when_ready, args=(args.port, workers, admin), daemon=True).start()
    launch_router(args)


if __name__ == "__main__":
    main()
