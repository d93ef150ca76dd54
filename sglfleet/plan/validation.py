"""
Check a whole inventory before anything connects: load it as pyinfra does,
validate every host against the schema and the wave plan, load each host's
stack, render its files and lint its launch flags.

``sglfleet lint`` prints what ``check_inventory`` finds; ``config.py`` (pyinfra's
hook) runs the same checks after pyinfra builds the inventory and before it
connects, so bad input gets one line per problem and touches no host.

**Example:**

.. code:: python

    inventory = load_inventory("inventory/prod.py")
    for line in check_inventory(inventory):
        print(line)   # gpu-canary-01: error: enable_torch_symm_mem: ...
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from sglfleet.artifacts.patchsets import SHIPPED as SHIPPED_SETS, load_sets
from sglfleet.errors import ConfigError
from sglfleet.plan.advisories import load_advisories, message as advisory_message, verdict
from sglfleet.plan.fleet import FleetConfig
from sglfleet.plan.fleet_plan import plan_fleet
from sglfleet.plan.gateway import address, gateway_problems, is_gateway, serving_groups
from sglfleet.plan.measured import measured_caps, measured_os
from sglfleet.plan.network import listen_addresses
from sglfleet.plan.multinode import group_problems, hand_set_problems, with_groups
from sglfleet.plan.pd import backend_wheel_problem, pd_problems, role_of
from sglfleet.plan.pd_units import plan_units, unit_problems
from sglfleet.plan.services import host_services
from sglfleet.plan.schema import STACKS_DIR, stack_problems, validate_host_data
from sglfleet.plan.settings import HostConfig
from sglfleet.plan.tls import gateway_tls_problem, worker_tls_problem
from sglfleet.plan.templates import TEMPLATES
from sglfleet.plan.waves import default_waves, plan_waves, until


def load_inventory(inventory_file: str, data: dict | None = None):
    """
    Build a pyinfra inventory from a file as the CLI does, without connecting.

    + inventory_file: a pyinfra inventory file
    + data: ``--data`` overrides, already parsed as pyinfra parses them

    Raises ``ConfigError`` when the file does not load.
    """
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory_from_files

    try:
        # exec'ing inventory and group data files needs a pyinfra state, as in the CLI
        with ctx_state.use(State()):
            return make_inventory_from_files(inventory_file, override_data=data or {})
    except Exception as error:  # the inventory file is user code
        cause = getattr(error, "exception", None) or error.__context__ or error
        raise ConfigError([f"{inventory_file}: does not load: {type(cause).__name__}: {cause}; fix the file"]) from None


def parse_data(pairs) -> dict:
    """
    ``--data KEY=VALUE`` pairs parsed as pyinfra's CLI parses them (JSON, numbers, booleans).

    + pairs: e.g. ``("tp_size=8", "rollout_serial=[1, \"25%\"]")``

    Raises ``click.BadParameter`` for a pair without ``=``.
    """
    import click
    from pyinfra_cli.util import parse_cli_arg

    data = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r}: expected key=value", param_hint="--data")
        data[key] = parse_cli_arg(value)
    return data


def collapse(lines: list[str], host_names) -> list[str]:
    """
    Merge lines that differ only in their host (one bad group value, many hosts) into one.

    + lines: ``"<host>: <problem>"`` lines, in order
    + host_names: every host name (other lines pass through unchanged)

    **Example:**

    .. code:: python

        collapse(["node1: x: bad", "node2: x: bad"], ["node1", "node2"])  # ["node1, node2: x: bad"]
    """
    hosts_of: dict[str, list[str]] = {}
    for line in lines:
        host, sep, rest = line.partition(": ")
        key = rest if sep and host in host_names else "\0" + line
        hosts_of.setdefault(key, []).append(host)
    return [key[1:] if key.startswith("\0") else f"{', '.join(dict.fromkeys(hosts))}: {key}"
            for key, hosts in hosts_of.items()]


def validate_inventory(inventory, stacks_dir: Path = STACKS_DIR) -> dict[str, HostConfig]:
    """
    Validate every host of a pyinfra inventory, the keys the fleet shares (``FleetConfig``: every
    host must agree on each) and its wave plan, collecting all problems.

    + inventory: a ``pyinfra.api.Inventory`` (nothing is connected)
    + stacks_dir: where stack files live

    Returns ``{host name: HostConfig}``; raises ``ConfigError`` listing every problem.

    **Example:**

    .. code:: python

        configs = validate_inventory(state.inventory)
    """
    problems: list[str] = []
    configs: dict[str, HostConfig] = {}
    groups: dict[str, list[str]] = {}
    data: dict[str, dict] = {}
    for host in inventory:
        groups[host.name] = list(host.groups)
        data[host.name] = host.data.dict()
        problems += hand_set_problems(host.name, data[host.name])
        try:
            configs[host.name] = validate_host_data(host.name, host.data.dict(), stacks_dir)
        except ConfigError as error:
            problems += error.problems
            continue
        if is_gateway(host.groups):
            problems += stack_problems(host.name, configs[host.name].gateway_stack, stacks_dir, key="gateway_stack")
    if not problems:
        try:
            fleet = FleetConfig.agreed(configs)
            configs = listen_addresses(configs, groups, data)  # listen_host None: where the fleet needs it
            named = fleet.rollout_waves
            wave_names = named if named is not None else default_waves({g for gs in groups.values() for g in gs})
            problems += gateway_problems(groups, data, configs, wave_names)
            problems += pd_problems(groups, configs, [host for host, names in groups.items() if is_gateway(names)])
            # The gateways are in no wave: the plan orders the serving hosts.
            waves = plan_waves(serving_groups(groups), named)
            until(waves, fleet.rollout_until)
            problems += group_problems(configs, [host for host, names in groups.items() if is_gateway(names)], waves)
            configs = with_groups(configs, data) if not problems else configs
            roles = {name: role_of(host_services(configs[name])[0].config) for name in serving_groups(groups)}
            if any(roles.values()) and not problems:
                problems += unit_problems(plan_units(waves, fleet.rollout_serial, roles), roles)
        except ConfigError as error:
            problems += error.problems
    if problems:
        raise ConfigError(collapse(problems, groups))
    return configs


def plan_inventory(inventory, targets=None):
    """
    Validate an inventory (``validate_inventory``) and plan it (``sglfleet.plan.fleet_plan.plan_fleet``).

    + inventory: a ``pyinfra.api.Inventory`` (nothing is connected)
    + targets: the names of the hosts the run acts on (by default every host)

    Raises ``ConfigError`` listing every problem.

    **Example:**

    .. code:: python

        plan_inventory(load_inventory("inventory/dev.py")).hosts["node1"].services[0].unit   # "sglang.service"
    """
    return plan_fleet(inventory, validate_inventory(inventory), targets=targets)


def _compute_caps(name: str, config: HostConfig) -> tuple[list[str] | None, str]:
    """Each GPU's compute capability, from the last preflight, else from the inventory; and which."""
    if config.gpu_less:
        return None, "none: gpu_less"
    measured = measured_caps(name)
    if measured:
        return measured
    if config.gpu_compute_cap is None:
        return None, "unknown"
    # GPU count unknown: assume tp_size GPUs, so only the architecture rules apply.
    count = config.gpu_count or config.launch.tp_size
    return [config.gpu_compute_cap] * count, f"declared: gpu_compute_cap {config.gpu_compute_cap}"


