"""
Each host's steps in this run's rollout, planned from the fleet's plan: one ``BatchStep`` a
batch (or a PD batch's switch, settle and flip), each service's own worker and compile-cache
share, the services it retires. Pure: ``tasks/rollout.py`` calls the operations, and
``sglfleet.controller.rollout`` runs what they yield.

**Example:**

.. code:: python

    for step in host_steps(fleet, fleet.hosts["node2"]):
        step.label if step else None   # None: node2 is not in that batch; "wave1": its batch
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sglfleet.artifacts.temporaries import RUN_TOKEN
from sglfleet.host.layout import LAYOUT, Layout
from sglfleet.host.protocol import lock_wait_s as held_lock_s
from sglfleet.plan.pd import worker_of
from sglfleet.plan.pd_units import unit_steps
from sglfleet.plan.rollout_plan import HostRollout, RolloutPlan
from sglfleet.plan.schema import defaults
from sglfleet.plan.weights import WeightsPolicy, speculative_refusal


@dataclass(frozen=True)
class CacheShare:
    """
    One host's part in handing on compile caches during a rollout.

    + key: its stack, GPU architecture and driver (``compile_cache.cache_key``)
    + stack_id: the stack its new release runs
    + port: where it serves the caches once it holds them
    + unit: the transient unit of its file server
    + later: a host of a later batch with the same key restarts in this run, so this
      host packs or serves the caches once it passed
    + serve_s: how long the file server may live at most
    + service: which of the host's services takes and hands on its own caches (``--service``
      for the host tool); each service of a host has its own share, under its own key
    """

    key: str
    stack_id: str
    port: int
    unit: str
    later: bool = False
    serve_s: int = 4 * 3600
    service: str = LAYOUT.service_name


@dataclass(frozen=True)
class BatchStep:
    """
    Where one host stands in one batch of a rollout.

    + label: the batch's name in messages: its wave (``"wave1"``), or with
      ``rollout_serial``, ``"wave1 batch 3"``
    + hosts: the hosts of this batch
    + earlier: ``(label, hosts)`` of each earlier batch of this run, in order
    + max_fail_percentage: an earlier batch with more failed hosts (in %) stops this one
    + bake_s: how long the batch bakes once its hosts pass their start-up gates (0: no bake)
    + router_url: the sglang-router in front of the fleet, if any
    + worker_url: this host's URL as the router (or the gateways) know it
    + gateways: without ``router_url``, the base URL of each of the fleet's gateways: the host
      leaves and rejoins them all
    + gateway_api_key: gateway-admin (then the one it replaced), for the gateways' control plane (never shown:
      not in the step's repr)
    + gateway_ca: what the controller verifies https gateways with (PEM, ``FleetPlan.trust``); "" for plain http
    + gateway_timeout_s: how long a drain or a join may take at one gateway
    + timeout_s: how long the controller waits for the host's answer to a switch
      before it reports the host lost (a link that never comes back); None waits forever
    + lock_wait_s: how long to wait for another run that holds the host's lock
    + releases_keep: once switched, old releases kept besides the current and the previous
    + textfile_dir: where the host tool writes ``sglfleet.prom`` for node_exporter
    + cache: how the host takes and hands on compile caches (``compile_share``), or None
    + service: which of the host's services this step switches (``sglang``: its one service); each
      service of a host has its own step, with its own ``worker_url``, one after another in the batch
    + worker_spec: a PD worker's role as it rejoins the gateways (``sglfleet.plan.pd.Worker.spec``)
    + weights: how the service's new release may reach the host (``sglfleet.plan.weights.WeightsPolicy``):
      loaded in place where only the weights change; None: a switch and a restart
    """

    # The inventory's keys default as in inventory/group_data/all.py, the one place defaults live.
    label: str
    hosts: tuple[str, ...] = ()
    earlier: tuple[tuple[str, tuple[str, ...]], ...] = ()
    max_fail_percentage: float = defaults()["max_fail_percentage"]
    bake_s: float = defaults()["gate_bake_s"]
    router_url: str | None = defaults()["router_url"]
    worker_url: str | None = None
    gateways: tuple[str, ...] = ()
    gateway_api_key: tuple[str, ...] | None = field(default=None, repr=False)
    gateway_ca: str = field(default="", repr=False)
    gateway_timeout_s: float = defaults()["gateway_drain_timeout_s"]
    timeout_s: float | None = None
    lock_wait_s: float = held_lock_s(defaults()["gate_warmup_s"], defaults()["gate_bake_s"])
    releases_keep: int = defaults()["releases_keep"]
    textfile_dir: str = defaults()["textfile_dir"]
    cache: CacheShare | None = None
    service: str = LAYOUT.service_name
    worker_spec: tuple[tuple[str, object], ...] = ()  # a PD worker's role at the gateways (Worker.spec())
    # A PD fleet's rollout unit (sglfleet.plan.pd_units): the host's unit, whether it stays out of the
    # gateways after its gate until its batch flips them, and each earlier batch's units.
    pd_unit: tuple[str, ...] = ()
    hold: bool = False
    earlier_units: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = ()
    weights: WeightsPolicy | None = None
    # A group's member (sglfleet.plan.multinode): it switches and rolls back with its group, never alone
    # (the host tool's --together), and its batch left the gateways in a step of its own before (drained).
    together: bool = False
    drained: bool = False

    @property
    def layout(self) -> Layout:
        """The service's layout (``Layout.for_service``): its unit, and how the host tool picks it."""
        return LAYOUT.for_service(self.service)

    @property
    def unit(self) -> str:
        """The service's unit, for messages: ``sglang-<name>.service``, or ``sglang.service``."""
        return self.layout.unit


