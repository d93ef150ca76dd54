"""What the tasks need to know about the host at hand and its fleet, computed once."""

from __future__ import annotations

from functools import cache

from pyinfra.api import Host, Inventory

from sglfleet.config import HostConfig, rollout_waves_of, validate_host_data
from sglfleet.patcher import load_patch
from sglfleet.stacks import Stack, load_stack
from sglfleet.waves import Wave, limit_waves, plan_waves


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


def fleet_waves(inventory: Inventory, targets: list[str]) -> list[Wave]:
    """
    The wave plan of the whole inventory, narrowed to the hosts this run targets.

    + inventory: ``pyinfra.inventory``
    + targets: names of the hosts this run acts on (after ``--limit``)
    """
    configs = {host.name: host_config(host) for host in inventory}
    groups = {host.name: list(host.groups) for host in inventory}
    return limit_waves(plan_waves(groups, rollout_waves_of(configs)), targets)
