"""
This run's events: opened once pyinfra has the inventory, written by the rollout as it goes.

``config.py`` calls ``record_events(state)``; the rollout then calls ``emit``,
``batch_reached``, ``batch_started``, ``budget_exceeded`` and ``drift_found``, which do nothing in a run that records
nothing (a dry run, ``pyinfra ... exec``, or code run outside pyinfra). At exit
the last batch is completed, the drift a run found is marked repaired on the
hosts that finished without error, and ``RunFinished`` closes the run. What the
run has recorded so far lives in its ``RunRecord`` (``sglfleet.run.record``).

**Example:**

.. code:: python

    # config.py
    record_events(state)
    # an operation's command, while executing
    emit("GatePassed", host="node1", to_release="3f2a9c1d", figures={"tokens": 256})
"""

from __future__ import annotations

import atexit
import time
from pathlib import Path

import click
import gevent
import gevent.queue
from pyinfra import logger

from sglfleet.events import EventLog, default_path
from sglfleet.plan.fleet_plan import fleet_plan
from sglfleet.plan.secrets import SecretsError, secret_values
from sglfleet.run import summary
from sglfleet.run.record import RunRecord, record, under_way
from sglfleet.run.webhooks import ATTEMPTS, BACKOFF_S, TIMEOUT_S, Webhook, WebhookError

# The playbooks whose runs are recorded; any other (``exec``, a fact) changes no release.
PLAYBOOKS = ("deploy.py", "rollback.py")
# How long the end of a run waits for the last notifications: one event's every try.
DELIVERY_WAIT_S = ATTEMPTS * TIMEOUT_S + (2 ** (ATTEMPTS - 1) - 1) * BACKOFF_S + 1


def emit(reason: str, **fields) -> None:
    """Record one event of this run, when it records any (see ``EventLog.emit`` for the fields)."""
    if under_way():
        _emit(record(), reason, **fields)


def _emit(run: RunRecord, reason: str, **fields) -> None:
    if run.log is not None:
        run.log.emit(reason, **fields)


def fail(state, host, message: str) -> bool:
    """
    Fail ``host`` for ``message``: log it as the host's error, keep it as the summary's reason
    (the first counts; later lines explain it) and record ``HostFailed`` (once a host). False,
    which fails the host from a ``FunctionCommand`` (pyinfra calls it with ``state, host``;
    the record is that of the run under way).

    **Example:**

    .. code:: python

        yield FunctionCommand(fail, ("cannot patch ...: no class KimiK25ForConditionalGeneration",), {})
    """
    host.log_styled(message, fg="red", log_func=logger.error)
    if host.name not in summary.failed_hosts():
        emit("HostFailed", host=host.name, message=message)
    summary.failed(host.name, message)
    return False


def batch_reached(label: str, hosts: tuple[str, ...]) -> None:
    """The run reached batch ``label`` (its first host's turn): the batch before it is complete (once)."""
    run = record()
    if run.log is None or any(reached == label for reached, _ in run.batches):
        return
    _complete_last_batch(run)
    run.batches.append((label, hosts))


def batch_started(label: str) -> None:
    """A host of batch ``label`` begins its switch, the failure budget allowing (once a batch)."""
    run = record()
    if run.log is None or label in run.started:
        return
    run.started.add(label)
    hosts = next(hosts for reached, hosts in run.batches if reached == label)
    _emit(run, "BatchStarted", message=f"{label}: {', '.join(hosts)}")


def budget_exceeded(label: str, figures: dict, message: str) -> None:
    """Batch ``label`` does not start: an earlier one lost more than the budget (once a batch)."""
    run = record()
    if label not in run.stopped:
        run.stopped.add(label)
        _emit(run, "FailureBudgetExceeded", figures=figures, message=message)


def drift_found(host_name: str, what: str, line: str) -> None:
    """A host no longer is as sglfleet left it (``what``); repaired if the run ends well there."""
    run = record()
    run.drifted.setdefault(host_name, []).append(what)
    _emit(run, "DriftFound", host=host_name, message=line)


class _Outbox:
    """
    One webhook's events, POSTed in the order they happened by one greenlet: a slow
    webhook never holds a rollout up, and a channel never reads "aborted" before "gate failed".
    """

    def __init__(self, hook: Webhook, run: RunRecord):
        self.hook, self.run, self.queue = hook, run, gevent.queue.Queue()
        self.sender = gevent.spawn(self._send_all)

    def listener(self, event: dict) -> None:
        if event["reason"] != "WebhookFailed":
            self.queue.put(event)

    def _send_all(self) -> None:
        for event in self.queue:
            try:
                self.hook.send(event)
            except WebhookError as error:
                _emit(self.run, "WebhookFailed", host=event.get("host"), message=f"{event['reason']}: {error}")

    def close(self, timeout_s: float) -> None:
        """Send what is queued, for ``timeout_s`` at most; record what was left unsent."""
        self.queue.put(StopIteration)
        self.sender.join(timeout=timeout_s)
        if not self.sender.ready():
            self.sender.kill()
            left = [event["reason"] for event in self.queue if event is not StopIteration]
            _emit(self.run, "WebhookFailed", message=f"{self.hook.url}: the run ended before it took {len(left) + 1} "
                                                    f"events (the last: {(left or ['one being sent'])[-1]})")


