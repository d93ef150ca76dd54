"""
What the tasks need to know about the host at hand and its fleet, computed once a run.

What is computed is kept on the inventory (``Computed``): in a run, pyinfra's one
``state.inventory``, which every host reaches as ``host.inventory``. It ends with the
run, and two inventories (``sglfleet status``, tests) never share a host name's answers.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass, field
from functools import cache

import gevent
from pyinfra import state
from pyinfra.api import Host, Inventory
from pyinfra.api.arguments import pop_global_arguments
from pyinfra.api.exceptions import PyinfraError
from pyinfra.context import ctx_host, ctx_state

from sglfleet import FILES, PROJECT_ROOT

from sglfleet.artifacts import wheelhouse
from sglfleet.artifacts.fanout import Share, rounds
from sglfleet.artifacts.kept import kept
from sglfleet.artifacts.models import ModelError, load_manifest, staged_models
from sglfleet.artifacts.patcher import PatchRefused
from sglfleet.artifacts.patchsets import (PatchSet, PatchSetError, apply_sets, files as patch_set_files,
                                          digest as patch_sets_digest, for_file, for_version, load_sets,
                                          resolve_sets_dir)
from sglfleet.artifacts.stacks import Stack, StackError, load_stack, loadable
from sglfleet.facts.host import HostRead, HostState
from sglfleet.host.layout import GATEWAY, LAYOUT
from sglfleet.host.stacks import PATCHED, patched
from sglfleet.plan.patch_verdicts import patch_engine
from sglfleet.plan.pd import Worker, role_of, worker_of
from sglfleet.plan.pd_units import UnitBatch, plan_units
from sglfleet.plan.fleet import FleetConfig
from sglfleet.plan.gateway import gateway_args, gateway_url, is_gateway, serving_groups, worker_url
from sglfleet.plan.release import Release, render_release
from sglfleet.plan.rollout_plan import RolloutPlan
from sglfleet.plan.schema import validate_host_data
from sglfleet.plan.settings import HostConfig
from sglfleet.plan.secrets import gateway_secrets, load_secrets, render_env
from sglfleet.plan.services import Service, host_services as _host_services
from sglfleet.plan.templates import render, render_gateway_unit, render_unit
from sglfleet.plan.waves import Batch, Wave, limit_waves, plan_batches, plan_waves, until


@dataclass
class Computed:
    """
    What this run computed of its inventory, each once.

    + configs: host -> its validated configuration (``host_config``)
    + services: host -> its services (``host_services``)
    + service_files: (host, service) -> its unit and env file (``host_service_files``)
    + releases: host, service and stack -> its release (``release_for``)
    + gateway_files: gateway host -> its files (``host_gateway_files``)
    + rollouts: targets -> the rollout (``fleet_rollout``)
    + reads: host -> the greenlet of its one read (``host_state``)
    + plans: a rollout's batches -> its plan (``sglfleet.plan.rollout_plan``, ``tasks/rollout.py``)
    + fleet: the keys every host shares (``fleet_config``)
    + stacks: (name, allow_unhashed) -> the stack as its files read (``defined_stack``)
    + wheels: a host's stack's id -> its files in the controller's wheelhouse (``host_wheels``)
    + loadable: every stack whose lock loads, as this run found them (``loadable_stacks``)
    + patch_sets: a ``patch_sets_dir`` -> its sets after the shipped ones (``host_patch_sets``)
    + tool_files: a ``server`` -> the host tool's files (``host_tool_files``)
    """

    configs: dict[str, HostConfig] = field(default_factory=dict)
    services: dict[str, list[Service]] = field(default_factory=dict)
    service_files: dict[tuple[str, str], ServiceFiles] = field(default_factory=dict)
    releases: dict[str, Release] = field(default_factory=dict)
    gateway_files: dict[str, GatewayFiles] = field(default_factory=dict)
    rollouts: dict[tuple[str, ...], Rollout] = field(default_factory=dict)
    reads: dict[str, gevent.Greenlet] = field(default_factory=dict)
    plans: dict[tuple, RolloutPlan] = field(default_factory=dict)
    fleet: FleetConfig | None = None
    stacks: dict[tuple[str, bool], Stack] = field(default_factory=dict)
    wheels: dict[str, dict[str, wheelhouse.Local]] = field(default_factory=dict)
    loadable: tuple[Stack, ...] | None = None
    patch_sets: dict[str | None, tuple[PatchSet, ...]] = field(default_factory=dict)
    tool_files: dict[str, dict[str, tuple[bytes, str]]] = field(default_factory=dict)


def computed(inventory: Inventory) -> Computed:
    """
    What this run computed of ``inventory``, kept on it (made on first use).

    + inventory: ``pyinfra.inventory``, or ``host.inventory``
    """
    found = getattr(inventory, "sglfleet_computed", None)
    if found is None:
        found = inventory.sglfleet_computed = Computed()
    return found


def host_config(host: Host) -> HostConfig:
    """
    The host's validated configuration, once per run (config.py already
    validated the whole inventory before connecting).

    + host: ``pyinfra.host``
    """
    configs = computed(host.inventory).configs
    if host.name not in configs:
        configs[host.name] = validate_host_data(host.name, host.data.dict())
    return configs[host.name]


def host_services(host: Host) -> list[Service]:
    """
    The host's sglang services in inventory order (``sglfleet.plan.services.Service``), once per run:
    its ``services``, else the one ``sglang`` service at the paths it always had.

    + host: ``pyinfra.host``
    """
    services = computed(host.inventory).services
    if host.name not in services:
        services[host.name] = _host_services(host_config(host), LAYOUT)
    return services[host.name]


def host_models(host: Host) -> list:
    """
    The pinned models every service of the host loads (``staged_models``), each once: the store is the host's.

    + host: ``pyinfra.host``
    """
    found = {model.dir: model for service in host_services(host) for model in staged_models(service.config)}
    return list(found.values())


def _service(host: Host, service: Service | None) -> Service:
    return service or host_services(host)[0]


def fleet_config(inventory: Inventory) -> FleetConfig:
    """
    The keys the whole fleet shares (``sglfleet.plan.fleet.FleetConfig``), once per run
    (config.py already checked that every host agrees).

    + inventory: ``pyinfra.inventory``, or ``host.inventory``
    """
    found = computed(inventory)
    if found.fleet is None:
        found.fleet = FleetConfig.agreed({one.name: host_config(one) for one in inventory})
    return found.fleet


def loadable_stacks(inventory: Inventory) -> tuple[Stack, ...]:
    """
    Every stack defined here whose lock loads (``sglfleet.artifacts.stacks.loadable``), read once per run.

    + inventory: ``pyinfra.inventory``, or ``host.inventory``
    """
    found = computed(inventory)
    if found.loadable is None:
        found.loadable = loadable()
    return found.loadable


def host_is_gateway(host: Host) -> bool:
    """
    Whether the host is in the inventory group ``gateways``: it runs the gateway and nothing else.

    + host: ``pyinfra.host``
    """
    return is_gateway(host.groups)


def defined_stack(host: Host) -> Stack:
    """
    The stack the inventory gives the host (its ``stack``, or on a gateway host its
    ``gateway_stack``), with every Python it serves, its lock complete and hashed (or
    allowed unhashed); else a ``PyinfraError`` that stops the run before any host is read.

    + host: ``pyinfra.host``
    """
    config = host_config(host)
    key = (config.gateway_stack if host_is_gateway(host) else config.stack, config.allow_unhashed_lock)
    stacks = computed(host.inventory).stacks
    try:
        if key not in stacks:  # read once per run
            stacks[key] = load_stack(key[0], allow_unhashed=key[1])
        stack = stacks[key]
        stack.require_complete()
    except StackError as e:
        # A lock problem is the whole inventory's.
        raise PyinfraError(str(e)) from None
    return stack


def host_stack(host: Host) -> Stack:
    """
    The stack the host runs: its stack for its own ``python3``, as the one read found it.
    A host whose Python the stack does not serve gets the stack's first Python's
    (preflight refuses that host before anything changes).

    + host: ``pyinfra.host``
    """
    stack = defined_stack(host)
    python = host_state(host).os.python_minor
    return stack.for_python(python if stack.serves(python) else stack.pythons[0])


def host_wheels(host: Host) -> dict[str, wheelhouse.Local]:
    """
    The files of the host's stack (``host_stack``) in the controller's wheelhouse,
    ``{filename: Local}``, fetched and checked against the lock once per run however
    many hosts take the stack; else a ``PyinfraError`` that stops the run before any host changes.

    + host: ``pyinfra.host``

    **Example:**

    .. code:: python

        host_wheels(host)[stack.uv.filename].sha256   # what the host's copy must hash to
    """
    stack = host_stack(host)
    known = computed(host.inventory).wheels
    if stack.id not in known:
        try:
            # Every file fetched once and checked against the lock while the deploy is
            # planned: a wrong hash stops the run before any operation runs. Only the
            # Pythons the fleet has: a lock for three fetches no wheel a host will not take.
            known[stack.id] = wheelhouse.ensure(stack)
        except StackError as e:
            raise PyinfraError(str(e)) from None
    return known[stack.id]


def complete_stack(host: Host) -> Stack:
    """
    The host's stack for its Python (``host_stack``), its files in the controller's
    wheelhouse (``host_wheels``); else a ``PyinfraError`` that stops the run before any host changes.

    + host: ``pyinfra.host``
    """
    host_wheels(host)
    return host_stack(host)


def _sets(host: Host) -> tuple[PatchSet, ...]:
    """Every patch set the host's ``patch_sets_dir`` gives (after the shipped ones), read once per run."""
    patch_sets_dir, known = host_config(host).patch_sets_dir, computed(host.inventory).patch_sets
    if patch_sets_dir not in known:
        # config.py validated every set before connecting: a problem here is the whole run's.
        try:
            known[patch_sets_dir] = tuple(load_sets(resolve_sets_dir(patch_sets_dir)))
        except PatchSetError as e:
            raise PyinfraError(str(e)) from None
    return known[patch_sets_dir]