def _interpreter_findings(name: str, config: HostConfig, stack, severity: str, candidates=None) -> list:
    """
    What preflight will say of the host's ``python3`` and glibc, as it last measured them.

    + candidates: returns every stack whose lock loads; by default ``sglfleet.artifacts.stacks.loadable``
    """
    from sglfleet.artifacts.stacks import loadable
    from sglfleet.plan.lint import Finding
    from sglfleet.plan.preflight import fitting_instead, interpreter_problems

    measured = measured_os(name)
    if measured is None:
        return []
    found, source = measured
    others = fitting_instead(stack, found, config.gpu_less, candidates or loadable)
    return [Finding(severity, name, "stack", f"{problem.removeprefix(f'{name}: ')} ({source})")
            for problem in interpreter_problems(name, stack, found, others)]


def _advisories(known, config: HostConfig, version: str, loaded, flags) -> list:
    """
    Each known advisory's verdict on a host of sglang ``version`` launched with ``flags``.

    + known: ``load_advisories()``
    + loaded: ``sglfleet.artifacts.patchsets.load_sets`` of a folder, or a cache of it
    """
    from sglfleet.artifacts.patchsets import for_version, resolve_sets_dir

    naming = {s.name for s in for_version(loaded(resolve_sets_dir(config.patch_sets_dir)), version)}
    applied = naming - set(config.patch_sets_skip)
    return [(advisory, verdict(advisory, version, naming & set(advisory.patch_sets), applied, list(flags)))
            for advisory in known]


