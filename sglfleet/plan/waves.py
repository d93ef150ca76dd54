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


FLEET_SETTINGS = ("rollout_waves", "rollout_serial", "max_fail_percentage", "rollout_until")


def fleet_setting(configs: Mapping[str, object], key: str):
    """
    A setting the whole rollout shares (``FLEET_SETTINGS``); hosts that disagree are a ``ConfigError``.

    + configs: validated ``HostConfig`` by host name
    + key: e.g. ``"rollout_waves"``
    """
    settings = {name: getattr(config, key) for name, config in configs.items()}
    first_name, first = next(iter(settings.items()), (None, None))
    problems = [
        f"{name}: {key} = {value!r} differs from {first_name}'s {first!r}; "
        f"set it once for the fleet (group_data/all.py, the inventory's all group, or --data)"
        for name, value in settings.items() if value != first
    ]
    if problems:
        raise ConfigError(problems)
    return first


@dataclass(frozen=True)
class Batch:
    """
    Hosts that switch together: a slice of one wave, as Ansible's ``serial`` cuts a play.

    + wave: the wave it belongs to
    + number: its place in the rollout, from 1
    + hosts: its hosts, in inventory order
    """

    wave: str
    number: int
    hosts: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.wave} batch {self.number}"


def batch_sizes(serial: Sequence[int | str] | None, total: int) -> list[int]:
    """
    The sizes of Ansible's ``serial`` for ``total`` targeted hosts: numbers, or
    percentages of ``total`` (rounded down, at least 1); the last size repeats.
    None: one batch of everything (each wave switches whole).

    **Example:**

    .. code:: python

        batch_sizes([1, "25%", "100%"], 24)   # [1, 6, 24]
    """
    if not serial:
        return [max(total, 1)]
    sizes = []
    for size in serial:
        if isinstance(size, str) and size.endswith("%"):
            sizes.append(max(1, int(total * float(size[:-1]) / 100)))
        else:
            sizes.append(max(1, int(size)))
    return sizes


def plan_batches(waves: Sequence[Wave], serial: Sequence[int | str] | None) -> list[Batch]:
    """
    Cut waves into batches: the sizes of ``serial`` in turn across the whole
    rollout (the last repeating), a batch never crossing a wave boundary.

    + waves: the rollout's waves, in order (after ``--limit``)
    + serial: ``rollout_serial``, e.g. ``[1, "10%", "50%"]``, or None

    **Example:**

    .. code:: python

        plan_batches([Wave("canary", ("n1",)), Wave("wave1", ("n2", "n3", "n4"))], [1, 2])
        # [Batch("canary", 1, ("n1",)), Batch("wave1", 2, ("n2", "n3")), Batch("wave1", 3, ("n4",))]
    """
    sizes = batch_sizes(serial, sum(len(wave.hosts) for wave in waves))
    batches: list[Batch] = []
    for wave in waves:
        hosts = list(wave.hosts)
        while hosts:
            size = sizes[min(len(batches), len(sizes) - 1)]
            batches.append(Batch(wave.name, len(batches) + 1, tuple(hosts[:size])))
            hosts = hosts[size:]
    return batches


def until(waves: Sequence[Wave], last: str | None) -> list[Wave]:
    """
    The waves up to and including ``last`` (``rollout_until``), or all of them.

    Raises ``ConfigError`` when ``last`` is no wave of the rollout.
    """
    if last is None:
        return list(waves)
    names = [wave.name for wave in waves]
    if last not in names:
        raise ConfigError([f"rollout_until: {last!r} is not a wave of this rollout (waves: {', '.join(names)}); "
                           f"name one of them"])
    return list(waves[:names.index(last) + 1])
