"""
One sglang server over several hosts: a group, its members' launch flags, and what a group must hold.
Pure. The rollout moves a group as one unit (``sglfleet.plan.pd_units``); docs/topologies.md says why.

A group is named by ``nodes`` on each of its hosts: the hosts in rank order, the head first, with
``tp_size`` over all their GPUs. Each member runs sglang with ``--nnodes``, its ``--node-rank`` and
the head's ``--dist-init-addr HEAD:dist_init_port``. What sglang 0.5.9 does with them:

- every rank's model runner joins ``torch.distributed`` at ``tcp://<dist_init_addr>``
  (``srt/model_executor/model_runner.py:776-777``, 804-811): rank 0 holds the TCP store there and waits
  for the others up to ``--dist-timeout`` (None: torch's default for nccl, 10 minutes,
  ``srt/distributed/parallel_state.py:1561-1572``);
- a rank above 0 runs no tokenizer and no HTTP API: once its schedulers are ready it serves only a
  dummy ``/health``, ``/ping`` and ``/health_generate`` that answer 200 (``srt/entrypoints/engine.py:1040-1057``,
  ``srt/utils/common.py:2656-2712``), and waits on its schedulers; so only the head is a gateway's worker;
- tensor parallel splits ``tp_size`` evenly over the hosts (``engine.py:932-937``): each host runs
  ``tp_size / nnodes`` GPUs, the same on each.

**Example:**

.. code:: python

    groups_of(configs)["node2"].head                 # "node1"
    group_problems(groups, configs, gateways, waves)  # one line a problem, before any connection
    configs = with_groups(configs, data)              # node_rank, nnodes, dist_init_addr set
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sglfleet.plan.gateway import address
from sglfleet.plan.schema import defaults
from sglfleet.plan.settings import GROUP_ONLY_KEYS


@dataclass(frozen=True)
class Group:
    """The hosts of one server, in rank order: the head (rank 0, the one that serves) first."""

    hosts: tuple[str, ...]

    @property
    def head(self) -> str:
        return self.hosts[0]

    def rank(self, host: str) -> int:
        return self.hosts.index(host)

    @property
    def name(self) -> str:
        return f"group {self.head}"


def groups_of(configs: Mapping) -> dict[str, Group]:
    """Each host of a group -> its ``Group``, as its own ``nodes`` names it (hosts without one are left out)."""
    return {name: Group(tuple(config.nodes)) for name, config in configs.items() if config.nodes}


def is_head(name: str, config) -> bool:
    """Whether the host serves: it is on its own, or its group's head (the other ranks serve no API)."""
    return not config.nodes or config.nodes[0] == name


def hand_set_problems(name: str, data: Mapping) -> list[str]:
    """
    A line for each of the group's flags the inventory sets by hand: sglfleet sets them from ``nodes``.
    (A host's data holds group_data/all.py's defaults too, where pyinfra loaded them: those are not hand-set.)
    """
    return [f"{name}: {key}: set by sglfleet from nodes; remove it and list the group's hosts in nodes "
            f"(e.g. nodes = [\"gpu1\", \"gpu2\"] on both)"
            for key in GROUP_ONLY_KEYS if key in data and data[key] != defaults()[key]]