def host_patch_sets(host: Host, stack: Stack | None = None) -> list[PatchSet]:
    """
    The patch sets for the host's stack, in order: the shipped ones, then those of its
    ``patch_sets_dir``, each that names the stack's sglang version and is not in its ``patch_sets_skip``.

    + host: ``pyinfra.host``
    + stack: the host's stack (by default ``defined_stack(host)``)
    """
    stack = stack or defined_stack(host)
    config = host_config(host)
    return [s for s in for_version(list(_sets(host)), stack.sglang_version)
            if s.name not in config.patch_sets_skip]


def host_patch_files(host: Host) -> list[str]:
    """
    The files the patch step visits on the host, as the wheel names them: ``kimi_k25.py``
    always (its KimiK25 methods came before patch sets), then each file any set it knows
    changes, whether its stack gets that set or not: a set skipped, or not for the stack's
    version, leaves no block behind. (A file whose only set was deleted is no longer
    visited: the venv's drift check finds it changed, and the stack is built again.)

    + host: ``pyinfra.host``
    """
    return list(dict.fromkeys([PATCHED, *patch_set_files(list(_sets(host)))]))


@cache
def _patched_digests(wheel: str, sha256: str, member: str, sets: tuple[PatchSet, ...]) -> tuple[str, ...]:
    # A pure function of its arguments: ``sha256`` names the wheel's bytes (an unhashed lock's too,
    # hashed as the wheelhouse keeps it), and a PatchSet compares by what it changes. Kept across
    # runs (``sglfleet.artifacts.kept``): placing the sets parses each file, most of a second a run.
    def digests() -> list[str]:
        try:
            with zipfile.ZipFile(wheel) as archive:
                return [hashlib.sha256(apply_sets(archive.read(member), list(sets))[0]).hexdigest()]
        except (KeyError, PatchRefused):
            return []  # no such file, or one the engine refuses: each host reads and reports its own

    inputs = (patch_engine(), sha256.encode(), member.encode(), repr(sets).encode())
    return tuple(kept("patched-digests", inputs, digests))


