"""
The stand-in's prefill and decode roles, as sglang 0.5.9 runs ``--disaggregation-mode prefill|decode``.

- **The prefill's bootstrap server** (``srt/disaggregation/common/conn.py:503-646``,
  ``CommonKVBootstrapServer``), started with the server on ``--host`` and
  ``--disaggregation-bootstrap-port`` (8998; ``managers/disagg_service.py:23-31``):
  ``PUT /route`` registers a prefill rank (its JSON: role, attn_tp_size, ..., page_size),
  ``GET /route?engine_rank&target_dp_group&target_pp_rank`` answers its rank's
  ``{"rank_ip", "rank_port"}`` (``-1, -1, -1``: the prefill's parallel info), 400 "Missing
  inputs for bootstrap server." without them; ``GET /health`` answers "OK".
- **Every request needs its bootstrap fields.** smg adds ``bootstrap_host`` (the prefill's
  host), ``bootstrap_port`` and a random ``bootstrap_room`` to the body it sends to both of
  the pair (smg ``pd_router.rs:217-276``); a request without ``bootstrap_room`` is refused
  by either role with 400 and ``{"error": {"message": "Invalid request: Disaggregated
  request received without bootstrap room id. req.rid=..."}}`` (``managers/scheduler.py:
  1533-1541``, through ``tokenizer_manager.py:1152-1160`` and ``http_server.py:1636-1639``).
  A missing ``bootstrap_port`` is the server's own (scheduler.py:1497-1499).
- **The prefill** computes one token (``disaggregation/prefill.py:249-251``) and holds the
  room's KV cache for the decode.
- **The decode** takes the room's KV cache from the prefill named by ``bootstrap_host``
  and ``bootstrap_port`` before it decodes. Here the "KV" is the prefill's release
  fingerprint, fetched over HTTP from the prefill's bootstrap server (``GET
  /sglfleet/kv?room=``, the stand-in's own route, waiting for the room to reach the
  prefill). sglang's decode instead asks the bootstrap server for the prefill rank's
  address (``GET /route``, common/conn.py:420-470) and the backend (mooncake, nixl)
  writes the KV pages straight from the prefill's GPU memory into the decode's, over
  RDMA; nothing of the cache crosses HTTP.
- ``bootstrap_host`` ``2.2.2.2`` (``FAKE_BOOTSTRAP_HOST``, disaggregation/utils.py:23) is
  sglang's own solo path: the prefill sends nothing and the decode's fake receiver takes
  nothing (prefill.py:215, decode.py:349-353). The server's warm-up uses it
  (http_server.py:1770-1790), and so does sglfleet's gate, which checks a server alone.
- **A skewed pair.** A decode whose prefill carries another release fingerprint refuses
  the request (500) and counts it in ``sglfleet_standin_pd_mismatched_pairs_total``: a
  real decode of another release (model, stack, KV-shaping flags) would read a cache it
  cannot use, or fail. The fingerprint is the stack's sglang version and every launch flag
  but those that are a server's own (``ROLE_FLAGS``), as ``sglfleet.plan.pd`` holds the
  lint to.

**Example:**

.. code:: python

    disagg = Disaggregation.start(args, argv, "0.5.9", registry)   # None for a whole server
    refused = disagg.admit(body)                          # (status, payload) or None
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logger = logging.getLogger("sglang.standin")

FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # disaggregation/utils.py:23
# A server's own flags, which a prefill and a decode of one release do not share (sglfleet.plan.pd.ROLE_FLAGS).
ROLE_FLAGS = ("--disaggregation-mode", "--disaggregation-bootstrap-port", "--disaggregation-ib-device",
              "--host", "--port", "--tp-size", "--tp", "--mem-fraction-static", "--cuda-graph-max-bs",
              "--disaggregation-decode-tp", "--config")
KV_WAIT_S = 30.0  # how long a decode waits for its room to reach the prefill (smg sends both at once)


def release_fingerprint(argv: list[str], version: str) -> str:
    """
    The release a prefill and a decode must share: the stack's sglang and the launch flags but a server's own.
    (Not the stack's id: that is one a Python version, and a fleet's hosts may run different ones.)
    """
    kept, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        name, sep, _ = token.partition("=")
        if name in ROLE_FLAGS:
            skip = not sep
            continue
        kept.append(token)
    return hashlib.sha256(json.dumps([version, kept]).encode()).hexdigest()[:12]


def missing_room(rid) -> tuple[int, dict]:
    """sglang's 400 for a request without a bootstrap room (scheduler.py:1535-1541)."""
    return 400, {"error": {"message": "Invalid request: Disaggregated request received without bootstrap room id. "
                                      f"req.rid='{rid}'"}}