def _patch_sets(config: HostConfig, version: str | None, loaded) -> list:
    """
    The patch sets a host's stack gets: its sglang version's, less ``patch_sets_skip``.

    + loaded: ``sglfleet.artifacts.patchsets.load_sets`` of a folder, or a cache of it (once an inventory)
    """
    from sglfleet.artifacts.patchsets import for_version, resolve_sets_dir

    sets = for_version(loaded(resolve_sets_dir(config.patch_sets_dir)), version)  # the schema loaded them
    return [s for s in sets if s.name not in config.patch_sets_skip]


def check_inventory(inventory, templates: Path = TEMPLATES, measured_os_severity: str = "error",
                    accounting: list | None = None) -> list[str]:
    """
    Everything wrong with an inventory pyinfra has built, as lines; errors say ``error``.

    + inventory: a ``pyinfra.api.Inventory`` (nothing is connected)
    + templates: the templates directory
    + measured_os_severity: what a ``python3`` or glibc that preflight measured and the stack
      cannot serve is: an ``error`` for ``sglfleet lint``; a ``warning`` before a deploy connects,
      whose preflight measures again (a stale measurement must not keep out the run that renews it)
    + accounting: a list that receives ``(host, sglang version, Advisory, Verdict)`` for every known
      advisory of each host's release, open or not (``sglfleet lint`` prints the closed ones)

    Raises ``ConfigError`` when the inventory does not validate.
    """
    return checked(inventory, templates, measured_os_severity, accounting)[0]