def patched_digests(stack: Stack, member: str = PATCHED, sets: list[PatchSet] | tuple = ()) -> tuple[str, ...]:
    """
    The sha256 of the stack's ``member`` (a file of the sglang wheel) once patched with
    ``sets``, computed once per run from the stack's own sglang wheel: a host file with it
    need not be read or parsed.

    + stack: the host's stack
    + member: the file, as the wheel names it (default ``kimi_k25.py``)
    + sets: its patch sets, in order (``for_file``)
    """
    # The sglang wheel alone: the read asks this of every Python the stack serves.
    wheels = list(wheelhouse.ensure(stack, names=frozenset({"sglang"})).values())
    return _patched_digests(str(wheels[0].path), wheels[0].sha256, member, tuple(sets)) if wheels else ()


@dataclass(frozen=True)
class ServiceFiles:
    """The unit and the env file of one host; ``env_redacted`` is the only form ever shown."""

    unit: str
    env: str
    env_redacted: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.unit}\0{self.env}".encode()).hexdigest()[:16]



def host_service_files(host: Host, service: Service | None = None) -> ServiceFiles:
    """
    A service's rendered unit and env file, once per run.

    + host: ``pyinfra.host``
    + service: one of ``host_services(host)``; by default the first (a host's one service)
    """
    service = _service(host, service)
    key, known = (host.name, service.name), computed(host.inventory).service_files
    if key not in known:
        secrets = load_secrets(service.config.secrets_file)
        known[key] = ServiceFiles(
            unit=render_unit(service.config, layout=service.layout),
            env=render_env(secrets),
            env_redacted=render_env(secrets, redacted=True),
        )
    return known[key]