class Disaggregation:
    """One server's role: the prefill's rooms and bootstrap server, or the decode's transfers."""

    def __init__(self, mode: str, args: dict, fingerprint: str, registry=None):
        self.mode, self.args, self.fingerprint = mode, args, fingerprint
        self.rooms: dict[int, str] = {}  # the prefill's rooms -> the fingerprint of the KV it holds
        self.room_arrived = threading.Condition()
        self.table: dict = {}  # PUT /route registrations, as prefill_port_table
        self.server = None
        self.counters = {}
        if registry is not None:
            role = registry.gauge("sglfleet_standin_pd_role", "This server's PD role (1 for the role it has).")
            role.set({"role": mode}, 1)
            if mode == "prefill":
                self.counters["sent"] = registry.counter(
                    "sglfleet_standin_pd_kv_sent_total", "Rooms whose KV cache a decode took from this prefill.")
                self.counters["rooms"] = registry.counter(
                    "sglfleet_standin_pd_prefill_rooms_total", "Requests this prefill computed for a decode.")
            else:
                self.counters["received"] = registry.counter(
                    "sglfleet_standin_pd_kv_received_total", "Rooms whose KV cache this decode took from a prefill.")
                self.counters["mismatched"] = registry.counter(
                    "sglfleet_standin_pd_mismatched_pairs_total",
                    "Requests refused: their prefill runs another release (model, stack or KV-shaping flags).")
                self.counters["failed"] = registry.counter(
                    "sglfleet_standin_pd_transfer_failures_total", "Requests whose KV cache never arrived.")
            for counter in self.counters.values():
                counter.inc({}, 0)  # present from the start: a scrape reads 0, not a missing series

    @classmethod
    def start(cls, args: dict, argv: list[str], version: str, registry=None) -> "Disaggregation | None":
        """The server's role, its bootstrap server listening where it is a prefill; None for a whole server."""
        mode = args.get("disaggregation_mode") or "null"
        if mode == "null":
            return None
        disagg = cls(mode, args, release_fingerprint(argv, version), registry)
        logger.info(f"PD {mode}: transfer backend {args.get('disaggregation_transfer_backend')} "
                    f"(stand-in: KV over HTTP), release fingerprint {disagg.fingerprint}")
        if mode == "prefill":
            disagg.serve_bootstrap(args.get("host") or "127.0.0.1", int(args.get("disaggregation_bootstrap_port") or 8998))
        return disagg

    def _count(self, name: str) -> None:
        if name in self.counters:
            self.counters[name].inc({})

    # -- every request ---------------------------------------------------------

    def warmup_fields(self) -> dict:
        """What the server's own warm-up adds in PD mode (http_server.py:1779-1785): the solo path."""
        return {"bootstrap_host": FAKE_BOOTSTRAP_HOST, "bootstrap_room": 0}

    def admit(self, body: dict) -> tuple[int, dict] | None:
        """
        Before a request is scheduled: ``(status, payload)`` to refuse it with, or None to serve it
        (a decode has then taken its KV cache). A prefill computes one token of it.
        """
        room, host = body.get("bootstrap_room"), body.get("bootstrap_host")
        if isinstance(room, list):  # a batch: each of its requests has its own room
            room, host = (room[0] if room else None), (host[0] if isinstance(host, list) and host else host)
        if room is None:
            return missing_room(body.get("rid"))
        if self.mode == "prefill":
            sampling = body.setdefault("sampling_params", {}) if isinstance(body.get("sampling_params", {}), dict) else {}
            sampling["max_new_tokens"] = 1  # prefill.py:249-251
            if "max_tokens" in body:
                body["max_tokens"] = 1
            if "max_completion_tokens" in body:
                body["max_completion_tokens"] = 1
            if host != FAKE_BOOTSTRAP_HOST:
                with self.room_arrived:
                    self.rooms[int(room)] = self.fingerprint
                    self.room_arrived.notify_all()
                self._count("rooms")
            return None
        if host in (None, FAKE_BOOTSTRAP_HOST):  # decode.py:349-353: the fake receiver
            return None
        port = body.get("bootstrap_port")
        port = port[0] if isinstance(port, list) else port
        port = port or self.args.get("disaggregation_bootstrap_port") or 8998  # scheduler.py:1497-1499
        return self.take_kv(host, int(port), int(room))

    def take_kv(self, host: str, port: int, room: int) -> tuple[int, dict] | None:
        """The decode's transfer: the room's KV cache from its prefill, refused where the releases differ."""
        url = f"http://{host}:{port}/sglfleet/kv?room={room}"
        try:
            with urllib.request.urlopen(url, timeout=KV_WAIT_S + 5) as response:
                kv = json.loads(response.read())
        except (OSError, ValueError) as error:
            self._count("failed")
            logger.error(f"Decode transfer failed for request bootstrap_room={room} from {host}:{port}: {error}")
            return 500, {"error": {"message": f"KV transfer from {host}:{port} failed for bootstrap_room {room}: "
                                              f"{error}"}}
        if kv.get("fingerprint") != self.fingerprint:
            self._count("mismatched")
            logger.error(f"Refused bootstrap_room={room}: the prefill {host}:{port} runs release "
                         f"{kv.get('fingerprint')}, this decode {self.fingerprint}")
            return 500, {"error": {"message": f"KV cache of bootstrap_room {room} comes from a prefill of another "
                                              f"release ({kv.get('fingerprint')}; this decode: {self.fingerprint})"}}
        self._count("received")
        return None

    # -- the prefill's bootstrap server ---------------------------------------------

    def kv_of(self, room: int) -> str | None:
        """The fingerprint of the room's KV cache once the room reached this prefill, waiting for it; else None."""
        deadline = time.monotonic() + KV_WAIT_S
        with self.room_arrived:
            while room not in self.rooms:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.room_arrived.wait(left)
            self._count("sent")
            return self.rooms.pop(room)

    def serve_bootstrap(self, host: str, port: int) -> None:
        disagg = self

        class Bootstrap(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):
                pass  # aiohttp's access log is off below DEBUG (common/conn.py:640-641)

            def reply(self, status: int, text: str, json_body=None) -> None:
                body = json.dumps(json_body).encode() if json_body is not None else text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if json_body is not None else "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                path, _, query = self.path.partition("?")
                params = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
                if path == "/health":
                    return self.reply(200, "OK")
                if path == "/sglfleet/kv" and params.get("room", "").lstrip("-").isdigit():
                    fingerprint = disagg.kv_of(int(params["room"]))
                    if fingerprint is None:
                        return self.reply(404, "Bootstrap info not Found")
                    return self.reply(200, "", {"fingerprint": fingerprint})
                if path != "/route":
                    return self.reply(404, "Not Found")
                rank, group, pp = (params.get(key) for key in ("engine_rank", "target_dp_group", "target_pp_rank"))
                if not rank or not group or not pp:
                    return self.reply(400, "Missing inputs for bootstrap server.")
                if (rank, group, pp) == ("-1", "-1", "-1"):
                    args = disagg.args
                    return self.reply(200, "", {"prefill_attn_tp_size": args.get("tp_size") or 1, "prefill_dp_size": 1,
                                                "prefill_pp_size": 1, "prefill_page_size": args.get("page_size") or 1})
                info = disagg.table.get((int(group), int(rank), int(pp)))
                if info is None:
                    return self.reply(404, "Bootstrap info not Found")
                return self.reply(200, "", info)

            def do_PUT(self):
                if self.path.partition("?")[0] != "/route":
                    return self.reply(405, "Method not allowed")
                data = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if data.get("role") == "Prefill":
                    key = (data.get("attn_dp_rank", 0), data.get("attn_tp_rank", 0), data.get("pp_rank", 0))
                    disagg.table[key] = {"rank_ip": data.get("rank_ip"), "rank_port": int(data.get("rank_port", 0))}
                return self.reply(200, "OK")

        server = ThreadingHTTPServer((host, port), Bootstrap)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="bootstrap", daemon=True).start()
        self.server = server
        # The prefill's own rank registers itself (common/conn.py:101-140): the stand-in has one.
        self.table[(0, 0, 0)] = {"rank_ip": host, "rank_port": random.randint(20000, 60000)}
        logger.info(f"Bootstrap server listening on http://{host}:{port} (/route, /health)")
