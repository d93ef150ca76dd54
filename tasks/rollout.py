"""Roll out, or back, batch by batch: canary first, each batch only when the ones before kept within the failure budget."""

from dataclasses import replace

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.artifacts.temporaries import RUN_TOKEN
from sglfleet.host.protocol import lock_wait_s
from sglfleet.operations import pd as pd_ops, release, sharing, stack as stack_ops
from sglfleet.plan.pd import worker_of
from sglfleet.plan.pd_units import unit_steps
from sglfleet.plan.rollout_plan import HostRollout, RolloutPlan, plan_rollout, rebuilt
from sglfleet.run import summary
from sglfleet.run.compile_share import CacheShare
from sglfleet.run.pd import SettleTurn
from sglfleet.run.reads import peer_read
from sglfleet.run.record import record
from sglfleet.run.rollout import BatchStep


def _routers(fleet, plan) -> dict:
    """Where this host leaves and rejoins: the external router, else every gateway of the fleet."""
    config = plan.config
    gateways = () if config.router_url else tuple(url for _, url in fleet.gateways)
    if not config.router_url and not gateways:
        return {}
    return {"router_url": config.router_url, "gateways": gateways,
            # smg's one API key is the workers' own (sglfleet.plan.secrets.gateway_secrets)
            "gateway_api_key": plan.api_key if gateways else None,
            "gateway_timeout_s": config.gateway_drain_timeout_s}


def _planned(one, found) -> HostRollout:
    """What the rollout plan takes of host ``one`` (its ``HostPlan``): its read, and where it answered, each service's release."""
    if found is None:
        return HostRollout(found=None, releases={})  # its read failed: it fails alone, in its own deploy
    build = one.build(found.os.python_minor)
    return HostRollout(found=found, releases={name: release.release_id for name, release in build.releases.items()},
                       bake_s=one.config.gate_bake_s, stack_id=build.stack.id)


def _fleet_plan(fleet) -> RolloutPlan:
    """The plan of the hosts of this run's batches (``sglfleet.plan.rollout_plan``), once a run: the fleet is read once."""
    batches = tuple(batch.hosts for batch in fleet.rollout.batches)
    known = record().rollout_plans
    if batches not in known:
        known[batches] = plan_rollout(batches, {name: _planned(fleet.hosts[name], peer_read(name, fleet))
                                                for batch in batches for name in batch})
    return known[batches]


def _of(services) -> str:
    """`` of sglang-a.service, sglang-b.service`` in an operation's name, for a host of named services."""
    return "" if all(service.layout.legacy for service in services) else \
        " of " + ", ".join(service.unit for service in services)


def _service_steps(step, plan, routed: bool, shares: dict):
    """``(service, step)`` of each of the host's services in a batch: its own worker URL and its own
    compile caches' share (``_cache_shares``), one after another."""
    for service in plan.services:
        url = plan.worker_url(service)
        yield service, replace(
            step, service=service.name, cache=shares.get(service.name),
            worker_url=url if routed else None, worker_spec=tuple(worker_of(url, service.config).spec().items()))


def _retired(found, services) -> dict:
    """The services the host runs and the inventory no longer names, each with its port (None where unknown)."""
    named = {service.name for service in services}
    return {name: port for name, port in found.installed.services.items() if name not in named}


def _retired_steps(step, plan, retired: dict, routed: bool) -> tuple:
    """``step`` for each retired service: each drained at its own port, then stopped and removed."""
    return tuple(replace(step, service=name, cache=None,
                         worker_url=f"http://{plan.address}:{port}" if routed and port else None)
                 for name, port in retired.items())


def _cache_shares(fleet, plan, own: RolloutPlan, stack_id: str) -> dict:
    """How each of this host's services takes and hands on compile caches in this rollout, by service;
    {} where hosts share none. Each service shares under its own key (``Layout.compile_key``)."""
    config = plan.config
    if config.distribution != "peers" or not config.share_compile_caches:
        return {}
    later = _fleet_plan(fleet).later
    return {service: CacheShare(key=key, stack_id=stack_id, port=config.compile_share_port,
                                unit=f"sglfleet-compile-share-{RUN_TOKEN}", later=later.get((name, service), False),
                                service=service)
            for (name, service), key in own.keys.items()}


