"""Roll out, or back, batch by batch: canary first, each batch only when the ones before kept within the failure budget."""

from dataclasses import replace

from pyinfra import host, inventory, state
from pyinfra.api import deploy

from sglfleet.artifacts.temporaries import RUN_TOKEN
from sglfleet.host.protocol import lock_wait_s
from sglfleet.operations import pd as pd_ops, release, sharing, stack as stack_ops
from sglfleet.run import summary
from sglfleet.plan.gateway import worker_url
from sglfleet.plan.pd import worker_of
from sglfleet.plan.pd_units import unit_steps
from sglfleet.run.pd import SettleTurn
from sglfleet.plan.secrets import load_secrets
from sglfleet.plan.rollout_plan import HostRollout, RolloutPlan, plan_rollout, rebuilt
from sglfleet.run.compile_share import CacheShare
from sglfleet.run.context import (computed, fleet_gateways, fleet_rollout, host_config, host_is_gateway,
                                  host_release, host_services, host_stack, host_state, peer_state)
from sglfleet.run.rollout import BatchStep


def _routers(config) -> dict:
    """Where this host leaves and rejoins: the external router, else every gateway of the fleet."""
    gateways = () if config.router_url else tuple(url for _, url in fleet_gateways(inventory))
    if not config.router_url and not gateways:
        return {}
    return {"router_url": config.router_url, "gateways": gateways,
            # smg's one API key is the workers' own (sglfleet.plan.secrets.gateway_secrets)
            "gateway_api_key": load_secrets(config.secrets_file).values.get("SGLANG_API_KEY") if gateways else None,
            "gateway_timeout_s": config.gateway_drain_timeout_s}


def _planned(one) -> HostRollout:
    """What the rollout plan takes of host ``one``: its read, and where it answered, each service's release."""
    found = peer_state(one)
    if found is None:
        return HostRollout(found=None, releases={})  # its read failed: it fails alone, in its own deploy
    return HostRollout(found=found, releases={service.name: host_release(one, service).release_id
                                              for service in host_services(one)},
                       bake_s=host_config(one).gate_bake_s, stack_id=host_stack(one).id)


def _fleet_plan(batches: tuple[tuple[str, ...], ...]) -> RolloutPlan:
    """The plan of the hosts of ``batches`` (``sglfleet.plan.rollout_plan``), once a run: the fleet is read once."""
    known = computed(inventory).plans
    if batches not in known:
        known[batches] = plan_rollout(batches, {name: _planned(inventory.get_host(name))
                                                for batch in batches for name in batch})
    return known[batches]


def _own_plan() -> RolloutPlan:
    """This host's own plan: what its services' rollout steps will do, and their compile caches' keys."""
    return plan_rollout((), {host.name: _planned(host)})


def _of(services) -> str:
    """`` of sglang-a.service, sglang-b.service`` in an operation's name, for a host of named services."""
    return "" if all(service.layout.legacy for service in services) else \
        " of " + ", ".join(service.unit for service in services)


def _service_steps(step, services, routed: bool, shares: dict):
    """``(service, step)`` of each of the host's services in a batch: its own worker URL and its own
    compile caches' share (``_cache_shares``), one after another."""
    for service in services:
        url = worker_url(host.name, host.data.dict(), service.port)
        yield service, replace(
            step, service=service.name, cache=shares.get(service.name),
            worker_url=url if routed else None, worker_spec=tuple(worker_of(url, service.config).spec().items()))


def _retired(found, services) -> dict:
    """The services the host runs and the inventory no longer names, each with its port (None where unknown)."""
    named = {service.name for service in services}
    return {name: port for name, port in found.installed.services.items() if name not in named}


def _retired_steps(step, retired: dict, routed: bool) -> tuple:
    """``step`` for each retired service: each drained at its own port, then stopped and removed."""
    return tuple(replace(step, service=name, cache=None,
                         worker_url=worker_url(host.name, host.data.dict(), port) if routed and port else None)
                 for name, port in retired.items())


def _rollout():
    """This run's rollout, over the hosts it targets."""
    return fleet_rollout(inventory, [h.name for h in inventory if state.is_host_in_limit(h)])


def _cache_shares(config, rollout) -> dict:
    """How each of this host's services takes and hands on compile caches in this rollout, by service;
    {} where hosts share none. Each service shares under its own key (``Layout.compile_key``)."""
    if config.distribution != "peers" or not config.share_compile_caches:
        return {}
    later = _fleet_plan(tuple(batch.hosts for batch in rollout.batches)).later
    stack_id = host_stack(host).id
    return {service: CacheShare(key=key, stack_id=stack_id, port=config.compile_share_port,
                                unit=f"sglfleet-compile-share-{RUN_TOKEN}", later=later.get((name, service), False),
                                service=service)
            for (name, service), key in _own_plan().keys.items()}