@dataclass(frozen=True)
class GatewayFiles:
    """
    A gateway host's unit, launcher and env file; ``digest`` names the whole configuration
    (the running gateway carries it), ``env_redacted`` is the only form of the env file ever shown.
    """

    unit: str
    launcher: bytes
    env: str
    env_redacted: str
    digest: str


GATEWAY_LAUNCHER = FILES / "gateway" / "sglfleet-gateway.py"


def fleet_workers(inventory: Inventory) -> list[Worker]:
    """
    Every serving host's URL as the gateways know it (one for each of its services), with its role,
    in inventory order: each gateway's workers.

    + inventory: ``pyinfra.inventory``
    """
    return [worker_of(worker_url(h.name, h.data.dict(), service.port), service.config)
            for h in inventory if not host_is_gateway(h) for service in host_services(h)]


def fleet_roles(inventory: Inventory) -> dict[str, str]:
    """
    Each serving host's PD role (its services' role: one a host), or empty for a fleet without roles.

    + inventory: ``pyinfra.inventory``
    """
    roles = {h.name: role_of(host_services(h)[0].config) for h in inventory if not host_is_gateway(h)}
    return roles if any(roles.values()) else {}


def fleet_gateways(inventory: Inventory) -> list[tuple[str, str]]:
    """
    ``(name, base URL)`` of every gateway of the inventory, whatever ``--limit`` targets:
    each routes to every worker, so a worker leaves and rejoins them all.

    + inventory: ``pyinfra.inventory``
    """
    return [(h.name, gateway_url(h.name, h.data.dict(), host_config(h).gateway_port))
            for h in inventory if host_is_gateway(h)]


