"""
A host's switch, bake and rollback as the controller runs them, during the run:
the host tool's calls and their answers (``sglfleet.host.protocol``), the
router's drain and join around them, the failure budget between batches, and
each verdict logged, kept for the summary and recorded as an event.

The operations in ``sglfleet.operations.release`` decide whether a host needs one;
these functions are what they yield (``HostFunctionCommand``); pyinfra hands each the run's
``state``, whose record (``sglfleet.record.run``) they pass on. Each returns True
when the host passed, or fails it one way: ``fail`` logs why and returns False.

**Example:**

.. code:: python

    yield HostFunctionCommand(switch, (step, release_id, False, "9c41d0e2a7b35f18"), {})
"""

from __future__ import annotations

import shlex

import gevent
from pyinfra import logger
from pyinfra.api import StringCommand

from sglfleet.host.bake import describe
from sglfleet.host.layout import LAYOUT
from sglfleet.host.protocol import BAKE_FAILED, DOWN, NOT_IN_PLACE, PASSED, ROLLED_BACK, results as tool_results
from sglfleet.plan.pd_units import rejoins
from sglfleet.plan.rollout_steps import BatchStep
from sglfleet.controller import compile_share, router
from sglfleet.controller.outcomes import fail
from sglfleet.record import summary
from sglfleet.record.events import batch_reached, batch_started, budget_exceeded, emit
from sglfleet.record.run import RunRecord, record


def _who(step: BatchStep) -> str:
    """``"sglang-<name>.service "`` for one of a host's services, in what the run says; "" for its one service."""
    return "" if step.layout.legacy else f"{step.unit} "


class Lost(Exception):
    """The host did not answer: the link died, or never came back."""


def call_tool(host, connector_arguments, step: BatchStep, *args: str, extra_timeout_s: float = 0):
    """
    Run the host tool; return ``(status, results, messages)``: its exit status
    (``sglfleet.host.protocol``; None when unknown), its result records and its error lines.
    """
    # The tool's exit status tells a rolled-back host (1, serving) from a down one.
    command = StringCommand(shlex.join([LAYOUT.tool, *step.layout.tool_args, "--wait-lock", f"{step.lock_wait_s:g}",
                                        "--keep", str(step.releases_keep), "--textfile-dir", step.textfile_dir,
                                        *args]) + "; echo sglfleet-exit=$? >&2")
    timeout = step.timeout_s + extra_timeout_s if step.timeout_s else None
    try:
        # Around the whole call: a link cut before the channel opens blocks in paramiko too.
        with gevent.Timeout(timeout, TimeoutError):
            connected, output = host.run_shell_command(command, **connector_arguments)
    except TimeoutError:  # a link that never came back
        raise Lost(f"no answer within {timeout:g} s") from None
    except Exception as error:  # the session died under paramiko (power cut, reset link)
        raise Lost(f"{type(error).__name__}: {error}") from None
    lines = output.stderr_lines
    said = lines.pop().partition("=")[2] if lines and lines[-1].startswith("sglfleet-exit=") else ""
    status = int(said) if said.isdigit() else None
    if not connected and status is None:
        raise Lost("the session ended without the tool's answer")
    return status, tool_results(output.stdout_lines), lines


def lost_link(host, why: str) -> str:
    """What to say of a host whose link died during a switch: it finishes on its own."""
    return (f"lost the connection during the switch ({why}); if {host.name} is up it finishes the "
            f"switch, gate and any rollback on its own: check it, then run again")


def at_router(step: BatchStep, action) -> str | None:
    """Drain or join the host at the router, or at each of the fleet's gateways; an error message, or None."""
    role = {"spec": dict(step.worker_spec)} if action is router.join and step.worker_spec else {}
    try:
        if step.router_url:
            action(step.router_url, step.worker_url, **role)
        for gateway in step.gateways:
            # A gateway that is not running routes nothing to the host (the first converge installs it last).
            action(gateway, step.worker_url, timeout=step.gateway_timeout_s, api_key=step.gateway_api_key,
                   ca=step.gateway_ca or None, down_ok=True, **role)
    except router.RouterError as error:
        return f"{step.label}: {error}"
    return None


BAKE_REASONS = {"pass": "BakePassed", "fail": "BakeFailed", "inconclusive": "BakeInconclusive"}


