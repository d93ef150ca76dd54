"""
What one run learns and reports, kept in one ``RunRecord`` on pyinfra's ``state``:
the summary's outcomes, the event log and what it has said, the drift found, the
compile caches offered, each host's read and the wheels fetched. A run is one ``state``,
so its record lives and ends with it; nothing of it sits in a module.

Nothing finds it through a context variable: ``config.py``'s hooks make it with the plan,
``deploy.py`` hands it to the tasks that need it, and pyinfra hands ``state`` to the
controller's steps (``sglfleet.controller``), which take it from there with ``record(state)``.
``summary`` and ``events`` in this package read and write it, given it as their first argument.

**Example:**

.. code:: python

    record(state).failed["node2"]   # "gate failed on release 3f2a9c1d0b7e6a55: ..."
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
    + verdicts: host -> its gate and bake verdicts, in order (``summary.verdict``)
    + log: the event log, where this run records events (``sglfleet.hooks.event_log``)
    + batches: the batches reached, in order: (label, hosts)
    + started: the batches that started
    + stopped: the batches the failure budget kept from starting
    + drifted: host -> what drifted (``events.drift_found``)
    + outboxes: one per webhook: events not yet POSTed, in order
    + drift_kinds: host -> the kinds of drift found there (``events.drift_found``)
    + offers: compile-cache key -> the archive packed in this run and who serves it (``compile_share``)
    + reads: host -> the greenlet of its one read (``sglfleet.controller.reads.read_host``)
    + wheels: (a stack's id, the packages asked for or None for all) -> those files in the controller's
      wheelhouse (``sglfleet.controller.wheels.host_wheels``)
    + rollout_plans: a rollout's batches -> what each host's steps will do, as the reads say
      (``sglfleet.plan.rollout_plan``, ``tasks/rollout.py``)
    """

    passed: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
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


def record(state: State) -> RunRecord:
    """
    The record of the run ``state`` is, made on first use.

    + state: pyinfra's state of the run, as pyinfra hands it to a hook or a ``FunctionCommand``

    **Example:**

    .. code:: python

        run = record(state)   # deploy.py, once; then passed on
    """
    found = getattr(state, "sglfleet_record", None)
    if found is None:
        found = state.sglfleet_record = RunRecord()
    return found