def group_problems(configs: Mapping, gateways: Iterable[str], waves: Sequence = ()) -> list[str]:
    """
    What stops a group from running as one server, one line each (empty without groups).

    + configs: every inventory host's validated ``HostConfig``, by name, in inventory order
    + gateways: the hosts of the group ``gateways``
    + waves: the rollout's waves (``sglfleet.plan.waves.Wave``): a group moves in one of them

    **Example:**

    .. code:: python

        group_problems({"node1": c1, "node2": c2}, [])   # ["node2: stack = 'b', but its group's head ..."]
    """
    gateways, problems = set(gateways), []
    groups = groups_of(configs)
    for name, group in groups.items():
        config = configs[name]
        if name not in group.hosts:
            problems.append(f"{name}: nodes = {list(group.hosts)} does not list {name}: nodes lists every host "
                            f"of the group, this one among them, the head first")
            continue
        if len(set(group.hosts)) < len(group.hosts):
            problems.append(f"{name}: nodes = {list(group.hosts)} names a host twice; name each once")
            continue
        for member in group.hosts:
            if member not in configs:
                problems.append(f"{name}: nodes names {member}, which is not in the inventory; add it, "
                                f"or remove it from nodes")
            elif groups.get(member) != group:
                theirs = list(groups[member].hosts) if member in groups else None
                problems.append(f"{member}: {name}'s nodes put it in the group ({', '.join(group.hosts)}), its own "
                                f"nodes = {theirs}: a host serves one group, on all its GPUs; give every member "
                                f"the same nodes")
        if name in gateways:
            problems.append(f"{name}: in the group gateways and in a group of nodes; a gateway serves no model: "
                            f"take it out of one")
        if config.services:
            problems.append(f"{name}: services on a host of a group: a group's host runs its one server on every "
                            f"GPU; remove services (or nodes)")
        if config.launch.disaggregation_mode:
            problems.append(f"{name}: disaggregation_mode with nodes: a prefill or decode over several hosts is "
                            f"not supported; set one of them to None")
        if name != group.head or any(member not in configs for member in group.hosts):
            continue
        hosts = len(group.hosts)
        if config.launch.tp_size % hosts:
            problems.append(f"{name}: tp_size {config.launch.tp_size} over the {hosts} hosts of its group: sglang "
                            f"splits tp_size evenly over them; set a multiple of {hosts}, e.g. {hosts * 8}")
        for member in group.hosts[1:]:
            other = configs[member]
            for key in ("stack", "gpu_count", "dist_init_port", "server"):
                if getattr(other, key) != getattr(config, key):
                    problems.append(f"{member}: {key} = {getattr(other, key)!r}, but its group's head {name} has "
                                    f"{getattr(config, key)!r}: a group's hosts run one server; make them equal")
            ours, theirs = (c.launch.model_dump(exclude={"listen_host", *GROUP_ONLY_KEYS}) for c in (config, other))
            if ours != theirs:
                keys = sorted(key for key in ours if ours[key] != theirs[key])
                problems.append(f"{member}: {', '.join(keys)} differ from its group's head {name}: every rank of a "
                                f"server launches with the same flags; make them equal")
    if problems:  # a group that is not one yet has no wave to be checked in
        return problems
    wave_of = {host: wave.name for wave in waves for host in wave.hosts}
    for group in dict.fromkeys(groups.values()):
        where = {host: wave_of[host] for host in group.hosts if host in wave_of}
        if len(set(where.values())) > 1:
            found = ", ".join(f"{host} in {wave}" for host, wave in where.items())
            problems.append(f"{', '.join(group.hosts)}: a group rolls out as one unit, in one wave; {found}: "
                            f"put the group's hosts in one wave")
    return problems


def with_groups(configs: Mapping, data: Mapping[str, Mapping]) -> dict:
    """
    The hosts' configs with each group member's ``nnodes``, ``node_rank`` and ``dist_init_addr`` set.

    + configs: every host's validated ``HostConfig`` (``group_problems`` found nothing)
    + data: every host's data: the head's address is its fleet address (``sglfleet.plan.gateway.address``)
    """
    resolved = dict(configs)
    for name, group in groups_of(configs).items():
        config = configs[name]
        flags = {"nnodes": len(group.hosts), "node_rank": group.rank(name),
                 "dist_init_addr": f"{address(group.head, data[group.head])}:{config.dist_init_port}"}
        resolved[name] = config.model_copy(update={"launch": config.launch.model_copy(update=flags)})
    return resolved


def gpus_per_host(launch) -> int:
    """The GPUs one host of the server runs: ``tp_size`` over its hosts (``engine.py:932-937``)."""
    return launch.tp_size // launch.nnodes