@dataclass(frozen=True)
class SettleTurn:
    """
    One host's part in its batch's settle.

    + units: the batch's units
    + flip: the batch is the first, which flips the gateways to the new release
    + leader: this host takes the old release out of the gateways (one host a batch)
    + workers: ``(host, worker URL, Worker.spec() items)`` of every serving host's services, the fleet's
      workers, each as it joins the gateways with the release this run serves
    """

    units: tuple[tuple[str, ...], ...]
    flip: bool
    leader: bool
    workers: tuple[tuple[str, str, tuple], ...]


def routers(fleet, plan) -> dict:
    """
    Where a host leaves and rejoins: its external router (``router_url``), else every gateway of the fleet;
    ``BatchStep``'s keys, {} where it has neither.

    + fleet: this run's plan (``sglfleet.plan.fleet_plan.FleetPlan``)
    + plan: the host's (``HostPlan``)
    """
    config = plan.config
    gateways = () if config.router_url else tuple(url for _, url in fleet.gateways)
    if not config.router_url and not gateways:
        return {}
    return {"router_url": config.router_url, "gateways": gateways,
            # the gateways' control plane opens to gateway-admin alone (sglfleet.artifacts.keys)
            "gateway_api_key": plan.gateway_admin_key if gateways else None,
            "gateway_ca": fleet.trust if gateways else "",
            "gateway_timeout_s": config.gateway_drain_timeout_s}


def host_rollout(plan, found) -> HostRollout:
    """
    What the rollout plan (``sglfleet.plan.rollout_plan``) takes of a host: its read, and where it
    answered, each service's release on the stack of the host's own Python.

    + plan: the host's plan (``HostPlan``)
    + found: its read, or None where it failed: it fails alone, in its own deploy
    """
    if found is None:
        return HostRollout(found=None, releases={})
    build = plan.build(found.os.python_minor)
    return HostRollout(found=found, releases={name: release.release_id for name, release in build.releases.items()},
                       bake_s=plan.config.gate_bake_s, stack_id=build.stack.id, weights=weights_policies(plan, build))