def verdicts(run: RunRecord, host, step: BatchStep, results: list[dict], from_release: str | None = None) -> None:
    """Log each gate and bake verdict with its figures, keep it for the run's summary, record it as an event."""
    for result in results:
        figures = result.get("figures") or {}
        if result.get("stage") == "startup" and result.get("passed") and not result.get("already"):
            accept = (f"accept length {figures['spec_accept_length']:g}, "
                      if "spec_accept_length" in figures else "")
            line = (f"gate passed on {result['release']} ({accept}{figures.get('tokens', 0)} "
                    f"tokens in {figures.get('requests', 0)} generations, {figures.get('seconds', 0):g} s)")
            reason = "GatePassed"
        elif result.get("stage") == "startup" and result.get("passed") is False:
            emit(run, "GateFailed", host=host.name, service=step.service, from_release=from_release,
                 to_release=result["release"],
                 message=f"gate failed on release {result['release']}: {result.get('failure')}")
            continue
        elif result.get("stage") == "bake":
            line = f"bake {result['verdict']} on {result['release']} ({describe(figures)})"
            reason = BAKE_REASONS[result["verdict"]]
            figures = {**figures, "baseline": result.get("baseline")} if result.get("baseline") else figures
        else:
            continue
        line = f"{_who(step)}{line}"
        host.log(f"{step.label}: {line}", logger.info)
        summary.verdict(run, host.name, line)
        emit(run, reason, host=host.name, service=step.service, from_release=from_release,
             to_release=result["release"], figures=figures, message=line)


def over_budget(state, step: BatchStep) -> str | None:
    """Why this batch must not start: an earlier one lost more hosts than ``max_fail_percentage``; else None."""
    failed_names = {h.name for h in state.failed_hosts}
    for label, units in step.earlier_units:  # a PD fleet's budget counts units, each failed by any of its hosts
        failed = [unit for unit in units if failed_names & set(unit)]
        if failed and len(failed) * 100 > step.max_fail_percentage * len(units):
            why = (f"{step.label} not started: {len(failed)} of the {len(units)} units of {label} did not pass "
                   f"({', '.join(h for unit in failed for h in unit if h in failed_names)}), above "
                   f"max_fail_percentage {step.max_fail_percentage:g}")
            budget_exceeded(record(state), step.label, {"failed": len(failed), "units": len(units),
                                                   "max_fail_percentage": step.max_fail_percentage}, why)
            return why
    for label, hosts in step.earlier:
        failed = [name for name in hosts if name in failed_names]
        if failed and len(failed) * 100 > step.max_fail_percentage * len(hosts):
            why = (f"{step.label} not started: {', '.join(failed)} of {label} did not pass "
                   f"({len(failed)} of {len(hosts)} hosts, above max_fail_percentage {step.max_fail_percentage:g})")
            budget_exceeded(record(state), step.label, {"failed": len(failed), "hosts": len(hosts),
                                                   "max_fail_percentage": step.max_fail_percentage}, why)
            return why
    return None


def answer(state, host, connector_arguments, step: BatchStep, *args: str, extra_timeout_s: float = 0):
    """``call_tool``'s ``(status, results, messages)``, or None when the host did not answer (it is failed)."""
    try:
        return call_tool(host, connector_arguments, step, *args, extra_timeout_s=extra_timeout_s)
    except Lost as error:
        fail(state, host, lost_link(host, str(error)))
        return None


def started(state, host, step: BatchStep) -> bool:
    """Start the host's part of its batch, once every earlier batch kept within the failure budget; False: it failed."""
    run = record(state)
    batch_reached(run, step.label, step.hosts)
    why = over_budget(state, step)
    if why is None:
        batch_started(run, step.label)
        return True
    fail(state, host, why)
    return False


def leave(state, host, step: BatchStep, before=None, begun: bool = False) -> bool:
    """
    Start the host's part of its batch (``begun``: it was), call ``before`` (while it still
    serves), and drain it from the router; False when the host failed.
    """
    if not begun and not started(state, host, step):
        return False
    if before:
        before()
    if error := at_router(step, router.drain):
        return fail(state, host, f"{error}; not switched")
    return True


def drained_answer(state, host, connector_arguments, step: BatchStep, *args: str, before=None, begun: bool = False):
    """
    ``leave``, then run the host tool with ``args``: the tool's ``answer``, or None when the host
    failed before or during it. A batch of groups left in a step of its own (``step.drained``).
    """
    if step.drained:
        if before:
            before()
    elif not leave(state, host, step, before, begun):
        return None
    return answer(state, host, connector_arguments, step, *args)


