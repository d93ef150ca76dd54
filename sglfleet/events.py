"""
What a run did, kept after it printed: one JSON line per event in a log on the controller.

Each event has a fixed reason, as Argo Rollouts records its steps
(``utils/record/record.go``: ``RolloutStepCompleted``, ``RolloutAborted``, ...):

    {"time": "2026-12-01T14:02:11.204Z", "run": "5f0c2a91d3e4", "inventory": "inventory/prod.py",
     "host": "node1", "service": "sglang", "reason": "GatePassed", "from": "9c41d0e2a7b35f18",
     "to": "3f2a9c1d0b7e6a55",
     "figures": {"spec_accept_length": 2.8, "tokens": 256, ...}, "message": "gate passed on ..."}

The log is ``events.jsonl`` under ``$XDG_STATE_HOME/sglfleet/`` (default
``~/.local/state/sglfleet/``), or the inventory's ``events_file``. It is only
appended to, one ``write(2)`` a line on a descriptor opened with ``O_APPEND``,
so two runs never interleave within a line. Every secret value of the run is
replaced by ``<redacted>`` before a line is written. A dry run records nothing:
it changes nothing.

**Example:**

.. code:: python

    log = EventLog(Path("events.jsonl"), inventory="inventory/dev.py")
    log.emit("HostSwitched", host="node1", from_release="9c41d0e2", to_release="3f2a9c1d")
    read_events(Path("events.jsonl"), host="node1")  # [{"reason": "HostSwitched", ...}]
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

# The reasons a line may carry, in the order a rollout meets them.
REASONS = (
    "RunStarted",             # a converge or rollback began executing
    "BatchStarted",           # the first host of a batch began its switch
    "ServiceRetired",         # a service the inventory no longer names was drained, stopped and removed
    "CompileCachesTaken",     # before its switch, a host took an earlier host's compile caches (figures: files, bytes)
    "HostSwitched",           # current moved to the new release and the unit restarted
    "WeightsUpdated",         # the running server loaded the new release's model revision in place, no restart (figures: update_s)
    "RequestsCut",            # the old release's stop outlasted stop_timeout_s: systemd killed requests in flight (figures: cut)
    "GatePassed",             # the start-up gate passed (figures: accept length, tokens, seconds)
    "CompileCachesPacked",    # the first host of a stack, GPU and driver packed its compile caches for later ones
    "GateFailed",             # the start-up gate failed (the host is switched back)
    "BakePassed",             # the bake judged the release good (figures: TTFT, ITL p99, ...)
    "BakeFailed",             # the bake judged it worse (the host is switched back)
    "BakeInconclusive",       # no traffic during the bake; gate_on_inconclusive decides
    "HostRolledBack",         # the host serves its earlier release again
    "GatewayRestarted",       # a gateway host's sglang-gateway.service runs a new configuration and routes
    "HostFailed",             # the host failed this run (why: message)
    "BatchCompleted",         # every host of a batch is done (failed: those that did not pass)
    "FailureBudgetExceeded",  # a batch lost more than max_fail_percentage: later batches do not start
    "RolloutPaused",          # rollout_until held the later waves back
    "DriftFound",             # something on a host is no longer as sglfleet left it
    "DriftRepaired",          # the run that found it finished on that host without error
    "RolloutCompleted",       # every host the run switched passed
    "RolloutAborted",         # a host failed: the run stopped its rollout there (message: which, why)
    "RunFinished",            # the run ended (figures: passed, failed)
    "WebhookFailed",          # a notification could not be delivered (the rollout goes on)
)


def default_path(environ=os.environ) -> Path:
    """``$XDG_STATE_HOME/sglfleet/events.jsonl``, ``~/.local/state/...`` without it."""
    state = environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "sglfleet" / "events.jsonl"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class EventLog:
    """
    The run's event log: where lines go, the run's id, and what to keep out of them.

    + path: the JSON-lines file, created 0600 with its folder (0700) when missing
    + inventory: the inventory file the run was given
    + secrets: values that must never appear in a line (replaced by ``<redacted>``)
    + listeners: called with each event after it is written (webhooks); one that
      raises is reported as ``WebhookFailed`` and never stops the run
    """

    path: Path
    inventory: str
    secrets: tuple[str, ...] = ()
    listeners: list = field(default_factory=list)
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def emit(self, reason: str, host: str | None = None, from_release: str | None = None,
             to_release: str | None = None, figures: dict | None = None, message: str = "",
             service: str | None = None) -> dict:
        """Append one event; return it as written. ``service``: which of the host's services
        (``sglang`` for its one service, ``gateway`` for its gateway) a switch, verdict, rollback
        or retirement concerns; None for the host's or the run's own events."""
        if reason not in REASONS:
            raise ValueError(f"unknown event reason {reason!r}; one of {', '.join(REASONS)}")
        event = {"time": _now(), "run": self.run, "inventory": self.inventory, "host": host,
                 "service": service, "reason": reason, "from": from_release, "to": to_release,
                 "figures": figures or {}, "message": message}
        line = json.dumps(event, sort_keys=True)
        for value in self.secrets:
            line = line.replace(value, "<redacted>")
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
        event = json.loads(line)
        for listener in self.listeners:
            try:
                listener(event)
            except Exception as error:  # a notification never fails the rollout
                if reason != "WebhookFailed":
                    self.emit("WebhookFailed", host=host, message=f"{reason}: {error}")
        return event


def read_events(path: Path, since: float | None = None, host: str | None = None,
                run: str | None = None) -> list[dict]:
    """
    The log's events in order, those at or after ``since`` (epoch seconds), of
    ``host`` (its own and the run-wide ones) and of ``run``; a torn last line is skipped.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    events = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line a killed writer left half-written
        if since is not None and _epoch(event["time"]) < since:
            continue
        if host is not None and event.get("host") not in (host, None):
            continue
        if run is not None and event.get("run") != run:
            continue
        events.append(event)
    return events


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def parse_since(text: str, now: float | None = None) -> float:
    """``--since``: seconds ago with a unit (``30m``, ``2h``, ``1d``, ``45s``) or an ISO time."""
    now = time.time() if now is None else now
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].replace(".", "", 1).isdigit():
        return now - float(text[:-1]) * units[text[-1]]
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since {text!r}: give a duration (30m, 2h, 1d) or a time "
                         f"(2026-12-01T14:00:00Z)") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()