def _steps(config):
    """This run's batches in order, each with this host's step, or None where the host is not in it."""
    rollout = _rollout()
    if rollout.held:
        summary.held([wave.name for wave in rollout.held], rollout.batches[-1].wave)
    whole_waves = len({batch.wave for batch in rollout.batches}) == len(rollout.batches)
    earlier: list[tuple[str, tuple[str, ...]]] = []
    # Another run's switch holds the lock through a gate, a bake and a rollback's gate.
    lock_wait = lock_wait_s(config.gate_warmup_s, config.gate_bake_s)
    routers = _routers(config)
    if rollout.units:
        yield from _pd_steps(config, rollout, routers, lock_wait)
        return
    for batch in rollout.batches:
        label = batch.wave if whole_waves else batch.name
        yield None if host.name not in batch.hosts else BatchStep(
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


def _pd_steps(config, rollout, routers: dict, lock_wait: float):
    """
    A PD fleet's rollout (``sglfleet.plan.pd_units``): each batch's decodes, its prefills, then its settle
    in two turns (the first batch's flip: the old release leaves every gateway, then its units join),
    each with this host's ``BatchStep`` (a ``(kind, step, turn, switching)`` for a settle), or
    ``("idle", label, kind, None)`` where the host is not in it (``_pd_turn``).
    """
    roles = dict(rollout.roles)
    workers = tuple((h.name, url, tuple(worker_of(url, service.config).spec().items()))
                    for h in inventory if h.name in roles for service in host_services(h)
                    for url in [worker_url(h.name, h.data.dict(), service.port)])
    earlier_units: list[tuple[str, tuple[tuple[str, ...], ...]]] = []
    plan = _fleet_plan(tuple(batch.hosts for batch in rollout.batches))
    for one in unit_steps(rollout.units, roles):
        batch = one.batch
        mine = host.name in batch.hosts and (one.kind == "settle" or roles.get(host.name) == one.role)
        step = None if not mine else BatchStep(
            label=one.label(roles), hosts=batch.hosts, earlier_units=tuple(earlier_units),  # the budget counts units
            max_fail_percentage=rollout.max_fail_percentage, bake_s=config.gate_bake_s, **routers,
            lock_wait_s=lock_wait, timeout_s=config.gate_answer_timeout_s or lock_wait + 2 * config.gate_warmup_s + 300,
            releases_keep=config.releases_keep, textfile_dir=config.textfile_dir,
            pd_unit=batch.unit_of(host.name), hold=one.hold)
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
        step = next(own for _, own in _service_steps(step, host_services(host), bool(routers), {}))
        switching = any(plan.restarts(name) for name in batch.hosts)
        turn = SettleTurn(units=batch.units, flip=one.flip, leader=host.name == batch.hosts[0], workers=workers)
        yield ("settle", step, turn, switching)
        yield ("flip", step, turn, switching)
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
def roll_out():
    if host_is_gateway(host):
        return  # in no batch: the gateways restart after the serving hosts (tasks/gateway.py)
    # As the host was read at the start: staging changes neither link nor process, and a
    # host another run holds is read again once its lock is free.
    found = host_state(host)
    config = host_config(host)
    steps = list(_steps(config))
    services = host_services(host)
    routed = bool(_routers(config))
    retired = _retired(found, services)
    shares = _cache_shares(config, _rollout())
    for step in host.loop(steps):
        if not step:
            continue
        if isinstance(step, tuple):  # a PD batch's step this host is not in, or its settle in two turns
            operation, arguments = _pd_turn(step, "serve the staged release")
        else:  # a host's services one after another in its batch, each behind its own gate: one operation
            turns = [(host_release(host, service).release_id, own, found.services.get(service.name))
                     for service, own in _service_steps(step, services, routed, shares)]
            operation, arguments = release.activated, dict(
                name=f"{step.label}: serve the staged release{_of(services)}", release_id=turns[0][0],
                step=turns[0][1], found=turns[0][2], rebuilt=rebuilt(found), then=tuple(turns[1:]),
                retired=_retired_steps(step, retired, routed))
        operation(**arguments)  # one call site: pyinfra orders the steps by loop position (_pd_steps)
    # After every batch: no later host fetches this host's compile caches any more.
    own = _own_plan()
    batched = any(step and not isinstance(step, tuple) for step in steps)
    later = next((share for share in shares.values() if share.later), None) if batched else None
    serving = later.unit if later and own.restarts(host.name) else None
    if serving:
        sharing.serving_stopped(name="Compile caches no longer served to peers", unit=serving, what="compile caches")
    # A switch moves previous on, and a retired service takes its releases along: the stack of
    # one may be kept by none now. Not after a wait for another run's lock: that run most likely
    # did the switch (and its collection).
    if own.restarts(host.name, ("switch", "restart")) or (retired and any(steps)):
        stack_ops.collected_after_rollout(name="Stacks no release keeps since the switch, collected",
                                          stack=host_stack(host), keep=config.stacks_keep)


@deploy("Roll back")
def roll_back():
    if host_is_gateway(host):
        return  # a gateway has no release to go back to
    config = host_config(host)
    routed = bool(_routers(config))
    shares = _cache_shares(config, _rollout())  # as roll_out's steps have them; a rollback takes none
    for step in host.loop(_steps(config)):
        if not step:
            continue
        if isinstance(step, tuple):  # a PD fleet goes back unit by unit, as it rolls out, flip and all
            operation, arguments = _pd_turn(step[:3] + (True,), "back to the previous release")
        else:
            services = host_services(host)
            owns = [own for _, own in _service_steps(step, services, routed, shares)]
            operation, arguments = release.rolled_back, dict(
                name=f"{step.label}: back to the previous release{_of(services)}", step=owns[0], then=tuple(owns[1:]))
        operation(**arguments)  # one call site, as in roll_out