def host_gateway_files(host: Host) -> GatewayFiles:
    """
    A gateway host's rendered unit, launcher and env file, once per run.

    + host: ``pyinfra.host`` (a gateway host)
    """
    known = computed(host.inventory).gateway_files
    if host.name not in known:
        config = host_config(host)
        secrets = gateway_secrets(load_secrets(config.secrets_file))
        env = render_env(secrets, template="sglang-gateway.env.j2")
        launcher = GATEWAY_LAUNCHER.read_bytes()
        args = gateway_args(config, fleet_workers(state.inventory))
        python = host_stack(host).venv + "/bin/python"
        # The digest covers everything the gateway starts from; the unit carries it, so it is
        # taken over the unit rendered without it.
        bare = render_gateway_unit(config, args, python, digest="")
        digest = hashlib.sha256(b"\0".join([bare.encode(), env.encode(), launcher])).hexdigest()[:16]
        known[host.name] = GatewayFiles(
            unit=render_gateway_unit(config, args, python, digest=digest), launcher=launcher, env=env,
            env_redacted=render_env(secrets, redacted=True, template="sglang-gateway.env.j2"), digest=digest)
    return known[host.name]


HOST_PACKAGE = PROJECT_ROOT / "sglfleet" / "host"
# The stand-in, its modules, and beside them the shipped modules it imports (files/shipped/).
STANDIN_FILES = {path.name: path for folder in ("standin", "shipped") for path in sorted((FILES / folder).glob("*.py"))}


def host_tool_files(host: Host) -> dict[str, tuple[bytes, str]]:
    """
    What the host tool is made of on a host (its entry script and the
    ``sglfleet.host`` package as ``lib/sglfleet_host``), and the stand-in where
    the host runs it (its ``server``): remote path -> (content, mode), read once per run.

    + host: ``pyinfra.host``
    """
    server, known = host_config(host).server, computed(host.inventory).tool_files
    if server not in known:
        known[server] = _tool_files(server)
    return known[server]


def _tool_files(server: str) -> dict[str, tuple[bytes, str]]:
    tools = {LAYOUT.tool: (render("sglfleet-release.j2", FILES / "host", layout=LAYOUT).encode(), "755")}
    tools.update({f"{LAYOUT.lib}/sglfleet_host/{path.name}": (path.read_bytes(), "644")
                  for path in sorted(HOST_PACKAGE.glob("*.py"))})
    if server == "standin":
        tools.update({f"{LAYOUT.standin}/{name}": (source.read_bytes(), "644")
                      for name, source in STANDIN_FILES.items()})
    return tools


def release_for(host: Host, stack: Stack, service: Service | None = None) -> Release:
    """
    The release a service of this host serves from ``stack`` (one of its stack's Pythons), once per run:
    the stack, its patch sets, the launch configuration and the service files, under one content hash.

    + host: ``pyinfra.host``
    + stack: the host's stack for one Python (``Stack.for_python``)
    + service: one of ``host_services(host)``; by default the first (a host's one service)
    """
    service = _service(host, service)
    key, releases = f"{host.name}\0{service.name}\0{stack.id}", computed(host.inventory).releases
    if key not in releases:
        releases[key] = render_release(
            service.config, stack.id, patch_sets_digest(host_patch_sets(host, stack)),
            service_digest=host_service_files(host, service).digest,
            layout=service.layout, gpus=service.gpus,
        )
    return releases[key]


def host_release(host: Host, service: Service | None = None) -> Release:
    """
    The release a service of this host should serve: the one of its stack for its own ``python3``.

    + host: ``pyinfra.host``
    + service: one of ``host_services(host)``; by default the first (a host's one service)
    """
    return release_for(host, host_stack(host), service)


def fleet_waves(inventory: Inventory, targets: list[str]) -> list[Wave]:
    """
    The wave plan of the whole inventory, narrowed to the hosts this run targets.

    + inventory: ``pyinfra.inventory``
    + targets: names of the hosts this run acts on (after ``--limit``)
    """
    groups = {host.name: list(host.groups) for host in inventory}
    # The gateways are in no wave: they restart one at a time, after the serving hosts.
    return limit_waves(plan_waves(serving_groups(groups), fleet_config(inventory).rollout_waves), targets)