def weights_policies(plan, build) -> dict[str, WeightsPolicy]:
    """
    How each of the host's services' new release may reach it (``sglfleet.plan.weights``), by service.

    + plan: the host's plan (``HostPlan``)
    + build: its build for the host's Python (``HostPlan.build``)
    """
    return {service.name: WeightsPolicy(plan.config.weights_update,
                                        speculative_refusal(build.stack.sglang_version, service.config.launch),
                                        build.releases[service.name].release_json)
            for service in plan.services}


def service_steps(step: BatchStep, plan, routed: bool, shares: dict):
    """
    ``(service, step)`` of each of the host's services in a batch, one after another: each with its
    own worker URL (where the host is routed) and its own compile caches' share.

    + step: the host's step in the batch
    + plan: the host's plan (``HostPlan``)
    + routed: the host leaves and rejoins a router or gateways (``routers``)
    + shares: service -> its ``CacheShare`` (``cache_shares``)
    """
    for service in plan.services:
        url = plan.worker_url(service)
        yield service, replace(
            step, service=service.name, cache=shares.get(service.name),
            worker_url=url if routed else None, worker_spec=tuple(worker_of(url, service.config).spec().items()))


def retired_services(found, services) -> dict:
    """
    The services the host runs and the inventory no longer names, each with its port (None where unknown).

    + found: the host's read (``HostState``)
    + services: the services the inventory names (``HostPlan.services``)
    """
    named = {service.name for service in services}
    return {name: port for name, port in found.installed.services.items() if name not in named}


def retired_steps(step: BatchStep, plan, retired: dict, routed: bool) -> tuple[BatchStep, ...]:
    """``step`` for each retired service (``retired_services``): each drained at its own port, then stopped and removed."""
    return tuple(replace(step, service=name, cache=None,
                         worker_url=f"http://{plan.address}:{port}" if routed and port else None)
                 for name, port in retired.items())


def cache_shares(plan, own: RolloutPlan, later: dict, stack_id: str) -> dict:
    """
    How each of the host's services takes and hands on compile caches in this rollout, by service;
    {} where hosts share none. Each service shares under its own key (``Layout.compile_key``).

    + plan: the host's plan (``HostPlan``)
    + own: the host's own rollout plan (``plan_rollout((), {host: host_rollout(...)})``): its services' keys
    + later: the fleet's ``RolloutPlan.later``: a later batch's service of the same key restarts
    + stack_id: the stack the host's releases run
    """
    config = plan.config
    if config.distribution != "peers" or not config.share_compile_caches:
        return {}
    return {service: CacheShare(key=key, stack_id=stack_id, port=config.compile_share_port,
                                unit=f"sglfleet-compile-share-{RUN_TOKEN}", later=later.get((name, service), False),
                                service=service)
            for (name, service), key in own.keys.items()}


def host_steps(fleet, plan, switching: RolloutPlan | None = None):
    """
    This run's batches in order, each with the host's step, or None where the host is not in it;
    a PD fleet's steps as ``pd_steps`` gives them.

    + fleet: this run's plan (``FleetPlan``)
    + plan: the host's (``HostPlan``)
    + switching: what every host's steps will do (``RolloutPlan``), for a PD batch's settle; None: they
      switch (a rollback)
    """
    config, rollout = plan.config, fleet.rollout
    whole_waves = len({batch.wave for batch in rollout.batches}) == len(rollout.batches)
    earlier: list[tuple[str, tuple[str, ...]]] = []
    # Another run's switch holds the lock through a gate, a bake and a rollback's gate.
    lock_wait = held_lock_s(config.gate_warmup_s, config.gate_bake_s)
    routes = routers(fleet, plan)
    if rollout.units:
        yield from pd_steps(fleet, plan, routes, lock_wait, switching)
        return
    for batch in rollout.batches:
        label = batch.wave if whole_waves else batch.name
        yield None if plan.name not in batch.hosts else BatchStep(
            label=label,
            hosts=batch.hosts,
            earlier=tuple(earlier),
            max_fail_percentage=rollout.max_fail_percentage,
            bake_s=config.gate_bake_s,
            **routes,
            lock_wait_s=lock_wait,
            timeout_s=_answer_timeout_s(config, lock_wait),
            releases_keep=config.releases_keep,
            textfile_dir=config.textfile_dir,
        )
        earlier.append((label, batch.hosts))