def checked(inventory, templates: Path = TEMPLATES, measured_os_severity: str = "error",
            accounting: list | None = None):
    """``check_inventory``'s lines, and the hosts' ``HostConfig`` by name they were checked from."""
    from sglfleet.plan.flagsets import flagset_for
    from sglfleet.plan import patch_verdicts
    from sglfleet.plan.lint import Finding, lint, model_findings
    from sglfleet.plan.release import render_release
    from sglfleet.plan.secrets import SecretsError, engine_env, load_secrets, render_env
    from sglfleet.plan.services import host_services
    from sglfleet.artifacts.stacks import StackError, load_stack, loadable
    from sglfleet.plan.templates import TemplateRenderError, render_unit
    from sglfleet.plan.weights import speculative_refusal

    configs = validate_inventory(inventory)
    candidates = cache(loadable)  # read once for this inventory's hosts, when one was measured
    sets_in = cache(load_sets)  # each folder's patch sets, read once for this inventory's hosts
    known = load_advisories(set_names={s.name for s in sets_in(None)})
    findings: list[Finding] = []
    gateways = any(is_gateway(inventory.get_host(name).groups) for name in configs)
    for name, config in configs.items():
        if is_gateway(inventory.get_host(name).groups):
            # No sglang to lint: the gateway's settings were checked with the schema, its stack is checked here.
            try:
                load_stack(config.gateway_stack, allow_unhashed=config.allow_unhashed_lock).require_complete()
            except StackError as error:
                findings.append(Finding("error", name, "gateway_stack", str(error)))
            if problem := gateway_tls_problem(config, address(name, inventory.get_host(name).data.dict())):
                findings.append(Finding("error", name, "gateway_tls", problem))
            continue
        services = host_services(config)
        for service in services:
            findings += model_findings(name, service.config)
        try:
            stack = load_stack(config.stack, allow_unhashed=config.allow_unhashed_lock)
        except StackError as error:
            findings.append(Finding("error", name, "stack", str(error)))
            continue
        version = stack.sglang_version
        # The release's known advisories, whatever else holds the stack back (a lock still to complete).
        for service in services if version else ():
            for advisory, found in _advisories(known, config, version, sets_in, service.config.launch.extra_flags):
                if accounting is not None:
                    accounting.append((name, version, advisory, found))
                if found.is_open:
                    findings.append(Finding("warning", name, "advisory", advisory_message(advisory, version, found)))
        try:
            stack.require_complete()
        except StackError as error:
            findings.append(Finding("error", name, "stack", str(error)))
            continue
        try:
            secrets = load_secrets(config.secrets_file)
            render_env(engine_env(secrets, behind_gateways=gateways and not config.router_url), redacted=True,
                       templates=templates)
            for service in services:
                render_unit(service.config, templates, layout=service.layout)
                render_release(service.config, stack.id, "", templates, layout=service.layout, gpus=service.gpus,
                               sglang_version=stack.sglang_version)
        except SecretsError as error:
            findings.append(Finding("error", name, "secrets_file", str(error)))
        except TemplateRenderError as error:
            findings.append(Finding("error", name, "templates", str(error)))
        # Before any connection: a stack whose sglang takes no --ssl-certfile cannot serve its gateways TLS.
        if config.worker_tls and (problem := worker_tls_problem(stack.name, version,
                                                                flagset_for(version) if version else None)):
            findings.append(Finding("error", name, "worker_tls", problem))
        for service in services:
            if wheel := backend_wheel_problem(name, service.config, stack):
                findings.append(Finding("error", name, "disaggregation_transfer_backend", wheel))
        if version is None:
            findings.append(Finding("warning", name, "stack", f"{stack.name} names no sglang version; "
                                    f"flags were not checked"))
        findings += _interpreter_findings(name, config, stack, measured_os_severity, candidates)
        caps, source = _compute_caps(name, config)
        sets = _patch_sets(config, version, sets_in)
        applied = tuple(s.name for s in sets)
        # Each set on the stack's own file, as the patch step will place it: a drifted anchor stops the run here.
        for patch_set in sets if version else ():
            refusal = patch_verdicts.refusal(version, patch_set)
            if refusal:
                findings.append(Finding("error", name, "patch_sets_dir" if patch_set.path.parent != SHIPPED_SETS
                                        else "stack", f"{refusal}; fix its anchor or skip it (patch_sets_skip)"))
        for service in services:
            if config.weights_update == "in_place" and (refusal := speculative_refusal(version, service.config.launch)):
                findings.append(Finding("error", name, "weights_update", f'"in_place" cannot be: {refusal}; '
                                        f'set it to "auto" (a restart here) or "restart"'))
        for service in services:
            # A service sees its own GPUs only (CUDA_VISIBLE_DEVICES).
            seen = caps if caps is None or service.gpus is None else [caps[0]] * len(service.gpus)
            findings += lint(name, service.config, flagset_for(version) if version else None, seen,
                             version or "unknown", caps_source=source, patch_sets=applied)
    findings = list(dict.fromkeys(findings))  # services that share a launch share its findings: once each
    findings.sort(key=lambda finding: finding.severity != "error")
    return collapse([str(finding) for finding in findings], configs), configs
