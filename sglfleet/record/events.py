"""
This run's events, written by the rollout as it goes into the run's event log.

``sglfleet.hooks.event_log`` opens the log once pyinfra has the inventory and closes
it at exit; the controller's steps call ``emit``, ``batch_reached``, ``batch_started``,
``budget_exceeded`` and ``drift_found`` with the run's record (``sglfleet.record.run``),
which do nothing in a run that records nothing (a dry run, ``pyinfra ... exec``).

**Example:**

.. code:: python

    # a controller step, while executing
    emit(run, "GatePassed", host="node1", to_release="3f2a9c1d", figures={"tokens": 256})
"""

from __future__ import annotations

from sglfleet.record.run import RunRecord


def emit(run: RunRecord, reason: str, **fields) -> None:
    """
    Record one event of this run, when it records any (see ``EventLog.emit`` for the fields).

    + run: the run's record
    + reason: the event's reason, e.g. ``"GatePassed"``
    """
    if run.log is not None:
        run.log.emit(reason, **fields)


def batch_reached(run: RunRecord, label: str, hosts: tuple[str, ...]) -> None:
    """The run reached batch ``label`` (its first host's turn): the batch before it is complete (once)."""
    if run.log is None or any(reached == label for reached, _ in run.batches):
        return
    complete_last_batch(run)
    run.batches.append((label, hosts))


def batch_started(run: RunRecord, label: str) -> None:
    """A host of batch ``label`` begins its switch, the failure budget allowing (once a batch)."""
    if run.log is None or label in run.started:
        return
    run.started.add(label)
    hosts = next(hosts for reached, hosts in run.batches if reached == label)
    emit(run, "BatchStarted", message=f"{label}: {', '.join(hosts)}")


def budget_exceeded(run: RunRecord, label: str, figures: dict, message: str) -> None:
    """Batch ``label`` does not start: an earlier one lost more than the budget (once a batch)."""
    if label not in run.stopped:
        run.stopped.add(label)
        emit(run, "FailureBudgetExceeded", figures=figures, message=message)


def drift_found(run: RunRecord, host_name: str, kind: str, what: str, line: str) -> None:
    """
    A host no longer is as sglfleet left it (``what``, of ``kind``); repaired if the run ends well there.

    + kind: one of ``sglfleet.host.drift.KINDS``, e.g. ``"stack"``
    + what: e.g. ``"stack dev-0a24832cc36f"``
    + line: what the run said of it
    """
    run.drifted.setdefault(host_name, []).append(what)
    run.drift_kinds.setdefault(host_name, set()).add(kind)
    emit(run, "DriftFound", host=host_name, message=line)


def complete_last_batch(run: RunRecord) -> None:
    """The last batch reached is complete: say how many of its hosts passed (once it started)."""
    if not run.batches or run.batches[-1][0] not in run.started:
        return
    label, hosts = run.batches[-1]
    failed = sorted(set(hosts) & set(run.failed))
    emit(run, "BatchCompleted", figures={"hosts": len(hosts), "failed": len(failed)},
         message=f"{label}: {len(hosts) - len(failed)} of {len(hosts)} passed"
                 + (f"; failed: {', '.join(failed)}" if failed else ""))