def _answer_timeout_s(config, lock_wait: float) -> float:
    # The host tool may wait for another run's lock, then gate, then gate a rollback:
    # past that, the link is gone, not slow.
    return config.gate_answer_timeout_s or lock_wait + 2 * config.gate_warmup_s + 300


def pd_steps(fleet, plan, routes: dict, lock_wait: float, switching: RolloutPlan | None = None):
    """
    A PD fleet's rollout (``sglfleet.plan.pd_units``): each batch's decodes, its prefills, then its settle
    in two turns (the first batch's flip: the old release leaves every gateway, then its units join),
    each with the host's ``BatchStep`` (a ``(kind, step, turn, switching)`` for a settle), or
    ``("idle", label, kind, None)`` where the host is not in it. A fleet's with groups: each batch's
    drain and its stop (``("drain", step, None, switching)``), its switch, then its settle in three turns
    (a failed group leaves the gateways, stops whole, then goes back together).
    """
    config, rollout = plan.config, fleet.rollout
    roles, group = dict(rollout.roles), dict(rollout.groups).get(plan.name, ())
    head = not group or group[0] == plan.name
    if not head:
        routes = {}  # a rank above 0 serves no API: no worker of a gateway's (sglfleet.plan.multinode)
    workers = tuple((one.name, url, tuple(worker_of(url, service.config).spec().items()))
                    for one in fleet.hosts.values() if one.name in roles for service in one.services
                    for url in [one.worker_url(service)])
    earlier_units: list[tuple[str, tuple[tuple[str, ...], ...]]] = []
    for one in unit_steps(rollout.units, roles):
        batch = one.batch
        mine = plan.name in batch.hosts and (one.kind != "switch" or roles.get(plan.name) == one.role)
        step = None if not mine else BatchStep(
            label=one.label(roles), hosts=batch.hosts, earlier_units=tuple(earlier_units),  # the budget counts units
            max_fail_percentage=rollout.max_fail_percentage, **routes,
            bake_s=config.gate_bake_s if head else 0,  # a rank above 0 has no /metrics to bake
            lock_wait_s=lock_wait, timeout_s=_answer_timeout_s(config, lock_wait),
            releases_keep=config.releases_keep, textfile_dir=config.textfile_dir,
            pd_unit=batch.unit_of(plan.name), hold=one.hold, together=bool(group),
            drained=one.kind == "switch" and not roles)
        if not mine:
            # Every serving host has an operation at every step, a no-op where it is not in it:
            # pyinfra orders a host's operations only after its own, so without one a later
            # batch's switch could run before an earlier batch's settle (its flip).
            yield ("idle", one.label(roles), one.kind, None)
            if one.kind == "settle":  # a batch of groups has no flip: a failed group stops whole, then goes back
                if not roles:
                    yield ("idle", one.label(roles), "halt", None)
                yield ("idle", one.label(roles), "flip" if roles else "back together", None)
                earlier_units.append((batch.name, batch.units))
            continue
        if one.kind == "switch":
            yield step
            continue
        # the host's worker at the gateways, as its switch's step has it (one service a PD or group host)
        step = next(own for _, own in service_steps(step, plan, bool(routes), {}))
        switches = switching is None or any(switching.restarts(name) for name in batch.hosts)
        if one.kind in ("drain", "stop"):
            # A host that keeps its release is not stopped: its operation would not start it again.
            own = switching is None or switching.restarts(plan.name)
            yield (one.kind, step, None, switches if one.kind == "drain" else own)
            continue
        turn = SettleTurn(units=batch.units, flip=one.flip, leader=plan.name == batch.hosts[0], workers=workers)
        yield ("settle", step, turn, switches)
        if not roles:  # a failed group's head drains before any rank stops: a rank's end is its group's
            yield ("halt", step, turn, switches)
        yield ("flip", step, turn, switches)
        earlier_units.append((batch.name, batch.units))