def switch(state, host, connector_arguments, step: BatchStep, release_id: str, restart: bool = False,
           from_release: str | None = None, begun: bool = False):
    """
    Switch the host once every earlier batch passed, keeping the router in step and
    taking the compile caches an earlier host hands on; then bake. Returns False to fail this host.
    ``begun``: its batch has started it already (an update in place that turned out not to be one).
    """
    run = record(state)
    if step.pd_unit and (down := sorted({h.name for h in state.failed_hosts} & set(step.pd_unit))):
        # A unit moves together: its prefills do not switch once one of its decodes failed (decode first).
        host.log(f"{step.label}: not switched: {', '.join(down)} of its unit failed; serves on", logger.warning)
        return True
    took: list[bool] = []
    activate = ("activate", release_id, *(["--restart"] if restart else []), *(["--together"] if step.together else []))
    said = drained_answer(state, host, connector_arguments, step, *activate, before=lambda: took.append(
        compile_share.take(run, host, connector_arguments, step.label, step.cache, step.timeout_s)), begun=begun)
    if said is not None and said[0] in (ROLLED_BACK, DOWN) and any(took) and not step.together:
        # Caches from a peer that do not load must not cost the release: once more, cold.
        verdicts(run, host, step, said[1], from_release)
        compile_share.drop(run, host, connector_arguments, step.label, step.cache, step.timeout_s)
        said = answer(state, host, connector_arguments, step, *activate)
    if said is None:
        return False
    status, results, messages = said
    passed = status == PASSED
    if any(result.get("stage") == "startup" and not result.get("already") for result in results):
        switched = f"{_who(step)}switched {from_release or 'nothing'} -> {release_id}, restarted"
        emit(run, "HostSwitched", host=host.name, service=step.service, from_release=from_release,
             to_release=release_id, message=f"{step.label}: {switched}")
    for result in results:
        if result.get("stage") == "startup" and result.get("cut_at_stop") is not None:
            cut = f"{result['cut_at_stop']} requests in flight cut: the stop of {from_release or 'its earlier release'} " \
                  f"outlasted stop_timeout_s, and systemd killed them"
            emit(run, "RequestsCut", host=host.name, service=step.service, from_release=from_release,
                 to_release=release_id, figures={"cut": result["cut_at_stop"]}, message=f"{step.label}: {cut}")
            summary.verdict(run, host.name, cut)
    verdicts(run, host, step, results, from_release)
    if passed:  # still out of the router: nothing compiles while it packs
        compile_share.hand_on(run, host, connector_arguments, step.label, step.cache, any(took), step.timeout_s)
    if status == ROLLED_BACK:  # the gate failed, and the host serves its earlier release again
        emit(run, "HostRolledBack", host=host.name, service=step.service, from_release=release_id,
             to_release=from_release,
             message=f"{step.label}: back to {from_release or 'its earlier release'} after its gate failed")
    unknown = lost_link(host, f"exit status {'unknown' if status is None else status}")
    for line in () if passed else messages or [unknown]:
        fail(state, host, line)
    if step.together and not passed and status is not None:
        # A group's member does not go back alone: its group does, together, at the batch's settle.
        host.log(f"{step.label}: its group rolls back together at the settle", logger.warning)
        return True
    # Rolled back, the host serves its earlier release again: it rejoins either way; in a PD fleet, only
    # where the gateways serve the release it serves now (sglfleet.plan.pd_units.rejoins).
    rejoin = (rejoins(status == PASSED, status == ROLLED_BACK, step.hold) if step.pd_unit
              else status in (PASSED, ROLLED_BACK))
    if rejoin and (error := at_router(step, router.join)):
        return fail(state, host, error)
    if not passed:
        return False
    if step.bake_s:
        return bake(state, host, connector_arguments, step, release_id)
    summary.passed(run, host.name, f"{_who(step)}serves {release_id}")
    return True


def update(state, host, connector_arguments, step: BatchStep, release_id: str, from_release: str | None = None):
    """
    Load the release's model revision into the host's running server once every earlier batch passed
    (``sglfleet-release update``): no drain, since sglang finishes the requests in flight on the old
    weights and holds the new ones until it has loaded (``sglfleet.host.weights``); then bake. A host
    where the change is not weights-only after all is switched as any other. Returns False to fail it.
    """
    run = record(state)
    if not started(state, host, step):
        return False
    said = answer(state, host, connector_arguments, step, "update", release_id)
    if said is None:
        return False
    status, results, messages = said
    if status == NOT_IN_PLACE:  # what the host holds says otherwise: restart it, drained, as any switch
        for line in messages:
            host.log(f"{step.label}: {line}", logger.warning)
        return switch(state, host, connector_arguments, step, release_id, False, from_release, begun=True)
    for result in results:
        if result.get("stage") == "startup" and result.get("in_place") and result.get("passed") \
                and "update_s" in (result.get("figures") or {}):
            updated = (f"{_who(step)}weights of {release_id} loaded in place over {from_release or 'nothing'} "
                       f"in {result['figures']['update_s']:g} s, no restart")
            emit(run, "WeightsUpdated", host=host.name, service=step.service, from_release=from_release,
                 to_release=release_id, figures={"update_s": result["figures"]["update_s"]},
                 message=f"{step.label}: {updated}")
    verdicts(run, host, step, results, from_release)
    if status == ROLLED_BACK:
        emit(run, "HostRolledBack", host=host.name, service=step.service, from_release=release_id,
             to_release=from_release,
             message=f"{step.label}: back on {from_release or 'its earlier release'} after its update in place failed")
    if status != PASSED:
        for line in messages or [lost_link(host, f"exit status {'unknown' if status is None else status}")]:
            fail(state, host, line)
        return False
    if step.bake_s:
        return bake(state, host, connector_arguments, step, release_id)
    summary.passed(run, host.name, f"{_who(step)}serves {release_id}, loaded in place")
    return True


