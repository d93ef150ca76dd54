"""
This run's event log and its webhooks: opened once pyinfra has the inventory, closed at exit.

``config.py`` hands ``record_events`` to ``after_init``. At exit the last batch is
completed, the drift a run found is marked repaired on the hosts that finished
without error, ``RunFinished`` closes the run, and each webhook gets what it has
not yet been sent, for ``DELIVERY_WAIT_S`` at most. The events themselves are
written by the controller's steps (``sglfleet.record.events``).

**Example:**

.. code:: python

    # config.py
    after_init(state, plan_before_connecting, record_events, read_on_connect)
"""

from __future__ import annotations

import atexit
import time
from pathlib import Path

import click
import gevent
import gevent.queue

from sglfleet.events import EventLog, default_path
from sglfleet.hooks.webhooks import ATTEMPTS, BACKOFF_S, TIMEOUT_S, Webhook, WebhookError
from sglfleet.plan.fleet_plan import fleet_plan
from sglfleet.plan.secrets import SecretsError, secret_values
from sglfleet.record import summary
from sglfleet.record.events import complete_last_batch, emit
from sglfleet.record.run import RunRecord, record

# The playbooks whose runs are recorded; any other (``exec``, a fact) changes no release.
PLAYBOOKS = ("deploy.py", "rollback.py")
# How long the end of a run waits for the last notifications: one event's every try.
DELIVERY_WAIT_S = ATTEMPTS * TIMEOUT_S + (2 ** (ATTEMPTS - 1) - 1) * BACKOFF_S + 1


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
                emit(self.run, "WebhookFailed", host=event.get("host"), message=f"{event['reason']}: {error}")

    def close(self, timeout_s: float) -> None:
        """Send what is queued, for ``timeout_s`` at most; record what was left unsent."""
        self.queue.put(StopIteration)
        self.sender.join(timeout=timeout_s)
        if not self.sender.ready():
            self.sender.kill()
            left = [event["reason"] for event in self.queue if event is not StopIteration]
            emit(self.run, "WebhookFailed", message=f"{self.hook.url}: the run ended before it took {len(left) + 1} "
                                                   f"events (the last: {(left or ['one being sent'])[-1]})")


BEFORE_SWITCH = ("failed before its switch (access, preflight, service, stack, patch, models or release); "
                 "the run's output says why")


def _finish(state) -> None:
    run, fleet = record(state), fleet_plan(state)
    complete_last_batch(run)
    if summary.paused(fleet):
        emit(run, "RolloutPaused", message=summary.paused(fleet))
    failed = set(summary.failed_hosts(run))
    # A host that failed in phase A (a full disk, a refused host key) never reached the rollout.
    for name in sorted({h.name for h in state.failed_hosts} - failed):
        emit(run, "HostFailed", host=name, message=BEFORE_SWITCH)
        failed.add(name)
    for host_name, things in run.drifted.items():
        if host_name not in failed:
            emit(run, "DriftRepaired", host=host_name, message="; ".join(things))
    passed = summary.passed_hosts(run)
    if failed:
        emit(run, "RolloutAborted", figures={"passed": len(passed), "failed": len(failed)},
             message="; ".join(f"{name}: {summary.failure(run, name) or BEFORE_SWITCH}" for name in sorted(failed)))
    elif passed:
        emit(run, "RolloutCompleted", figures={"passed": len(passed)},
             message=f"{len(passed)} passed: {', '.join(passed)}")
    emit(run, "RunFinished", figures={"passed": len(passed), "failed": len(failed)},
         message="; ".join(line.removeprefix("--> ") for line in summary.lines(run, fleet)
                           if not line.startswith("-->   ")) or "nothing to switch")
    deadline = time.monotonic() + DELIVERY_WAIT_S
    for outbox in run.outboxes:
        outbox.close(max(0.0, deadline - time.monotonic()))


def record_events(state, inventory) -> None:
    """
    Open this run's event log once pyinfra has built the inventory (``--data``
    applied), for a deploy or rollback that executes; emit ``RunStarted``.
    A hook of ``after_init`` (``sglfleet.hooks.init``).

    + state: ``pyinfra.state`` as ``config.py`` sees it
    + inventory: the inventory ``State.init`` was given
    """
    context = click.get_current_context(silent=True)
    params = context.params if context is not None else {}
    playbooks = [Path(name).name for name in params.get("operations") or ()]
    if params.get("dry") or not any(name in PLAYBOOKS for name in playbooks):
        return
    _open(state, inventory, str(params.get("inventory")), playbooks)


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
    emit(run, "RunStarted", figures={"hosts": len(targets)},
         message=f"{' '.join(playbooks)} on {', '.join(host.name for host in targets)}")
    atexit.register(_finish, state)