@dataclass(frozen=True)
class Rollout:
    """
    What this run rolls out: its batches in order, the failure budget, and the
    waves ``rollout_until`` holds back.

    + batches: the batches up to ``rollout_until``
    + max_fail_percentage: a batch with more failed hosts (in %) stops the run
    + held: the waves after ``rollout_until``, not touched this run
    """

    batches: tuple[Batch, ...]
    max_fail_percentage: float
    held: tuple[Wave, ...]
    # A PD fleet's units, batch by batch (the batches hold the same hosts), and each serving host's role.
    units: tuple[UnitBatch, ...] = ()
    roles: tuple[tuple[str, str], ...] = ()


def fleet_rollout(inventory: Inventory, targets: list[str]) -> Rollout:
    """
    This run's rollout, planned once for all hosts.

    + inventory: ``pyinfra.inventory``
    + targets: names of the hosts this run acts on (after ``--limit``)
    """
    key, rollouts = tuple(targets), computed(inventory).rollouts
    if key not in rollouts:
        fleet = fleet_config(inventory)
        waves = fleet_waves(inventory, targets)
        now = until(waves, fleet.rollout_until)
        # Percentages count every targeted host, as Ansible's serial counts the play's: a pause
        # holds batches back but sizes none differently.
        planned = plan_batches(waves, fleet.rollout_serial)
        started = {wave.name for wave in now}
        roles = fleet_roles(inventory)
        # A PD fleet's rollout_serial counts units (sglfleet.plan.pd_units), and its batches are whole units.
        units = tuple(one for one in plan_units(waves, fleet.rollout_serial, roles)
                      if one.wave in started) if roles else ()
        if units:
            planned = [Batch(one.wave, one.number, one.hosts) for one in units]
        rollouts[key] = Rollout(batches=tuple(batch for batch in planned if batch.wave in started),
                                max_fail_percentage=fleet.max_fail_percentage,
                                held=tuple(waves[len(now):]), units=units, roles=tuple(roles.items()))
    return rollouts[key]


def fleet_shares(host: Host, targets: list, distribution: str, port: int, unit: str):
    """
    The fan-out's rounds in order, each with ``host``'s turn (``sglfleet.artifacts.fanout.Share``),
    or None where the host is not in it; one round of every host without peers.

    + targets: the hosts this run targets, in inventory order
    + distribution: "peers" or "controller"
    + port, unit: where and as what this run's file servers serve
    """
    if distribution == "controller":
        yield Share(round=0, sources=(), port=port, unit=unit, serves=False)
        return
    planned = rounds(targets)
    earlier: list[str] = []
    for number, hosts in enumerate(planned):
        yield Share(round=number, sources=tuple(earlier), port=port, unit=unit,
                    serves=number < len(planned) - 1) if host in hosts else None
        earlier += [f"http://{peer.data.get('ssh_hostname') or peer.name}:{port}" for peer in hosts]


def peer_files(targets: list, round_number: int) -> frozenset[str]:
    """
    The wheels the hosts of the rounds before ``round_number`` hold by then: each
    one's stack for its own Python. A wheel of another interpreter no such peer has.

    + targets: the hosts this run targets, in inventory order (as ``fleet_shares``)
    + round_number: the round of the host that fetches
    """
    # A host that never connected (a refused host key) serves nothing, and is not read.
    active = {one.name for one in state.inventory.get_active_hosts()}
    earlier = [peer for hosts in rounds(targets)[:round_number] for peer in hosts if peer.name in active]
    return frozenset(f.filename for peer in earlier for f in host_stack(peer).files)