def _complete_last_batch(run: RunRecord) -> None:
    if not run.batches or run.batches[-1][0] not in run.started:
        return
    label, hosts = run.batches[-1]
    failed = sorted(set(hosts) & set(run.failed))
    _emit(run, "BatchCompleted", figures={"hosts": len(hosts), "failed": len(failed)},
          message=f"{label}: {len(hosts) - len(failed)} of {len(hosts)} passed"
                  + (f"; failed: {', '.join(failed)}" if failed else ""))


BEFORE_SWITCH = ("failed before its switch (access, preflight, service, stack, patch, models or release); "
                 "the run's output says why")


def _finish(state) -> None:
    run = record(state)
    _complete_last_batch(run)
    if summary.paused():
        _emit(run, "RolloutPaused", message=summary.paused())
    failed = set(summary.failed_hosts())
    # A host that failed in phase A (a full disk, a refused host key) never reached the rollout.
    for name in sorted({h.name for h in state.failed_hosts} - failed):
        _emit(run, "HostFailed", host=name, message=BEFORE_SWITCH)
        failed.add(name)
    for host_name, things in run.drifted.items():
        if host_name not in failed:
            _emit(run, "DriftRepaired", host=host_name, message="; ".join(things))
    passed = summary.passed_hosts()
    if failed:
        _emit(run, "RolloutAborted", figures={"passed": len(passed), "failed": len(failed)},
              message="; ".join(f"{name}: {summary.failure(name) or BEFORE_SWITCH}" for name in sorted(failed)))
    elif passed:
        _emit(run, "RolloutCompleted", figures={"passed": len(passed)},
              message=f"{len(passed)} passed: {', '.join(passed)}")
    _emit(run, "RunFinished", figures={"passed": len(passed), "failed": len(failed)},
          message="; ".join(line.removeprefix("--> ") for line in summary.lines()
                            if not line.startswith("-->   ")) or "nothing to switch")
    deadline = time.monotonic() + DELIVERY_WAIT_S
    for outbox in run.outboxes:
        outbox.close(max(0.0, deadline - time.monotonic()))


def record_events(state) -> None:
    """
    Open this run's event log once pyinfra has built the inventory (``--data``
    applied), for a deploy or rollback that executes; emit ``RunStarted``.

    + state: ``pyinfra.state`` as ``config.py`` sees it
    """
    context = click.get_current_context(silent=True)
    params = context.params if context is not None else {}
    playbooks = [Path(name).name for name in params.get("operations") or ()]
    if params.get("dry") or not any(name in PLAYBOOKS for name in playbooks):
        return
    init = state.init

    def init_then_record(inventory, *args, **kwargs):
        init(inventory, *args, **kwargs)
        _open(state, inventory, str(params.get("inventory")), playbooks)

    state.init = init_then_record


def _open(state, inventory, inventory_file: str, playbooks: list[str]) -> None:
    targets = list(inventory)
    if not targets:
        return
    # Where the log goes and whom to notify: keys every host agrees on (config.py checked it and planned the run).
    plan = fleet_plan(state)
    fleet = plan.config
    # Hosts may each have their own secrets_file: no value of any of them reaches the log.
    secrets_files = tuple(dict.fromkeys(one.config.secrets_file for one in plan.hosts.values()))
    secrets = secret_values(secrets_files)
    try:
        webhooks = [Webhook.from_config(entry.model_dump(), secrets_files) for entry in fleet.notify_webhooks]
    except SecretsError:  # the service step reports it; a webhook needing its token says so when it sends
        webhooks = [Webhook(entry.url, tuple(entry.reasons)) for entry in fleet.notify_webhooks]
    secrets += tuple(hook.secret for hook in webhooks if hook.secret)
    run = record(state)
    run.outboxes[:] = [_Outbox(hook, run) for hook in webhooks]
    run.log = EventLog(Path(fleet.events_file).expanduser() if fleet.events_file else default_path(),
                       inventory=inventory_file, secrets=secrets, listeners=[box.listener for box in run.outboxes])
    _emit(run, "RunStarted", figures={"hosts": len(targets)},
          message=f"{' '.join(playbooks)} on {', '.join(host.name for host in targets)}")
    atexit.register(_finish, state)
