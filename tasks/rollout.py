"""Roll out, or back, batch by batch: canary first, each batch only when the ones before kept within the failure budget."""

from dataclasses import replace

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.operations import pd as pd_ops, release, sharing, stack as stack_ops
from sglfleet.plan.rollout_plan import plan_rollout, rebuilt
from sglfleet.plan.rollout_steps import (cache_shares, host_rollout, host_steps, retired_services, retired_steps,
                                         routers, service_steps, weights_policies)
from sglfleet.controller.reads import rollout_plan

_SETTLE_NAMES = {"settle": "its units settle", "flip": "its units join at the flip",
                 "drain": "its batch leaves the gateways", "stop": "its batch stops before any host starts",
                 "halt": "a failed group stops whole", "back together": "a failed group goes back together"}


def _of(services) -> str:
    """`` of sglang-a.service, sglang-b.service`` in an operation's name, for a host of named services."""
    return "" if all(service.layout.legacy for service in services) else \
        " of " + ", ".join(service.unit for service in services)


def _pd_turn(step: tuple, switch_name: str, undo: bool = False):
    """
    The operation, and its arguments, of a PD step's tuple: ``(kind, step, turn, switching)`` of a
    settle's turn or a batch of groups' drain or stop, or ``("idle", label, kind, None)`` of a step the host
    is not in (named as its hosts' own). ``undo``: a rollout's, where a failed unit or group going back
    undoes this run's switch.
    """
    kind, own, turn, switching = step
    if kind == "idle":
        return pd_ops.not_in_step, dict(name=f"{own}: {_SETTLE_NAMES.get(turn, switch_name)}", label=own)
    if kind in ("drain", "stop"):  # a batch of groups (sglfleet.plan.multinode)
        operation = pd_ops.unit_drained if kind == "drain" else pd_ops.unit_stopped
        return operation, dict(name=f"{own.label}: {_SETTLE_NAMES[kind]}", step=own, switching=switching)
    shown = "back together" if kind == "flip" and own.together else kind  # a batch of groups has no flip
    if kind == "halt":
        return pd_ops.unit_halted, dict(name=f"{own.label}: {_SETTLE_NAMES[kind]}", step=own, turn=turn,
                                        switching=switching)
    return (pd_ops.unit_settled if kind == "settle" else pd_ops.unit_flipped), dict(
        name=f"{own.label}: {_SETTLE_NAMES[shown]}", step=own, turn=turn, switching=switching, undo=undo)


# pyinfra orders a host's operations after its own earlier ones, then by call site and loop
# position: each host has one call site, and in a PD fleet an operation at every step
# (a no-op where it is not in it), so the batches and their settles run in order.
@deploy("Roll out")
def roll_out(fleet, plan, found, run):
    """
    + fleet: this run's plan (``sglfleet.plan.fleet_plan.FleetPlan``)
    + plan: the host's (``HostPlan``)
    + found: its read (``sglfleet.controller.reads.read_host``): as the host was read at the start, since
      staging changes neither link nor process; a host another run holds is read again once its lock is free
    + run: this run's record (``sglfleet.record.run``): every host's read, where the rollout plans across them
    """
    if plan.is_gateway:
        return  # in no batch: the gateways restart after the serving hosts (tasks/gateway.py)
    build = plan.build(found.os.python_minor)
    own = plan_rollout((), {plan.name: host_rollout(plan, found)})  # what its own services' steps will do
    # Only where hosts share compile caches, or a PD batch settles, does a step need the whole fleet's.
    sharing_caches = plan.config.distribution == "peers" and plan.config.share_compile_caches
    everyone = rollout_plan(fleet, run) if fleet.rollout.units or sharing_caches else None
    steps = list(host_steps(fleet, plan, everyone))
    routed = bool(routers(fleet, plan))
    retired = retired_services(found, plan.services)
    weights = weights_policies(plan, build)  # a new revision of the model alone is loaded in place
    shares = cache_shares(plan, own, everyone.later if everyone else {}, build.stack.id)
    for step in host.loop(steps):
        if not step:
            continue
        if isinstance(step, tuple):  # a PD batch's step this host is not in, or a turn of its settle
            operation, arguments = _pd_turn(step, "serve the staged release", undo=True)
        else:  # a host's services one after another in its batch, each behind its own gate: one operation
            turns = [(build.releases[service.name].release_id, replace(one, weights=weights[service.name]),
                      found.services.get(service.name)) for service, one in service_steps(step, plan, routed, shares)]
            operation, arguments = release.activated, dict(
                name=f"{step.label}: serve the staged release{_of(plan.services)}", release_id=turns[0][0],
                step=turns[0][1], found=turns[0][2], rebuilt=rebuilt(found), then=tuple(turns[1:]),
                retired=retired_steps(step, plan, retired, routed))
        operation(**arguments)  # one call site: pyinfra orders the steps by loop position (host_steps)
    # After every batch: no later host fetches this host's compile caches any more.
    batched = any(step and not isinstance(step, tuple) for step in steps)
    later = next((share for share in shares.values() if share.later), None) if batched else None
    if later and own.restarts(plan.name):
        sharing.serving_stopped(name="Compile caches no longer served to peers", unit=later.unit, what="compile caches")
    # A switch moves previous on, and a retired service takes its releases along: the stack of
    # one may be kept by none now. Not after a wait for another run's lock: that run most likely
    # did the switch (and its collection).
    if own.restarts(plan.name, ("switch", "restart")) or (retired and any(steps)):
        stack_ops.collected_after_rollout(name="Stacks no release keeps since the switch, collected",
                                          stack=build.stack, keep=plan.config.stacks_keep)


@deploy("Roll back")
def roll_back(fleet, plan):
    """
    + fleet: this run's plan (``sglfleet.plan.fleet_plan.FleetPlan``)
    + plan: the host's (``HostPlan``); each service's releases are read in its own step, and a
      rollback shares no compile cache
    """
    if plan.is_gateway:
        return  # a gateway has no release to go back to
    routed = bool(routers(fleet, plan))
    for step in host.loop(host_steps(fleet, plan)):
        if not step:
            continue
        if isinstance(step, tuple):  # a PD fleet goes back unit by unit, as it rolls out, flip and all
            operation, arguments = _pd_turn(step, "back to the previous release")
        else:
            owns = [one for _, one in service_steps(step, plan, routed, {})]
            operation, arguments = release.rolled_back, dict(
                name=f"{step.label}: back to the previous release{_of(plan.services)}", step=owns[0], then=tuple(owns[1:]))
        operation(**arguments)  # one call site, as in roll_out
