"""
One plan of the whole fleet, built once before anything connects: each host's services,
stack, releases, rendered files and the rollout's batches, and the keys the fleet shares.
Frozen: tasks and operations take what they need of it as arguments.

``config.py``'s hook builds it from the validated inventory (``sglfleet.plan.validation``)
and keeps it on pyinfra's ``state``; ``fleet_plan(state)`` hands it to ``deploy.py``.
What depends on the host itself (its ``python3`` picks which of its stack's builds it runs)
is planned for every Python the stack serves: ``HostPlan.build`` takes the one the read found.

**Example:**

.. code:: python

    fleet = plan_fleet(inventory, validate_inventory(inventory), targets=["node1", "node2"])
    plan = fleet.hosts["node1"]
    plan.build("3.11").releases["sglang"].release_id   # "3f2a9c1d0b7e6a55"
    fleet.rollout.batches[0].hosts                     # ("node1",): the canary
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cache

from sglfleet.artifacts.models import StagedModel, staged_models
from sglfleet.artifacts.patchsets import PatchSet, digest as patch_sets_digest, files as patch_set_files, \
    for_version, load_sets, resolve_sets_dir
from sglfleet.artifacts.stacks import Stack, load_stack
from sglfleet.host.layout import LAYOUT
from sglfleet.host.stacks import PATCHED
from sglfleet.plan.fleet import FleetConfig
from sglfleet.plan.gateway import address, gateway_url, is_gateway, serving_groups, worker_url
from sglfleet.plan.multinode import groups_of, is_head
from sglfleet.plan.network import Policy, fleet_view, host_policy
from sglfleet.plan.host_files import NO_TLS, GatewayFiles, ServiceFiles, gateway_files, service_files, tool_files
from sglfleet.plan.pd import Worker, role_of, worker_of
from sglfleet.plan.pd_units import UnitBatch, plan_units
from sglfleet.plan.release import Release, render_release
from sglfleet.plan.secrets import load_secrets
from sglfleet.plan.services import Service, host_services
from sglfleet.plan.settings import HostConfig
from sglfleet.plan.templates import TEMPLATES
from sglfleet.plan.tls import HostTls, controller_trust, plan_tls
from sglfleet.plan.waves import Batch, Wave, limit_waves, plan_batches, plan_waves, until


@dataclass(frozen=True)
class Build:
    """
    What a host runs on one of its stack's Pythons.

    + stack: the stack built for that Python (``Stack.for_python``)
    + releases: each service's release on it, by service name (none on a gateway host)
    + gateway: a gateway host's files, whose unit runs this stack's python (None on a serving host)
    """

    stack: Stack
    releases: dict[str, Release] = field(default_factory=dict)
    gateway: GatewayFiles | None = None


@dataclass(frozen=True)
class HostPlan:
    """
    One host as this run plans it.

    + name, groups: as the inventory gives them
    + config: its validated ``HostConfig``
    + is_gateway: in the group ``gateways``: it runs the gateway and nothing else
    + address: where it is reached (its ``ssh_hostname``, else its name)
    + services: its sglang services in inventory order; ``[sglang]`` where it names none
    + stack: the stack the inventory gives it (``gateway_stack`` on a gateway host), every Python it serves
    + builds: python -> its ``Build`` (empty for a host this run does not target)
    + service_files: service name -> its unit and env file
    + tool_files: remote path -> (content, mode) of the host tool, and the stand-in where it runs
    + patch_sets: the sets its stack's sglang gets, in order, less ``patch_sets_skip``
    + patch_files: the files of sglang the patch step visits, as the wheel names them
    + models: the pinned models its services load, each once (the store is the host's)
    + gateway_admin_key: gateway-admin, the key of the gateways' control plane, then the one it replaced, which
      a gateway not restarted yet still holds; None without one (never shown: not in the repr)
    + policy: its nftables policy (``sglfleet.plan.network``), or None where ``firewall`` is off
    """

    name: str
    config: HostConfig
    groups: tuple[str, ...] = ()
    is_gateway: bool = False
    address: str = ""
    services: tuple[Service, ...] = ()
    stack: Stack | None = None
    builds: dict[str, Build] = field(default_factory=dict)
    service_files: dict[str, ServiceFiles] = field(default_factory=dict)
    tool_files: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    patch_sets: tuple[PatchSet, ...] = ()
    patch_files: tuple[str, ...] = ()
    models: tuple[StagedModel, ...] = ()
    gateway_admin_key: tuple[str, ...] | None = field(default=None, repr=False)
    policy: Policy | None = None

    def build(self, python: str | None) -> Build:
        """
        The build for the host's ``python3`` (``OsInfo.python_minor``, as the read found it); a Python
        its stack does not serve gets the stack's first (preflight refuses that host before anything changes).
        """
        return self.builds.get(python) or self.builds[self.stack.pythons[0]]

    def worker_url(self, service: Service) -> str:
        """One of its services' URL, as the gateways and an external router know it."""
        return worker_url(self.name, {"ssh_hostname": self.address}, service.port, tls=self.config.worker_tls)


@dataclass(frozen=True)
class Rollout:
    """
    What this run rolls out: its batches in order, the failure budget, and the
    waves ``rollout_until`` holds back.

    + batches: the batches up to ``rollout_until``
    + max_fail_percentage: a batch with more failed hosts (in %) stops the run
    + held: the waves after ``rollout_until``, not touched this run
    + units: a PD fleet's units, or a fleet's with groups, batch by batch (the batches hold the same hosts)
    + roles: each serving host's PD role, for a PD fleet
    + groups: each group host's group, in rank order (``sglfleet.plan.multinode``), for a fleet with groups
    """

    batches: tuple[Batch, ...]
    max_fail_percentage: float
    held: tuple[Wave, ...]
    units: tuple[UnitBatch, ...] = ()
    roles: tuple[tuple[str, str], ...] = ()
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class FleetPlan:
    """
    The whole fleet as this run plans it.

    + config: the keys every host shares (``FleetConfig``)
    + hosts: every host of the inventory, by name, in inventory order
    + targets: the hosts this run acts on (after ``--limit``), in inventory order
    + waves: the wave plan of the serving hosts, narrowed to the targets
    + rollout: this run's batches
    + workers: every serving host's services as the gateways know them, in inventory order
    + gateways: ``(name, base URL)`` of every gateway, whatever ``--limit`` targets
    + trust: what the controller trusts when it calls gateways and workers over https (PEM: the fleet
      CAs, the operators' gateway certificates); "" where nothing serves TLS
    """

    config: FleetConfig
    hosts: dict[str, HostPlan]
    targets: tuple[str, ...]
    waves: tuple[Wave, ...]
    rollout: Rollout
    workers: tuple[Worker, ...] = ()
    gateways: tuple[tuple[str, str], ...] = ()
    trust: str = ""

    def targeted(self, gateways: bool | None = None) -> list[HostPlan]:
        """
        The hosts this run acts on, in inventory order.

        + gateways: True for the gateways alone, False for the serving hosts alone, None for both
        """
        return [self.hosts[name] for name in self.targets if gateways is None or self.hosts[name].is_gateway == gateways]


class _ReadOnce:
    """
    What the plan reads of the controller's files, each once a fleet: stacks, secrets, patch sets,
    host tools; and each release rendered once for the hosts whose service settings are equal.
    """

    def __init__(self):
        self.stack = cache(lambda name, allow_unhashed: load_stack(name, allow_unhashed=allow_unhashed))
        self.secrets = cache(load_secrets)
        self.sets = cache(lambda patch_sets_dir: load_sets(resolve_sets_dir(patch_sets_dir)))
        self.tools = cache(tool_files)
        self._releases: dict[tuple, Release] = {}

    def release(self, service: Service, stack: Stack, patch_digest: str, service_digest: str) -> Release:
        """``render_release`` of ``service`` on the stack: a fleet's hosts mostly share their settings."""
        # A config holds lists, so it does not hash: its JSON names it.
        key = (service.config.model_dump_json(), stack.id, patch_digest, service_digest, service.layout,
               service.gpus)
        if key not in self._releases:
            self._releases[key] = render_release(service.config, stack.id, patch_digest, service_digest=service_digest,
                                                 layout=service.layout, gpus=service.gpus,
                                                 sglang_version=stack.sglang_version)
        return self._releases[key]


def _host_plan(name: str, groups: tuple[str, ...], data: dict, config: HostConfig, workers: list[Worker],
               read: "_ReadOnce", targeted: bool, policy: Policy | None = None, gateways: bool = False,
               tls: HostTls = NO_TLS) -> HostPlan:
    """One host's plan; its files and builds only where the run targets it (``tls``: its TLS, where targeted)."""
    gateway = is_gateway(groups)
    stack = read.stack(config.gateway_stack if gateway else config.stack, config.allow_unhashed_lock)
    secrets = read.secrets(config.secrets_file)
    plan = HostPlan(name=name, config=config, groups=groups, is_gateway=gateway, address=address(name, data),
                    stack=stack, gateway_admin_key=secrets.gateway_admin_keys, policy=policy)
    if gateway:
        if not targeted:
            return plan
        builds = {python: Build(stack=built, gateway=gateway_files(config, secrets, workers, built.venv + "/bin/python",
                                                                   tls))
                  for python in stack.pythons for built in [stack.for_python(python)]}
        return replace(plan, builds=builds)
    services = tuple(host_services(config, LAYOUT))
    sets = tuple(one for one in for_version(read.sets(config.patch_sets_dir), stack.sglang_version)
                 if one.name not in config.patch_sets_skip)
    plan = replace(plan, services=services, patch_sets=sets,
                   # kimi_k25.py always (its KimiK25 methods came before patch sets), then each file any
                   # set of the folder changes, whether this stack gets that set or not: a set skipped,
                   # or not for the stack's version, leaves no block behind.
                   patch_files=tuple(dict.fromkeys([PATCHED, *patch_set_files(read.sets(config.patch_sets_dir))])),
                   models=tuple({model.dir: model for service in services
                                 for model in staged_models(service.config)}.values()))
    if not targeted:
        return plan
    behind_gateways = bool(gateways) and not config.router_url
    files = {service.name: service_files(service, secrets, behind_gateways, tls) for service in services}
    patch_digest = patch_sets_digest(list(sets))

    def releases(built: Stack) -> dict[str, Release]:
        return {service.name: read.release(service, built, patch_digest, files[service.name].digest)
                for service in services}

    return replace(plan, service_files=files, tool_files=read.tools(config.server),
                   builds={python: Build(stack=built, releases=releases(built))
                           for python in stack.pythons for built in [stack.for_python(python)]})


def _rollout(waves: list[Wave], fleet: FleetConfig, roles: dict[str, str],
             groups: dict[str, tuple[str, ...]] | None = None) -> Rollout:
    now = until(waves, fleet.rollout_until)
    # Percentages count every targeted host, as Ansible's serial counts the play's: a pause
    # holds batches back but sizes none differently.
    planned = plan_batches(waves, fleet.rollout_serial)
    started = {wave.name for wave in now}
    # A PD fleet's rollout_serial counts units (sglfleet.plan.pd_units), and its batches are whole units;
    # so does a fleet's with groups, where a group is a unit.
    units = tuple(one for one in plan_units(waves, fleet.rollout_serial, roles, groups) if one.wave in started) \
        if roles or groups else ()
    if units:
        planned = [Batch(one.wave, one.number, one.hosts) for one in units]
    return Rollout(batches=tuple(batch for batch in planned if batch.wave in started),
                   max_fail_percentage=fleet.max_fail_percentage, held=tuple(waves[len(now):]),
                   units=units, roles=tuple(roles.items()), groups=tuple((groups or {}).items()))


def plan_fleet(inventory, configs: dict[str, HostConfig], targets: Iterable[str] | None = None,
               fleet: FleetConfig | None = None) -> FleetPlan:
    """
    Plan a validated inventory (nothing connects).

    + inventory: the ``pyinfra.api.Inventory``
    + configs: its hosts' ``HostConfig`` by name, as validated (``sglfleet.plan.validation.validate_inventory``;
      ``plan_inventory`` there does both)
    + targets: the names of the hosts this run acts on (by default every host)
    + fleet: the keys every host shares (by default agreed here from ``configs``)
    """
    fleet = fleet or FleetConfig.agreed(configs)
    hosts = list(inventory)
    names = [host.name for host in hosts]
    wanted = set(names if targets is None else targets)
    targets = tuple(name for name in names if name in wanted)
    data = {host.name: host.data.dict() for host in hosts}
    groups = {host.name: tuple(host.groups) for host in hosts}
    serving = [name for name in names if not is_gateway(groups[name])]
    services = {name: host_services(configs[name], LAYOUT) for name in serving}
    # A group's ranks above 0 serve no API (sglfleet.plan.multinode): its head alone is a worker.
    workers = [worker_of(worker_url(name, data[name], service.port, tls=configs[name].worker_tls), service.config)
               for name in serving if is_head(name, configs[name]) for service in services[name]]
    # Certificates only where TLS is on: a fleet without it never touches a CA.
    tls_on = any(configs[name].worker_tls or configs[name].gateway_tls != "off" for name in names)
    tls = plan_tls(targets, groups, configs, data) if tls_on else {}
    read = _ReadOnce()
    network = fleet_view(configs, groups, data)
    gateways = any(is_gateway(groups[name]) for name in names)
    plans = {name: _host_plan(name, groups[name], data[name], configs[name], workers, read, name in targets,
                              host_policy(name, network, TEMPLATES) if name in targets else None, gateways,
                              tls.get(name, NO_TLS))
             for name in names}
    # The gateways are in no wave: they restart one at a time, after the serving hosts.
    waves = limit_waves(plan_waves(serving_groups(groups), fleet.rollout_waves), targets)
    roles = {name: role_of(services[name][0].config) for name in serving}
    nodes = {name: group.hosts for name, group in groups_of(configs).items() if name in serving}
    return FleetPlan(config=fleet, hosts=plans, targets=targets, waves=tuple(waves),
                     rollout=_rollout(waves, fleet, roles if any(roles.values()) else {}, nodes),
                     workers=tuple(workers),
                     gateways=tuple((name, gateway_url(name, data[name], configs[name].gateway_port,
                                                       tls=configs[name].gateway_tls != "off"))
                                    for name in names if is_gateway(groups[name])),
                     trust=controller_trust(configs, groups))


def fleet_plan(state) -> FleetPlan:
    """
    The plan ``config.py``'s hook built for this run (``sglfleet.plan.validation.plan_before_connecting``).

    + state: ``pyinfra.state``
    """
    found = getattr(state, "sglfleet_plan", None)
    if found is None:
        raise RuntimeError("no fleet plan: config.py plans the fleet before pyinfra connects; "
                           "run pyinfra from the project's folder")
    return found