def _steps(fleet, plan, switching=None):
    """
    This run's batches in order, each with this host's step, or None where the host is not in it.

    + switching: whether a PD batch's hosts switch (``RolloutPlan``); None: they do (a rollback)
    """
    config, rollout = plan.config, fleet.rollout
    if rollout.held:
        summary.held([wave.name for wave in rollout.held], rollout.batches[-1].wave)
    whole_waves = len({batch.wave for batch in rollout.batches}) == len(rollout.batches)
    earlier: list[tuple[str, tuple[str, ...]]] = []
    # Another run's switch holds the lock through a gate, a bake and a rollback's gate.
    lock_wait = lock_wait_s(config.gate_warmup_s, config.gate_bake_s)
    routers = _routers(fleet, plan)
    if rollout.units:
        yield from _pd_steps(fleet, plan, routers, lock_wait, switching)
        return
    for batch in rollout.batches:
        label = batch.wave if whole_waves else batch.name
        yield None if plan.name not in batch.hosts else BatchStep(
            label=label,
            hosts=batch.hosts,
            earlier=tuple(earlier),
            max_fail_percentage=rollout.max_fail_percentage,
            bake_s=config.gate_bake_s,
            **routers,
            lock_wait_s=lock_wait,
            # The host tool may wait for that lock, then gate, then gate a rollback:
            # past that, the link is gone, not slow.
            timeout_s=config.gate_answer_timeout_s or lock_wait + 2 * config.gate_warmup_s + 300,
            releases_keep=config.releases_keep,
            textfile_dir=config.textfile_dir,
        )
        earlier.append((label, batch.hosts))


def _pd_steps(fleet, plan, routers: dict, lock_wait: float, switching=None):
    """
    A PD fleet's rollout (``sglfleet.plan.pd_units``): each batch's decodes, its prefills, then its settle
    in two turns (the first batch's flip: the old release leaves every gateway, then its units join),
    each with this host's ``BatchStep`` (a ``(kind, step, turn, switching)`` for a settle), or
    ``("idle", label, kind, None)`` where the host is not in it (``_pd_turn``).
    """
    config, rollout = plan.config, fleet.rollout
    roles = dict(rollout.roles)
    workers = tuple((one.name, url, tuple(worker_of(url, service.config).spec().items()))
                    for one in fleet.hosts.values() if one.name in roles for service in one.services
                    for url in [one.worker_url(service)])
    earlier_units: list[tuple[str, tuple[tuple[str, ...], ...]]] = []
    for one in unit_steps(rollout.units, roles):
        batch = one.batch
        mine = plan.name in batch.hosts and (one.kind == "settle" or roles.get(plan.name) == one.role)
        step = None if not mine else BatchStep(
            label=one.label(roles), hosts=batch.hosts, earlier_units=tuple(earlier_units),  # the budget counts units
            max_fail_percentage=rollout.max_fail_percentage, bake_s=config.gate_bake_s, **routers,
            lock_wait_s=lock_wait, timeout_s=config.gate_answer_timeout_s or lock_wait + 2 * config.gate_warmup_s + 300,
            releases_keep=config.releases_keep, textfile_dir=config.textfile_dir,
            pd_unit=batch.unit_of(plan.name), hold=one.hold)
        if not mine:
            # Every serving host has an operation at every step, a no-op where it is not in it:
            # pyinfra orders a host's operations only after its own, so without one a later
            # batch's switch could run before an earlier batch's settle (its flip).
            yield ("idle", one.label(roles), one.kind, None)
            if one.kind == "settle":
                yield ("idle", one.label(roles), "flip", None)
                earlier_units.append((batch.name, batch.units))
            continue
        if one.kind == "switch":
            yield step
            continue
        # the host's worker at the gateways, as its switch's step has it (one service a PD host)
        step = next(own for _, own in _service_steps(step, plan, bool(routers), {}))
        switches = switching is None or any(switching.restarts(name) for name in batch.hosts)
        turn = SettleTurn(units=batch.units, flip=one.flip, leader=plan.name == batch.hosts[0], workers=workers)
        yield ("settle", step, turn, switches)
        yield ("flip", step, turn, switches)
        earlier_units.append((batch.name, batch.units))


_SETTLE_NAMES = {"settle": "its units settle", "flip": "its units join at the flip"}


