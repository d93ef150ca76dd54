"""The wave plan: which hosts switch releases together, in which order. Pure.

Waves are inventory groups. The order comes from ``rollout_waves``; without it,
``canary`` first, then ``wave1``, ``wave2``, ... by number, then every host left
over in a last wave named ``leftover``. A wave that names an unknown group, or a
host that two waves claim, is a ``ConfigError`` before anything connects.

**Example:**

.. code:: python

    waves = plan_waves({"node1": ["canary"], "node2": ["wave1"]}, None)
    # [Wave("canary", ("node1",)), Wave("wave1", ("node2",))]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sglfleet.errors import ConfigError

LEFTOVER = "leftover"
NUMBERED = re.compile(r"^wave(\d+)$")


@dataclass(frozen=True)
class Wave:
    """One step of a rollout: a group name and its hosts, in inventory order."""

    name: str
    hosts: tuple[str, ...]

    def only(self, targets: Iterable[str]) -> "Wave":
        """This wave restricted to ``targets`` (for ``--limit``), order kept."""
        wanted = set(targets)
        return Wave(self.name, tuple(host for host in self.hosts if host in wanted))


def default_waves(group_names: Iterable[str]) -> list[str]:
    """
    The default order: ``canary``, then ``wave1``, ``wave2``, ... by number.

    + group_names: every group of the inventory
    """
    names = set(group_names)
    numbered = sorted((int(m.group(1)), name) for name in names if (m := NUMBERED.match(name)))
    return (["canary"] if "canary" in names else []) + [name for _, name in numbered]


def plan_waves(
    hosts_with_groups: Mapping[str, Iterable[str]],
    rollout_waves: Sequence[str] | None = None,
) -> list[Wave]:
    """
    Order every host of the inventory into waves; empty waves are left out.

    + hosts_with_groups: every inventory host (in inventory order) -> its group names;
      pass the whole inventory, then narrow with ``limit_waves`` for ``--limit``
    + rollout_waves: group names in order, or None for the default order

    Raises ``ConfigError`` for a wave naming an unknown group or a host in two waves.

    **Example:**

    .. code:: python

        plan_waves({h.name: h.groups for h in inventory}, config.rollout_waves)
    """
    all_groups = {group for groups in hosts_with_groups.values() for group in groups}
    names = list(rollout_waves) if rollout_waves is not None else default_waves(all_groups)

    problems = []
    for name in names:
        if name == LEFTOVER or name not in all_groups:
            known = ", ".join(sorted(all_groups - {"all"})) or "none"
            problems.append(f"rollout_waves: {name!r} is not a group of this inventory "
                            f"(groups: {known}); fix the name or define the group")
    seen = set()
    for name in names:
        if name in seen:
            problems.append(f"rollout_waves: {name!r} is named twice; name each wave once")
        seen.add(name)
    for host, groups in hosts_with_groups.items():
        claimed = [name for name in dict.fromkeys(names) if name in set(groups)]
        if len(claimed) > 1:
            problems.append(f"{host}: in waves {' and '.join(claimed)}; "
                            f"put the host in one wave group only")
    if problems:
        raise ConfigError(problems)

    waves = [
        Wave(name, tuple(host for host, groups in hosts_with_groups.items() if name in set(groups)))
        for name in names
    ]
    placed = {host for wave in waves for host in wave.hosts}
    waves.append(Wave(LEFTOVER, tuple(host for host in hosts_with_groups if host not in placed)))
    return [wave for wave in waves if wave.hosts]


def limit_waves(waves: Iterable[Wave], targets: Iterable[str]) -> list[Wave]:
    """
    Keep only the targeted hosts (pyinfra ``--limit``), dropping waves left empty.

    + waves: a plan from ``plan_waves``
    + targets: the names of the hosts this run acts on
    """
    targets = list(targets)
    return [wave for wave in (wave.only(targets) for wave in waves) if wave.hosts]


def rollout_waves_of(configs: Mapping[str, object]) -> Sequence[str] | None:
    """
    The fleet's one ``rollout_waves`` setting; hosts that disagree are a ``ConfigError``.

    + configs: validated ``HostConfig`` by host name
    """
    settings = {name: config.rollout_waves for name, config in configs.items()}
    first_name, first = next(iter(settings.items()), (None, None))
    problems = [
        f"{name}: rollout_waves = {waves!r} differs from {first_name}'s {first!r}; "
        f"set it once for the fleet (group_data/all.py or the inventory's all group)"
        for name, waves in settings.items() if waves != first
    ]
    if problems:
        raise ConfigError(problems)
    return first
