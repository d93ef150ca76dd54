"""
The stand-in as one rank of a server over several hosts (``--nnodes``, ``--node-rank``, ``--dist-init-addr``).

What sglang 0.5.9 does, and the stand-in with it:

- **The rendezvous.** Every rank's model runner joins ``torch.distributed`` at ``tcp://<dist_init_addr>``
  before it loads the model (``srt/model_executor/model_runner.py:776-777``, 804-811): rank 0 holds the TCP
  store on that port and waits for every other rank; the others connect, retrying, until ``--dist-timeout``
  (None: torch's default for the nccl backend, 10 minutes; ``srt/distributed/parallel_state.py:1561-1572``,
  ``model_runner.py:753``), when rank 0 fails with ``DistStoreError: Timed out after 601 seconds waiting
  for clients. 1/2 clients joined.`` Here rank 0 lets
  each rank in until the group is whole, then keeps the port but lets none in; a rank above 0 connects,
  retrying, until it is let in.
- **One server.** Rank 0 goes on as the whole server. A rank above 0 runs no tokenizer and no API: once its
  schedulers are ready it serves a dummy ``/health``, ``/ping`` and ``/health_generate`` that answer 200
  (``srt/entrypoints/engine.py:1040-1057``, ``srt/utils/common.py:2656-2712``), and waits on its schedulers.
- **Down together.** NCCL's collectives fail once a peer is gone: the head's scheduler crashes when a
  rank's connection drops, and a rank's when the head's does (``scheduler_crashed``).

**Example:**

.. code:: python

    group = Rendezvous.join(args, timeout_s=600)     # None on one host
    group.watch(lambda peer: crash(...))            # a peer gone takes this rank down
    serve_dummy_health(host, port)                   # a rank above 0
"""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logger = logging.getLogger("sglang.standin.multinode")

# The rendezvous' when --dist-timeout is None: sglang's backend on CUDA is nccl, and torch's default for it
# is default_pg_nccl_timeout, 10 minutes (default_pg_timeout's 30 are the other backends').
DEFAULT_TIMEOUT_S = 600.0
RETRY_S = 0.2


def _address(dist_init_addr: str) -> tuple[str, int]:
    host, _, port = dist_init_addr.rpartition(":")  # as PortArgs splits it (server_args.py:5657)
    return host.strip("[]"), int(port)


class Rendezvous:
    """One rank's links to its group: the head's to every other rank, a rank's to the head."""

    def __init__(self, rank: int, peers: dict[int, socket.socket]):
        self.rank = rank
        self.peers = peers

    @classmethod
    def join(cls, args: dict, timeout_s: float = DEFAULT_TIMEOUT_S) -> "Rendezvous | None":
        """Join the group of ``args`` (None for a server on one host); raises TimeoutError as torch does."""
        nnodes, rank = int(args.get("nnodes") or 1), int(args.get("node_rank") or 0)
        if nnodes == 1:
            return None
        host, port = _address(args["dist_init_addr"])
        started = time.monotonic()
        deadline = started + timeout_s
        return cls(rank, cls._gather(port, nnodes, started, deadline) if rank == 0
                   else {0: cls._connect(host, port, rank, deadline)})

    @staticmethod
    def _gather(port: int, nnodes: int, started: float, deadline: float) -> dict[int, socket.socket]:
        """Rank 0: hold the store on every address, as torch's TCPStore does, until every rank joined."""
        listener = socket.create_server(("", port), reuse_port=False)
        peers: dict[int, socket.socket] = {}
        try:
            while len(peers) < nnodes - 1:  # a failure closes the store: the process ends with it
                listener.settimeout(max(deadline - time.monotonic(), 0.001))
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    waited = math.ceil(time.monotonic() - started)  # torch's store says the time it waited
                    raise TimeoutError(f"Timed out after {waited} seconds waiting "
                                       f"for clients. {len(peers) + 1}/{nnodes} clients joined.") from None
                conn.settimeout(5)
                hello = conn.recv(64).decode(errors="replace").split()
                if len(hello) == 2 and hello[0] == "rank" and hello[1].isdigit():
                    peers[int(hello[1])] = conn
                    logger.info(f"rank {hello[1]} joined the group ({len(peers) + 1}/{nnodes})")
                else:
                    conn.close()
        except BaseException:
            listener.close()
            raise
        # The store lives as long as the process (torch's TCPStore server), but the group is whole: a late
        # rank (of another start) is let in to no group, and retries until its own head's store is up.
        threading.Thread(target=Rendezvous._refuse_late, args=(listener,), name="store", daemon=True).start()
        for conn in peers.values():
            conn.settimeout(None)
            conn.sendall(b"go\n")
        return peers

    @staticmethod
    def _refuse_late(listener: socket.socket) -> None:
        listener.settimeout(None)
        while True:
            conn, _ = listener.accept()
            conn.close()

    @staticmethod
    def _connect(host: str, port: int, rank: int, deadline: float) -> socket.socket:
        """A rank above 0: connect to the head's store, retrying, until it lets this rank in."""
        while True:
            try:
                conn = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.001))
                conn.sendall(f"rank {rank}\n".encode())
                conn.settimeout(max(deadline - time.monotonic(), 0.001))
                if conn.recv(16).startswith(b"go"):
                    conn.settimeout(None)
                    return conn
                conn.close()
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise TimeoutError(f"The client socket has timed out while trying to connect to ({host}, {port})")
            time.sleep(RETRY_S)

    def watch(self, lost) -> None:
        """Call ``lost(rank)`` once a peer's connection ends (its process died, or its host)."""
        for rank, conn in self.peers.items():
            threading.Thread(target=self._wait, args=(rank, conn, lost), name=f"rank-{rank}", daemon=True).start()

    @staticmethod
    def _wait(rank: int, conn: socket.socket, lost) -> None:
        try:
            while conn.recv(64):
                pass
        except OSError:
            pass
        lost(rank)


class _DummyHealth(BaseHTTPRequestHandler):
    """launch_dummy_health_check_server's routes, GET only: each answers 200 with an empty body; FastAPI
    answers another method there 405, and any other path 404."""

    ROUTES = ("/health", "/ping", "/health_generate")

    def _answer(self, found: int):
        status = found if self.path.split("?")[0] in self.ROUTES else 404
        body = b"" if status == 200 else json.dumps({"detail": HTTPStatus(status).phrase}).encode()
        self.send_response(status)
        if body:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._answer(200)

    def do_POST(self):
        self._answer(405)

    def log_message(self, *args):  # uvicorn runs it with log_level="warning"
        pass


def serve_dummy_health(host: str, port: int) -> ThreadingHTTPServer:
    """A rank above 0's only listener, in a daemon thread, as 0.5.9 starts it (``common.py:2684-2708``)."""
    server = ThreadingHTTPServer((host, port), _DummyHealth)
    threading.Thread(target=server.serve_forever, name="health-check-server", daemon=True).start()
    logger.info(f"Dummy health check server started in background thread at {host}:{port}")
    return server