def bake(state, host, connector_arguments, step: BatchStep, release_id: str):
    """Bake the release the host serves; revert it (drained) when the bake fails it, or, a group's head, leave
    that to its group's settle (``sglfleet.controller.pd.settled``)."""
    run = record(state)
    said = answer(state, host, connector_arguments, step, "bake", release_id, extra_timeout_s=step.bake_s)
    if said is None:
        return False
    status, results, messages = said
    verdicts(run, host, step, results)
    if status == PASSED:
        summary.passed(run, host.name, f"{_who(step)}serves {release_id}, baked")
        return True
    for line in messages:
        fail(state, host, line)
    if status != BAKE_FAILED:  # 6: another run switched the host meanwhile; else lost
        return False
    if step.together:  # a group's head: reverted alone, it would leave its ranks on the failed release
        host.log(f"{step.label}: its group rolls back together at the settle", logger.warning)
        return True
    # The bake failed the release: back to what served before, out of the router meanwhile.
    if error := at_router(step, router.drain):
        return fail(state, host, f"{error}; {release_id} still serves")
    said = answer(state, host, connector_arguments, step, "revert", release_id)
    if said is None:
        return False
    status, _, messages = said
    if status == ROLLED_BACK:
        emit(run, "HostRolledBack", host=host.name, service=step.service, from_release=release_id,
             message=f"{step.label}: back to its earlier release after its bake failed")
    for line in messages:
        fail(state, host, line)
    if status in (PASSED, ROLLED_BACK) and (error := at_router(step, router.join)):
        fail(state, host, error)
    return False


def relink(state, host, connector_arguments, step: BatchStep, release_id: str):
    """Point current back at ``release_id``, which the host's process serves (no restart)."""
    said = answer(state, host, connector_arguments, step, "relink", release_id)
    if said is None:
        return False
    status, _, messages = said
    for line in () if status == PASSED else messages:
        fail(state, host, line)
    return status == PASSED


def roll_back(state, host, connector_arguments, step: BatchStep, undo: bool = False):
    """
    Switch the host back to its previous release behind its gate, in its batch's turn, drained meanwhile.
    ``undo``: it goes back from the release this run switched it to (a failed unit's or group's), and
    previous points where it did before that switch (``sglfleet-release rollback --undo``).
    """
    run = record(state)
    if step.pd_unit and (down := sorted({h.name for h in state.failed_hosts} & set(step.pd_unit))):
        host.log(f"{step.label}: not rolled back: {', '.join(down)} of its unit failed; serves on", logger.warning)
        return True
    said = drained_answer(state, host, connector_arguments, step, "rollback", *(["--together"] if step.together else []),
                          *(["--undo"] if undo else []))
    if said is None:
        return False
    status, results, messages = said
    for line in () if status == PASSED else messages:
        fail(state, host, line)
    # In a PD fleet a rollback is a rollout to the previous release, unit by unit (sglfleet.plan.pd_units).
    rejoin = (rejoins(status == PASSED, status == ROLLED_BACK, step.hold) if step.pd_unit
              else status in (PASSED, ROLLED_BACK))
    if rejoin and (error := at_router(step, router.join)):
        return fail(state, host, error)
    if status == PASSED:
        back = results[-1]["release"] if results else None
        summary.passed(run, host.name, f"{_who(step)}rolled back to {back or 'its previous release'}")
        emit(run, "HostRolledBack", host=host.name, service=step.service, to_release=back,
             message=f"{step.label}: rolled back to {back or 'its previous release'}")
    return status == PASSED


def retire(state, host, connector_arguments, step: BatchStep):
    """
    Stop and remove a service the inventory no longer names, in its host's batch and
    before the host's other services switch (it may hold their GPUs or port): out of
    the router first, so no request is cut.
    """
    run = record(state)
    said = drained_answer(state, host, connector_arguments, step, "retire")
    if said is None:
        return False
    status, _, messages = said
    if status != PASSED:
        for line in messages or [lost_link(host, f"exit status {'unknown' if status is None else status}")]:
            fail(state, host, line)
        return False
    summary.passed(run, host.name, f"{step.unit} retired")
    emit(run, "ServiceRetired", host=host.name, service=step.service,
         message=f"{step.label}: {step.unit} stopped and removed (the inventory no longer names it)")
    return True
