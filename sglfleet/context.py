"""What the tasks need to know about the host at hand and its fleet, computed once."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from functools import cache

from pyinfra.api import Host, Inventory

from sglfleet import FILES, PROJECT_ROOT, wheelhouse
from sglfleet.fanout import Share, rounds
from sglfleet.host.layout import LAYOUT
from sglfleet.host.stacks import PATCHED
from sglfleet.patcher import PatchRefused, apply, load_patch
from sglfleet.release import Release, render_release
from sglfleet.schema import HostConfig, validate_host_data
from sglfleet.secrets import load_secrets, render_env
from sglfleet.stacks import Stack, load_stack
from sglfleet.templates import render, render_unit
from sglfleet.waves import Batch, Wave, fleet_setting, limit_waves, plan_batches, plan_waves, until


_configs: dict[str, HostConfig] = {}


def host_config(host: Host) -> HostConfig:
    """
    The host's validated configuration, once per run (config.py already
    validated the whole inventory before connecting).

    + host: ``pyinfra.host``
    """
    if host.name not in _configs:
        _configs[host.name] = validate_host_data(host.name, host.data.dict())
    return _configs[host.name]


@cache
def stack_named(name: str, allow_unhashed: bool) -> Stack:
    """The stack called ``name``, loaded once per run."""
    return load_stack(name, allow_unhashed=allow_unhashed)


def host_stack(host: Host) -> Stack:
    """
    The stack the host runs.

    + host: ``pyinfra.host``
    """
    config = host_config(host)
    return stack_named(config.stack, config.allow_unhashed_lock)


@cache
def patch_digest() -> str:
    """The digest of the patch's methods, part of every release id."""
    return load_patch().digest


KIMI_K25 = PATCHED


@cache
def _patched_digests(wheel: str) -> tuple[str, ...]:
    try:
        with zipfile.ZipFile(wheel) as archive:
            return (hashlib.sha256(apply(archive.read(KIMI_K25), load_patch())).hexdigest(),)
    except (KeyError, PatchRefused):
        return ()  # no such file, or one the engine refuses: each host reads and reports its own


def patched_digests(stack: Stack) -> tuple[str, ...]:
    """
    The sha256 of the stack's ``kimi_k25.py`` once patched, computed once per run
    from the stack's own sglang wheel: a host file with it need not be read or parsed.

    + stack: the host's stack
    """
    wheels = [local.path for name, local in wheelhouse.ensure(stack).items() if name.startswith("sglang-")]
    return _patched_digests(str(wheels[0])) if wheels else ()


@dataclass(frozen=True)
class ServiceFiles:
    """The unit and the env file of one host; ``env_redacted`` is the only form ever shown."""

    unit: str
    env: str
    env_redacted: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.unit}\0{self.env}".encode()).hexdigest()[:16]


_service_files: dict[str, ServiceFiles] = {}
_releases: dict[str, Release] = {}


def host_service_files(host: Host) -> ServiceFiles:
    """
    The host's rendered unit and env file, once per run.

    + host: ``pyinfra.host``
    """
    if host.name not in _service_files:
        config = host_config(host)
        secrets = load_secrets(config.secrets_file)
        _service_files[host.name] = ServiceFiles(
            unit=render_unit(config),
            env=render_env(secrets),
            env_redacted=render_env(secrets, redacted=True),
        )
    return _service_files[host.name]


HOST_PACKAGE = PROJECT_ROOT / "sglfleet" / "host"
# The stand-in, its modules, and the two stdlib modules it imports from its own folder.
STANDIN_FILES = {
    **{path.name: path for path in sorted((FILES / "standin").glob("*.py"))},
    "server_flags.py": PROJECT_ROOT / "sglfleet" / "server_flags.py",
    "stub_import.py": PROJECT_ROOT / "sglfleet" / "stub_import.py",
}


@cache
def host_tool_files(server: str) -> dict[str, tuple[bytes, str]]:
    """
    What the host tool is made of on a host (its entry script and the
    ``sglfleet.host`` package as ``lib/sglfleet_host``), and the stand-in where
    the host runs it: remote path -> (content, mode).

    + server: the host's ``server`` ("sglang" or "standin")
    """
    tools = {LAYOUT.tool: (render("sglfleet-release.j2", FILES / "host", layout=LAYOUT).encode(), "755")}
    tools.update({f"{LAYOUT.lib}/sglfleet_host/{path.name}": (path.read_bytes(), "644")
                  for path in sorted(HOST_PACKAGE.glob("*.py"))})
    if server == "standin":
        tools.update({f"{LAYOUT.standin}/{name}": (source.read_bytes(), "644")
                      for name, source in STANDIN_FILES.items()})
    return tools


def host_release(host: Host) -> Release:
    """
    The release this host should serve, once per run: its stack, the patch,
    the launch configuration and the service files, under one content hash.

    + host: ``pyinfra.host``
    """
    if host.name not in _releases:
        _releases[host.name] = render_release(
            host_config(host), host_stack(host).id, patch_digest(),
            service_digest=host_service_files(host).digest,
        )
    return _releases[host.name]


def fleet_waves(inventory: Inventory, targets: list[str]) -> list[Wave]:
    """
    The wave plan of the whole inventory, narrowed to the hosts this run targets.

    + inventory: ``pyinfra.inventory``
    + targets: names of the hosts this run acts on (after ``--limit``)
    """
    configs = {host.name: host_config(host) for host in inventory}
    groups = {host.name: list(host.groups) for host in inventory}
    return limit_waves(plan_waves(groups, fleet_setting(configs, "rollout_waves")), targets)


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


_rollouts: dict[tuple[str, ...], Rollout] = {}


def fleet_rollout(inventory: Inventory, targets: list[str]) -> Rollout:
    """
    This run's rollout, planned once for all hosts.

    + inventory: ``pyinfra.inventory``
    + targets: names of the hosts this run acts on (after ``--limit``)
    """
    key = tuple(targets)
    if key not in _rollouts:
        configs = {host.name: host_config(host) for host in inventory}
        waves = fleet_waves(inventory, targets)
        now = until(waves, fleet_setting(configs, "rollout_until"))
        # Percentages count every targeted host, as Ansible's serial counts the play's: a pause
        # holds batches back but sizes none differently.
        planned = plan_batches(waves, fleet_setting(configs, "rollout_serial"))
        started = {wave.name for wave in now}
        _rollouts[key] = Rollout(batches=tuple(batch for batch in planned if batch.wave in started),
                                 max_fail_percentage=fleet_setting(configs, "max_fail_percentage"),
                                 held=tuple(waves[len(now):]))
    return _rollouts[key]


def fleet_shares(host: Host, targets: list, distribution: str, port: int, unit: str):
    """
    The fan-out's rounds in order, each with ``host``'s turn (``sglfleet.fanout.Share``),
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
