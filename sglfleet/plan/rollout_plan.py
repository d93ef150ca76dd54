"""
Which hosts this run restarts, service by service, planned before any of them switches. Pure.

Each service's rollout step decides on its own host what to do (``decide``, in
``sglfleet.operations.release.activated``, on the host's read, read again after
another run's lock). The fleet needs that answer earlier, for every host at once:
a host packs and serves its compile caches only where a later host of the same
key restarts, and a PD batch settles differently when none of its hosts switch.
``plan_rollout`` asks ``decide`` the same question of each host's read, ahead of it.

**Example:**

.. code:: python

    plan = plan_rollout([("node1",), ("node2",)], {
        "node1": HostRollout(found=read1, releases={"sglang": "3f2a9c1d0b7e6a55"}, stack_id="dev-0a24"),
        "node2": HostRollout(found=read2, releases={"sglang": "3f2a9c1d0b7e6a55"}, stack_id="dev-0a24")})
    plan.restarts("node1")             # True: it serves 9c41d0e2a7b35f18 now
    plan.later[("node1", "sglang")]    # True: node2 has its compile caches' key, and restarts after it
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sglfleet.host.compile_cache import cache_key
from sglfleet.host.layout import LAYOUT
from sglfleet.plan.weights import weights_change

ACTIONS = ("relink", "wait", "restart", "noop", "bake", "switch", "update")
# The actions that restart a service (a wait most likely does, once the other run's lock is free);
# an update loads the new weights into the running server (sglfleet.plan.weights).
RESTARTS = ("switch", "restart", "wait")


def _baked(verdict: dict) -> bool:
    return bool((verdict.get("bake") or {}).get("passed"))


def decide(found, release_id: str, rebuilt: bool, bake_s: float, in_place: bool = False) -> str:
    """
    What a host's rollout step does, one of ``ACTIONS``, from what the host holds and serves.

    + found: the host's ``ReleaseState`` (``ReleaseHostState``)
    + release_id: the release it should serve
    + rebuilt: its stack was built again this run (it drifted): the process loaded the old files
    + bake_s: the batch's bake (0: none)
    + in_place: the release differs from the one it serves in the model's weights alone, and they may be
      loaded into the running server (``sglfleet.plan.weights.WeightsChange``): an update, not a switch

    **Example:**

    .. code:: python

        decide(ReleaseHostState(current="3f2a", serving="3f2a", active_state="active"), "3f2a", False, 0)  # "noop"
    """
    active = found.active_state == "active"
    serves = found.current == release_id and found.serving == release_id and active
    if found.serving == release_id and active and found.current != release_id and not found.busy and not rebuilt:
        return "relink"  # a hand moved current; the process serves what was declared
    if found.busy:
        return "wait"  # another run holds the lock: the host tool waits, then switches if still needed
    if serves and rebuilt:
        return "restart"
    if serves and (not bake_s or _baked(found.verdict)):
        return "noop"
    if serves:
        return "bake"  # an earlier run ended between the gate and the end of the bake
    if in_place and not rebuilt and active and found.serving and found.serving == found.current:
        return "update"
    return "switch"


def rebuilt(found) -> bool:
    """
    Whether this run builds the host's stack again (the stack step): it drifted, and its
    processes loaded the drifted files, so they restart even where they serve their release.

    + found: the host's read (``sglfleet.facts.host.HostState``)
    """
    return found.stack.built and bool(found.stack.drift)


def later_of(batches: list[tuple], keys: dict, restarting: set) -> dict:
    """
    For each entry of the rollout (a host, or a host's service), whether an entry of a later
    batch with the same key restarts in this run: only then are its caches worth packing or serving.

    + batches: the entries of each batch, in order
    + keys: each entry's ``compile_cache.cache_key`` (``Layout.compile_key`` for a service)
    + restarting: the entries this run restarts

    **Example:**

    .. code:: python

        later_of([("n1",), ("n2", "n3")], {"n1": "a", "n2": "a", "n3": "b"}, {"n1", "n2", "n3"})
        # {"n1": True, "n2": False, "n3": False}
    """
    later: dict = {}
    waiting: set = set()  # the keys of the entries after the batch at hand that restart
    for entries in reversed(batches):
        for name in entries:
            later[name] = keys[name] in waiting
        waiting |= {keys[name] for name in entries if name in restarting}
    return later


@dataclass(frozen=True)
class HostRollout:
    """
    One serving host as the rollout plan takes it.

    + found: its read (``sglfleet.facts.host.HostState``), or None where the read failed: the host
      fails alone, restarts nothing and shares nothing
    + releases: ``{service: release id}`` the run serves, for each of its services in order
    + bake_s: its batch's bake (0: none)
    + stack_id: the stack its releases run, the first part of its compile caches' key
    + weights: ``{service: WeightsPolicy}``: how each new release may reach it (``sglfleet.plan.weights``);
      a service without one restarts
    """

    found: Any
    releases: dict[str, str]
    bake_s: float = 0
    stack_id: str = ""
    weights: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RolloutPlan:
    """
    This run's rollout as each host's steps will decide it.

    + actions: ``{host: {service: action}}``: what each service's rollout step will do (``decide``),
      None where its read has no answer for it; ``{}`` for a host whose read failed
    + keys: ``{(host, service): key}``: the key each service shares compile caches under
    + later: ``{(host, service): bool}``: a later batch's service of the same key restarts in this run
    """

    actions: dict[str, dict[str, str | None]]
    keys: dict[tuple[str, str], str] = field(default_factory=dict)
    later: dict[tuple[str, str], bool] = field(default_factory=dict)

    def restarts(self, host: str, among: tuple[str, ...] = RESTARTS) -> bool:
        """Whether this run restarts any service of ``host``: one of its actions is in ``among``."""
        return any(action in among for action in self.actions.get(host, {}).values())


def host_actions(one: HostRollout) -> dict[str, str | None]:
    """What the rollout step of each service of one host will do, by service; {} where its read failed."""
    found = one.found
    if found is None or found.release is None:
        return {}  # the read failed, and with it the host
    return {name: None if (served := found.services.get(name)) is None
            else decide(served, release_id, rebuilt(found), one.bake_s, in_place(served, one.weights.get(name)))
            for name, release_id in one.releases.items()}


def in_place(served, policy) -> bool:
    """Whether a service's new release is loaded into its running server (``weights_change``), from its read."""
    if policy is None:
        return False
    change = weights_change(served.current_release, policy)
    return bool(change and change.in_place)


def _key(name: str, one: HostRollout, service: str) -> str:
    if one.found is None:
        return f"{name}+unread+{service}"  # its read failed: it shares with nobody
    gpus = [(gpu.compute_cap, gpu.driver) for gpu in one.found.gpus]
    return LAYOUT.for_service(service).compile_key(cache_key(one.stack_id, gpus))


def plan_rollout(batches: list[tuple[str, ...]] | tuple, hosts: dict[str, HostRollout]) -> RolloutPlan:
    """
    The rollout of ``hosts`` as their steps will decide it, and which of their services hand
    compile caches on to a later batch.

    + batches: the hosts of each batch, in order (every one of them in ``hosts``); () for no sharing
    + hosts: each host the plan answers for, by name

    **Example:**

    .. code:: python

        plan_rollout([("node1",), ("node2",)], {"node1": HostRollout(read1, {"sglang": "3f2a"}, 0, "dev"),
                                                "node2": HostRollout(read2, {"sglang": "3f2a"}, 0, "dev")})
    """
    actions = {name: host_actions(one) for name, one in hosts.items()}
    keys = {(name, service): _key(name, one, service) for name, one in hosts.items() for service in one.releases}
    restarting = {(name, service) for name, services in actions.items()
                  for service, action in services.items() if action in RESTARTS}
    entries = [tuple((name, service) for name in batch for service in hosts[name].releases) for batch in batches]
    return RolloutPlan(actions=actions, keys=keys, later=later_of(entries, keys, restarting))