def _read_arguments(host: Host) -> dict:
    """What ``HostRead`` reads on ``host``, and how it becomes root."""
    config = host_config(host)
    stack = defined_stack(host)
    arguments, _ = pop_global_arguments(state, host, {})
    # sudo -n is asked inside the read; a sudo password or user is pyinfra's to use.
    own_sudo = bool(arguments.get("_sudo")) and not any(
        arguments.get(key) for key in ("_sudo_password", "_sudo_user", "_use_sudo_login", "_preserve_sudo_env"))
    common = {"python": stack.pythons[0], "uv_version": stack.uv.version, "full": config.verify_stacks == "full",
              "sudo_check": own_sudo, **({"_sudo": False} if own_sudo else {})}
    if host_is_gateway(host):
        # Its stack for each Python: the host's python3 picks its own in the read.
        variants = {python: {"stack_id": stack.for_python(python).id, "patch_path": None, "patch_known": [],
                             "release_id": None} for python in stack.pythons}
        return {**common, **variants[stack.pythons[0]], "variants": variants, "user": GATEWAY.service_user,
                "gateway_unit": GATEWAY.unit, "gateway_runtime_dir": GATEWAY.runtime_dir,
                "paths": sorted([GATEWAY.env_file, GATEWAY.unit_file, GATEWAY.gateway_launcher])}
    # Each Python the stack serves: the host's python3 picks its own in the read.
    variants = {}
    for python in stack.pythons:
        built = stack.for_python(python)
        sets = host_patch_sets(host, built)
        variants[python] = {"stack_id": built.id, "patch_path": f"{built.venv}/{patched(python)}",
                            "patch_known": sorted(patched_digests(
                                built, PATCHED, for_file(sets, built.sglang_version, PATCHED))),
                            # The other files the patch step visits, in the same read: a no-op converge
                            # stays one command a host.
                            "patch_more": {f"{built.venv}/{patched(python, member)}": sorted(patched_digests(
                                built, member, for_file(sets, built.sglang_version, member)))
                                for member in host_patch_files(host) if member != PATCHED},
                            "release_id": release_for(host, built).release_id}
        if config.services:  # each service's releases, read in the same command
            variants[python]["service_releases"] = {
                service.name: release_for(host, built, service).release_id for service in host_services(host)}
    paths = [*(path for service in host_services(host) for path in (service.layout.env_file, service.layout.unit_file)),
             *host_tool_files(host)]
    try:
        spec = [{"dir": model.dir, "digest": load_manifest(model.repo, model.revision).digest}
                for model in host_models(host)]
    except ModelError:
        spec = None  # the models step reads its own and says what is missing
    return {**common, **variants[stack.pythons[0]], "variants": variants, "user": LAYOUT.service_user,
            "paths": sorted(paths), "model_spec": spec or None,
            "patched": host_patch_files(host)}


def host_state(host: Host) -> HostState:
    """
    Everything the converge decides from on ``host`` (``sglfleet.facts.host.HostState``),
    read once per run: the first call reads every targeted host at once, one command each.

    + host: ``pyinfra.host``

    **Example:**

    .. code:: python

        host_state(host).release.current   # "3f2a9c1d0b7e6a55"
    """
    # One greenlet per host: hosts whose deploys load side by side wait on the same reads.
    reads = computed(state.inventory).reads
    if host.name not in reads:
        hosts = [h for h in state.inventory.get_active_hosts() if state.is_host_in_limit(h)]
        # The host itself, not pyinfra's context proxy of the host being loaded.
        unread = [h for h in dict.fromkeys([state.inventory.get_host(host.name), *hosts]) if h.name not in reads]
        arguments = {h.name: _read_arguments(h) for h in unread}  # a refusal stops the run before any read

        def read(one: Host) -> HostState:
            with ctx_state.use(state.inventory.state), ctx_host.use(one):
                return one.get_fact(HostRead, **arguments[one.name])

        # Not pyinfra's pool: its slots may all be held by the deploys being loaded.
        reads.update({h.name: gevent.spawn(read, h) for h in unread})
    return reads[host.name].get()


def peer_state(host: Host) -> HostState | None:
    """
    Another host's ``host_state``, or None where its read failed: that host fails
    alone, in its own deploy, and a plan across the fleet leaves it out.

    + host: the other host
    """
    greenlet = computed(host.inventory).reads.get(host.name)
    if greenlet is None:
        try:
            return host_state(host)
        except Exception:  # its own deploy reports it
            return None
    greenlet.join()
    return greenlet.value if greenlet.successful() else None