def _pd_turn(step: tuple, switch_name: str):
    """
    The operation, and its arguments, of a PD step's tuple: ``(kind, step, turn, switching)`` of a
    settle's turn, or ``("idle", label, kind, None)`` of a step the host is not in (named as its hosts' own).
    """
    kind, own, turn, switching = step
    if kind == "idle":
        return pd_ops.not_in_step, dict(name=f"{own}: {_SETTLE_NAMES.get(turn, switch_name)}", label=own)
    return (pd_ops.unit_settled if kind == "settle" else pd_ops.unit_flipped), dict(
        name=f"{own.label}: {_SETTLE_NAMES[kind]}", step=own, turn=turn, switching=switching)


# pyinfra orders a host's operations after its own earlier ones, then by call site and loop
# position: each host has one call site, and in a PD fleet an operation at every step
# (a no-op where it is not in it), so the batches and their settles run in order.
@deploy("Roll out")
def roll_out(fleet, plan, found):
    """
    + fleet: this run's plan (``sglfleet.plan.fleet_plan.FleetPlan``)
    + plan: the host's (``HostPlan``)
    + found: its read (``sglfleet.run.reads.read_host``): as the host was read at the start, since
      staging changes neither link nor process; a host another run holds is read again once its lock is free
    """
    if plan.is_gateway:
        return  # in no batch: the gateways restart after the serving hosts (tasks/gateway.py)
    config = plan.config
    build = plan.build(found.os.python_minor)
    # What this host's own services' steps will do, and their compile caches' keys.
    own = plan_rollout((), {plan.name: _planned(plan, found)})
    steps = list(_steps(fleet, plan, _fleet_plan(fleet) if fleet.rollout.units else None))
    routed = bool(_routers(fleet, plan))
    retired = _retired(found, plan.services)
    shares = _cache_shares(fleet, plan, own, build.stack.id)
    for step in host.loop(steps):
        if not step:
            continue
        if isinstance(step, tuple):  # a PD batch's step this host is not in, or its settle in two turns
            operation, arguments = _pd_turn(step, "serve the staged release")
        else:  # a host's services one after another in its batch, each behind its own gate: one operation
            turns = [(build.releases[service.name].release_id, one, found.services.get(service.name))
                     for service, one in _service_steps(step, plan, routed, shares)]
            operation, arguments = release.activated, dict(
                name=f"{step.label}: serve the staged release{_of(plan.services)}", release_id=turns[0][0],
                step=turns[0][1], found=turns[0][2], rebuilt=rebuilt(found), then=tuple(turns[1:]),
                retired=_retired_steps(step, plan, retired, routed))
        operation(**arguments)  # one call site: pyinfra orders the steps by loop position (_pd_steps)
    # After every batch: no later host fetches this host's compile caches any more.
    batched = any(step and not isinstance(step, tuple) for step in steps)
    later = next((share for share in shares.values() if share.later), None) if batched else None
    serving = later.unit if later and own.restarts(plan.name) else None
    if serving:
        sharing.serving_stopped(name="Compile caches no longer served to peers", unit=serving, what="compile caches")
    # A switch moves previous on, and a retired service takes its releases along: the stack of
    # one may be kept by none now. Not after a wait for another run's lock: that run most likely
    # did the switch (and its collection).
    if own.restarts(plan.name, ("switch", "restart")) or (retired and any(steps)):
        stack_ops.collected_after_rollout(name="Stacks no release keeps since the switch, collected",
                                          stack=build.stack, keep=config.stacks_keep)


@deploy("Roll back")
def roll_back(fleet, plan):
    """
    + fleet: this run's plan (``sglfleet.plan.fleet_plan.FleetPlan``)
    + plan: the host's (``HostPlan``); a rollback reads each host's releases in its own step, and shares
      no compile cache
    """
    if plan.is_gateway:
        return  # a gateway has no release to go back to
    routed = bool(_routers(fleet, plan))
    for step in host.loop(_steps(fleet, plan)):
        if not step:
            continue
        if isinstance(step, tuple):  # a PD fleet goes back unit by unit, as it rolls out, flip and all
            operation, arguments = _pd_turn(step, "back to the previous release")
        else:
            owns = [one for _, one in _service_steps(step, plan, routed, {})]
            operation, arguments = release.rolled_back, dict(
                name=f"{step.label}: back to the previous release{_of(plan.services)}", step=owns[0], then=tuple(owns[1:]))
        operation(**arguments)  # one call site, as in roll_out
