"""
What one run learns and reports, kept in one ``RunRecord`` on pyinfra's ``state``:
the summary's outcomes, the event log and what it has said, the drift found, the
compile caches offered, each host's read and the wheels fetched. A run is one ``state``,
so its record lives and ends with it; nothing of it sits in a module.

``summary``, ``recording``, ``diffs``, ``compile_share``, ``reads`` and ``wheels`` read and
write it through ``record()``; ``fail`` fails a host and records why.

**Example:**

.. code:: python

    record(state).failed["node2"]   # "gate failed on release 3f2a9c1d0b7e6a55: ..."
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyinfra.context import ctx_state

if TYPE_CHECKING:
    from pyinfra.api import State

    from sglfleet.events import EventLog


@dataclass
class Offer:
    """Compile caches packed in this run: the archive's sha256 and size, and who serves it (``compile_share``)."""

    sha256: str
    size: int
    sources: list[str] = field(default_factory=list)


@dataclass
class RunRecord:
    """
    One run's record.

    + passed: host -> what it serves now (``summary.passed``)
    + failed: host -> why it failed, the first reason (``summary.failed``)
    + held: what ``rollout_until`` held back, one line or none (``summary.held``)
    + verdicts: host -> its gate and bake verdicts, in order (``summary.verdict``)
    + log: the event log, where this run records events (``recording.record_events``)
    + batches: the batches reached, in order: (label, hosts)
    + started: the batches that started
    + stopped: the batches the failure budget kept from starting
    + drifted: host -> what drifted (``recording.drift_found``)
    + outboxes: one per webhook: events not yet POSTed, in order
    + drift_kinds: host -> the kinds of drift found there (``diffs.report_drift``)
    + offers: compile-cache key -> the archive packed in this run and who serves it (``compile_share``)
    + reads: host -> the greenlet of its one read (``reads.read_host``)
    + wheels: (a stack's id, the packages asked for or None for all) -> those files in the controller's
      wheelhouse (``wheels.host_wheels``)
    + rollout_plans: a rollout's batches -> what each host's steps will do, as the reads say
      (``sglfleet.plan.rollout_plan``, ``tasks/rollout.py``)
    """

    passed: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    held: list[str] = field(default_factory=list)
    verdicts: dict[str, list[str]] = field(default_factory=dict)
    log: EventLog | None = None
    batches: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    started: set[str] = field(default_factory=set)
    stopped: set[str] = field(default_factory=set)
    drifted: dict[str, list[str]] = field(default_factory=dict)
    outboxes: list = field(default_factory=list)
    drift_kinds: dict[str, set[str]] = field(default_factory=dict)
    offers: dict[str, Offer] = field(default_factory=dict)
    reads: dict[str, Any] = field(default_factory=dict)
    wheels: dict[tuple, dict] = field(default_factory=dict)
    rollout_plans: dict[tuple, Any] = field(default_factory=dict)


def record(state: State | None = None) -> RunRecord:
    """
    The record of the run ``state`` is, made on first use.

    + state: pyinfra's state; by default the one of the run under way (``pyinfra.context``)
    """
    state = state if state is not None else ctx_state.get()
    if state is None:
        raise RuntimeError("a run's record is kept on pyinfra's state, and no pyinfra run is under way")
    found = getattr(state, "sglfleet_record", None)
    if found is None:
        found = state.sglfleet_record = RunRecord()
    return found


def under_way() -> bool:
    """Whether a pyinfra run is under way (code may also run outside one: a test, ``sglfleet status``)."""
    return ctx_state.isset()
