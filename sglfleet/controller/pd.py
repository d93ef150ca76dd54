"""
A PD batch's settle, as the controller runs it after the batch's decodes and prefills switched
(``sglfleet.plan.pd_units``): a failed unit's switched hosts roll back, and the first batch flips
the gateways: every worker of the old release stops being picked, then the batch's units join. A failed
group leaves the gateways, stops whole, then goes back together: three turns.

**Example:**

.. code:: python

    yield HostFunctionCommand(settled, (step, SettleTurn(units, flip=True, leader=True, workers=...)), {})
"""

from __future__ import annotations

from dataclasses import replace

from pyinfra import logger

from sglfleet.controller import router
from sglfleet.controller.outcomes import fail
from sglfleet.controller.rollout import answer, at_router, leave, roll_back
from sglfleet.host.protocol import PASSED
from sglfleet.plan.pd_units import UnitBatch, failed_units, over_budget, settle
from sglfleet.plan.rollout_steps import BatchStep, SettleTurn
from sglfleet.record import summary
from sglfleet.record.events import emit
from sglfleet.record.run import record


def _action(state, host, step: BatchStep, turn: SettleTurn) -> tuple[str, list, bool]:
    """``settle``'s action for this host, the batch's failed units, and whether it is over its budget."""
    failed = {h.name for h in state.failed_hosts}
    if step.together:  # a group's member whose gate failed is still up, to go back with its group
        failed |= set(record(state).failed)
    batch = UnitBatch("", 0, turn.units)
    over = over_budget(batch, failed, step.max_fail_percentage)
    switched = host.name in record(state).passed
    unit_failed = bool(failed & set(step.pd_unit))
    return (settle(switched, unit_failed, over, turn.flip, step.together), failed_units(batch, failed), over)


def stopped(state, host, connector_arguments, step: BatchStep):
    """Stop the host's service (``sglfleet-release stop``) before any host of its batch of groups starts: a rank
    of the old release that systemd restarted would join the new head's rendezvous, as torch checks no release."""
    said = answer(state, host, connector_arguments, step, "stop")
    if said is None:
        return False
    status, _, messages = said
    return status == PASSED or fail(state, host, f"{step.label}: not stopped: {'; '.join(messages) or status}")


def drained(state, host, connector_arguments, step: BatchStep):
    """A batch of groups leaves the gateways (their heads) before any of its hosts stops: a rank that stops
    takes its group's server down (``sglfleet.plan.multinode``)."""
    return leave(state, host, step)


def settled(state, host, connector_arguments, step: BatchStep, turn: SettleTurn, undo: bool = False):
    """Roll this host back where its unit (or the whole first batch) failed; the leader flips the gateways
    (``router.flip``: the batch's passed units join beside the old release, which then leaves). A group
    that failed leaves the gateways here, stops whole in the next turn (``halted``), then goes back together
    (``flipped``). ``undo``: a rollout's settle, where going back undoes this run's switch (``roll_back``)."""
    run = record(state)
    action, failed, over = _action(state, host, step, turn)
    if step.together:
        return action != "rollback" or _group_left(state, host, step)
    if action in ("rollback", "rollback-out"):
        why = "the batch is over its failure budget" if over else "its unit failed"
        host.log(f"{step.label}: back to the previous release: {why}", logger.warning)
        # Out of the gateways, it stays out where they serve the new release.
        back = step if action == "rollback" else replace(step, router_url=None, gateways=())
        if not roll_back(state, host, connector_arguments, replace(back, pd_unit=(), earlier=(), earlier_units=()),
                         undo):
            return False
        emit(run, "HostRolledBack", host=host.name, service=step.service,
             message=f"{step.label}: its unit rolled back ({why})")
        return True
    if turn.flip and turn.leader and not over and run.passed:
        passed = {h for unit in turn.units if unit not in failed for h in unit}
        old = sorted(url for name, url, _ in turn.workers if name not in passed)
        new = {url: dict(spec) for name, url, spec in turn.workers if name in passed}
        host.log(f"{step.label}: the gateways flip to the new release: {len(new)} workers join, then "
                 f"{len(old)} of the old release leave", logger.info)
        try:
            if step.router_url:  # sglang-router pairs by no generation: the old release leaves first
                router.stop_routing(step.router_url, old)
            for gateway in step.gateways:
                router.flip(gateway, old, new, timeout=step.gateway_timeout_s, api_key=step.gateway_api_key,
                            ca=step.gateway_ca or None, down_ok=True)
        except router.RouterError as error:
            return fail(state, host, f"{step.label}: the flip failed: {error}")
    return True


def halted(state, host, connector_arguments, step: BatchStep, turn: SettleTurn):
    """A failed group's member stops, once its head left the gateways (``settled``) with no request in flight:
    a rank that stops takes its group's server down, and every stream on it."""
    action, _, _ = _action(state, host, step, turn)
    return action != "rollback" or stopped(state, host, connector_arguments, step)


def flipped(state, host, connector_arguments, step: BatchStep, turn: SettleTurn, undo: bool = False):
    """The first batch's units join the gateways, once the old release left them; a group that failed goes
    back together, every member stopped by then (``halted``)."""
    action, _, _ = _action(state, host, step, turn)
    if step.together:
        return action != "rollback" or _group_back(state, host, connector_arguments, step, undo)
    if action != "join":
        return True
    if error := at_router(step, router.join):
        return fail(state, host, error)
    summary.verdict(record(state), host.name, f"{step.label}: joined the gateways at the flip")
    return True


def _group_left(state, host, step: BatchStep) -> bool:
    """A failed group's member leaves the gateways (its head; a rank above 0 has none), to stop whole in the next
    turn: none of its ranks goes back while another still runs the failed release, whose systemd would restart
    it into the old release's rendezvous."""
    host.log(f"{step.label}: its group failed: it leaves the gateways, stops, then goes back together",
             logger.warning)
    return leave(state, host, step)


def _group_back(state, host, connector_arguments, step: BatchStep, undo: bool) -> bool:
    """Every member of a failed group, stopped, starts its previous release at once (``rollback --together``);
    each fails the run, its group not having passed."""
    run = record(state)
    back = replace(step, drained=True, pd_unit=(), earlier=(), earlier_units=())
    if not roll_back(state, host, connector_arguments, back, undo):
        return False
    emit(run, "HostRolledBack", host=host.name, service=step.service,
         message=f"{step.label}: rolled back with its group")
    if host.name in run.failed:
        return False
    down = sorted(set(step.pd_unit) & ({h.name for h in state.failed_hosts} | set(run.failed)))
    return fail(state, host, f"{step.label}: rolled back with its group: {', '.join(down)} failed")
