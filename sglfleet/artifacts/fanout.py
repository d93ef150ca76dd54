"""
Files fanned out across the fleet, so they cross the controller's uplink about
once, not once per host.

Hosts take turns in rounds that double: round 0 is one host, which gets what
it lacks from the controller; in each later round, twice as many hosts fetch
what they lack from every host of the rounds before, with ``aria2c`` (several
sources a file, each file checked by sha256 on arrival), and serve it in turn.
A host that lacked nothing serves nothing (it stays a quiet converge); a host
that finds no live peer falls back to the controller. Pure but for ``Progress``.

**Example:**

.. code:: python

    rounds(["n1", "n2", "n3", "n4", "n5"])   # [["n1"], ["n2"], ["n3", "n4"], ["n5"]]
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass

from pyinfra import logger

# The host tool runs aria2c too (model files), so the two live in the host package.
from sglfleet.host.aria2 import aria2_command, aria2_input  # noqa: F401


def rounds(hosts: list[str]) -> list[list[str]]:
    """The hosts in doubling rounds: 1, 1, 2, 4, 8, ... in the order given."""
    out, start, size = [], 0, 1
    while start < len(hosts):
        out.append(hosts[start:start + size])
        start += size
        size = max(1, start)
    return out


@dataclass(frozen=True)
class Share:
    """
    One host's turn in a fan-out.

    + round: its round (0: from the controller)
    + sources: ``http://<peer>:<port>`` of every host of the earlier rounds
    + port: where this host serves once it holds the files
    + unit: the transient systemd unit of this run's file server
    + serve_s: how long the server may live at most (a killed run's ends by itself)
    + serves: whether a later round fetches from this host (not in the last round,
      nor without peers); model files heed it
    """

    round: int
    sources: tuple[str, ...]
    port: int
    unit: str
    serve_s: int = 3600
    serves: bool = True


def turns(host: str, targets: list[tuple[str, str]], distribution: str, port: int, unit: str):
    """
    The fan-out's rounds in order, each with ``host``'s turn (a ``Share``), or None where the host
    is not in it; one round of every host without peers.

    + host: the host's name
    + targets: ``(name, address)`` of the hosts this run targets, in inventory order
    + distribution: "peers" or "controller"
    + port, unit: where and as what this run's file servers serve

    **Example:**

    .. code:: python

        list(turns("n2", [("n1", "10.0.0.1"), ("n2", "10.0.0.2")], "peers", 30089, "share"))
        # [None, Share(round=1, sources=("http://10.0.0.1:30089",), ..., serves=False)]
    """
    if distribution == "controller":
        yield Share(round=0, sources=(), port=port, unit=unit, serves=False)
        return
    planned = rounds(targets)
    earlier: list[str] = []
    for number, hosts in enumerate(planned):
        yield Share(round=number, sources=tuple(earlier), port=port, unit=unit,
                    serves=number < len(planned) - 1) if host in [name for name, _ in hosts] else None
        earlier += [f"http://{address}:{port}" for _, address in hosts]


def serve(run, share: Share, folder: str, lib: str, nested: bool = False) -> tuple[bool, list[str]]:
    """
    Start the host's file server for a fan-out (``share.py`` in a transient unit that
    ends by itself after ``share.serve_s``) and wait until it listens.

    + run: runs one shell command on the host, returning pyinfra's ``(ok, output)``
    + share: the host's turn: its unit and port
    + folder: what it serves
    + lib: where the host package lives on the host (``LAYOUT.lib``)
    + nested: serve ``<org>/<name>/<revision>/<path>`` too (the model store), not only top-level files

    Returns ``(ok, stderr lines)``.
    """
    server = shlex.join([
        "systemd-run", f"--unit={share.unit}", "--collect", "--quiet", f"--property=RuntimeMaxSec={share.serve_s}",
        "/usr/bin/python3", "-I", f"{lib}/sglfleet_host/share.py", *(["--nested"] if nested else []),
        "--dir", folder, "--port", str(share.port)])
    ready = (f"bash -c 'for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/{share.port}) 2>/dev/null && exit 0; "
             "sleep 0.1; done; exit 1'")
    ok, output = run(f"{server} && {ready}")
    return ok, ([] if ok or output is None else output.stderr_lines)


def human(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1000
    return f"{size:.1f} TB"


class Progress:
    """
    Say, every ``every_s`` seconds at most, how far a long transfer to one host
    has got: bytes done, rate and what remains (one line, not one per file).

    **Example:**

    .. code:: python

        progress = Progress(host, "wheels from the controller", total_bytes)
        progress.update(done_bytes)
    """

    def __init__(self, host, what: str, total: int, every_s: float = 15.0, clock=time.monotonic):
        self.host, self.what, self.total, self.every_s, self.clock = host, what, total, every_s, clock
        self.started = self.last = clock()
        self.done = 0

    def update(self, done: int) -> None:
        self.done = done
        now = self.clock()
        if now - self.last < self.every_s:
            return
        self.last = now
        self.host.log(self.line(now), logger.info)

    def line(self, now: float) -> str:
        rate = self.done / max(now - self.started, 1e-6)
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        share = f" ({100 * self.done / self.total:.0f} %)" if self.total else ""
        eta = f"about {left:.0f} s left" if left != float("inf") else "waiting"
        return f"{self.what}: {human(self.done)} of {human(self.total)}{share}, {human(rate)}/s, {eta}"
