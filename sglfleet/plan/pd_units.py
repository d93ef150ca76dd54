"""
The rollout unit of a PD fleet: prefills and decodes that move together, so that no request is ever
served by a prefill and a decode of different releases; and of a fleet with groups, one server over
several hosts (``sglfleet.plan.multinode``), whose ranks only serve together. Pure. docs/pd.md and
docs/topologies.md say why it is built so.

smg picks a request's prefill and its decode each on its own, from the workers of each role that
are available (smg ``pd_router.rs:808-895``, ``pick_worker_by_policy_arc`` 898-950: filtered by
role, model and ``is_available`` only): any prefill the gateway routes to may meet any decode it
routes to. So the gateways route to one release at a time, and the rollout flips them once:

- **Units.** A wave's hosts are dealt into units, each with prefills and decodes
  (``units_of``: as many units as the wave has of its scarcer role). ``rollout_serial``
  counts units, and a batch is whole units of one wave.
- **Decode first.** A batch switches its decodes, then its prefills, each behind its own gate
  (a server alone, on sglang's solo bootstrap path). A unit whose decode failed does not
  switch its prefills; a unit that failed anywhere rolls its switched hosts back.
- **The flip.** The first batch's hosts leave the gateways and stay out after their gates
  (``hold``): the gateways route to the old release only. Once the batch is within the
  failure budget, every worker not of it leaves the gateways, and then its units join: from
  then on the gateways route to the new release only. A first batch over the budget rolls
  back whole and rejoins, with nothing flipped.
- **After the flip** each batch's hosts, out of the gateways since the flip, switch and join.
  A unit that fails there rolls back and stays out: the gateways serve the new release.
- **Groups** (a fleet with ``nodes``, no PD roles): a group is a unit, a host alone a unit of one.
  A batch leaves the gateways first (its heads: the other ranks are no workers), then every host of
  it stops (no rank of the old release may join a new head's rendezvous), then every host of it
  switches at once (a rank waits for the others at the head's rendezvous), each behind its gate,
  none rolling back alone; at the settle, a unit with a failed host rolls back whole, at once, and
  the head rejoins. No flip: the gateways route to either release, as for whole servers.

**Example:**

.. code:: python

    batches = plan_units(waves, [1, "50%"], {"node1": "prefill", "node2": "decode", ...})
    steps = unit_steps(batches, roles)     # decodes, prefills, settle, ... in order
    settle(switched=True, unit_failed=False, over_budget=False, flip=True)   # "join"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sglfleet.plan.pd import DECODE, PREFILL
from sglfleet.plan.waves import Wave, batch_sizes

Unit = tuple[str, ...]


def units_of(hosts: Sequence[str], roles: Mapping[str, str], groups: Mapping[str, Sequence[str]] | None = None) -> list[Unit]:
    """
    A wave's hosts dealt into units: as many as the wave has of its scarcer role, each with its
    share of both roles in inventory order; a wave of one role only: one unit a host. With
    ``groups`` (host -> its group's hosts, in rank order), each group is one unit, head first.

    **Example:**

    .. code:: python

        units_of(["n1", "n2", "n3", "n4"], {"n1": "prefill", "n2": "decode", "n3": "prefill", "n4": "decode"})
        # [("n1", "n2"), ("n3", "n4")]
    """
    if groups:
        return list(dict.fromkeys(tuple(groups[h]) if h in groups else (h,) for h in hosts))
    prefills = [h for h in hosts if roles.get(h) == PREFILL]
    decodes = [h for h in hosts if roles.get(h) == DECODE]
    count = min(len(prefills), len(decodes))
    if not count:
        return [(host,) for host in hosts]
    units: list[list[str]] = [[] for _ in range(count)]
    for hosts_of_role in (prefills, decodes):
        for index, host in enumerate(hosts_of_role):
            units[index * count // len(hosts_of_role)].append(host)
    order = {host: i for i, host in enumerate(hosts)}
    return [tuple(sorted(unit, key=order.get)) for unit in units]


@dataclass(frozen=True)
class UnitBatch:
    """Whole units of one wave that switch together: the PD ``Batch``."""

    wave: str
    number: int
    units: tuple[Unit, ...]

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(host for unit in self.units for host in unit)

    @property
    def name(self) -> str:
        return f"{self.wave} batch {self.number}"

    def unit_of(self, host: str) -> Unit:
        return next(unit for unit in self.units if host in unit)


def plan_units(waves: Sequence[Wave], serial, roles: Mapping[str, str],
               groups: Mapping[str, Sequence[str]] | None = None) -> list[UnitBatch]:
    """
    Cut waves into batches of whole units: ``rollout_serial``'s sizes count units, as
    ``sglfleet.plan.waves.plan_batches`` counts hosts (percentages of every unit, the last
    size repeating, never across a wave).

    + waves: the rollout's waves (serving hosts only)
    + serial: ``rollout_serial``, or None (each wave whole)
    + roles: each serving host's role
    + groups: each group host's group, in rank order (``units_of``); a group counts as one unit
    """
    units = [(wave.name, units_of(wave.hosts, roles, groups)) for wave in waves]
    sizes = batch_sizes(serial, sum(len(of_wave) for _, of_wave in units))
    batches: list[UnitBatch] = []
    for name, left in units:
        while left:
            size = sizes[min(len(batches), len(sizes) - 1)]
            batches.append(UnitBatch(name, len(batches) + 1, tuple(left[:size])))
            left = left[size:]
    return batches


def unit_problems(batches: Sequence[UnitBatch], roles: Mapping[str, str]) -> list[str]:
    """The first batch is the new release's first generation: it needs a unit with both roles (one line, or none)."""
    if not batches:
        return []
    first = batches[0]
    if any({roles.get(h) for h in unit} >= {PREFILL, DECODE} for unit in first.units):
        return []
    return [f"{first.name} ({', '.join(first.hosts)}): the first batch of a PD rollout flips the gateways to the "
            f"new release, and needs a prefill and a decode to serve it; put one of each in its wave "
            f"(e.g. the canary group)"]


@dataclass(frozen=True)
class UnitStep:
    """
    One step of a unit rollout, in order: a role's switch within a batch, or the batch's settle.

    + kind: ``"switch"`` (the batch's hosts of ``role`` switch, each behind its gate),
      ``"settle"`` (a failed unit's switched hosts roll back; the first batch flips the gateways),
      ``"drain"`` (a batch of groups leaves the gateways before any of its hosts stops), ``"stop"``
      (then every host of it stops before any starts)
    + batch: its ``UnitBatch``
    + role: the role that switches (``"switch"`` only; None: every host of the batch, a batch of groups)
    + hold: a host that passes stays out of the gateways until the flip (the first batch of a PD fleet)
    """

    kind: str
    batch: UnitBatch
    role: str | None = None
    hold: bool = False

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.batch.hosts

    @property
    def flip(self) -> bool:
        return self.kind == "settle" and self.hold

    def label(self, roles: Mapping[str, str]) -> str:
        if self.kind == "switch":
            return self.batch.name + (f" {self.role}s" if self.role else "")
        return f"{self.batch.name} {self.kind}"


def unit_steps(batches: Sequence[UnitBatch], roles: Mapping[str, str]) -> list[UnitStep]:
    """
    The order of a PD rollout: per batch, its decodes, its prefills, then its settle; without roles
    (a fleet of groups), per batch its drain, its stop, its switch, then its settle.

    + batches: ``plan_units``
    + roles: each serving host's role ({}: a fleet of groups)
    """
    if not roles:
        return [UnitStep(kind, batch) for batch in batches for kind in ("drain", "stop", "switch", "settle")]
    steps = []
    for batch in batches:
        hold = batch.number == 1
        for role in (DECODE, PREFILL):  # decode first: docs/pd.md says why
            if any(roles.get(h) == role for h in batch.hosts):
                steps.append(UnitStep("switch", batch, role, hold))
        steps.append(UnitStep("settle", batch, hold=hold))
    return steps


def rejoins(passed: bool, rolled_back: bool, hold: bool) -> bool:
    """
    Whether a host rejoins the gateways right after its gate: it passed outside the first batch
    (the gateways serve the new release), or its gate failed in the first batch and it serves
    the old release again (the gateways still serve it).
    """
    return (passed and not hold) or (rolled_back and hold)


def settle(switched: bool, unit_failed: bool, over_budget: bool, flip: bool, together: bool = False) -> str:
    """
    What one host that is still up does when its batch settles.

    + switched: it serves the new release (it passed its gate this run)
    + unit_failed: a host of its unit failed (its gate, its bake, its link)
    + over_budget: the batch's failed units are above ``max_fail_percentage``
    + flip: the batch is the first: the gateways flip to it
    + together: its unit is a group: a member whose gate failed did not roll back alone, so every
      member still up goes back, and rejoins (the gateways route to either release)

    Returns ``"serve"`` (nothing to do), ``"join"`` (join the gateways at the flip),
    ``"rollback"`` (back to the previous release, then rejoin: the gateways serve it),
    ``"rollback-out"`` (back to the previous release and out of the gateways: they serve the new one).
    """
    if together:
        return "rollback" if unit_failed else "serve"
    if flip and over_budget:
        return "rollback" if switched else "serve"
    if unit_failed:
        return "rollback-out" if switched else "serve"
    return "join" if flip and switched else "serve"


def failed_units(batch: UnitBatch, failed_hosts) -> list[Unit]:
    """The batch's units with a failed host."""
    failed = set(failed_hosts)
    return [unit for unit in batch.units if failed & set(unit)]


def over_budget(batch: UnitBatch, failed_hosts, max_fail_percentage: float) -> bool:
    """Whether the batch's failed units are above ``max_fail_percentage`` of its units."""
    failed = len(failed_units(batch, failed_hosts))
    return failed * 100 > max_fail_percentage * len(batch.units)


def capacity(batches: Sequence[UnitBatch], roles: Mapping[str, str]) -> list[tuple[str, float]]:
    """
    The share of each role's workers the gateways route to during each step, as ``(step, share)``
    with the lower of the two roles' shares: what each batch costs.

    **Example:**

    .. code:: python

        capacity(plan_units(waves, [1], roles), roles)
        # [("canary batch 1 switching", 0.5), ("flip", 0.5), ("wave1 batch 2 switching", 0.5), ("done", 1.0)]
    """
    totals = {role: sum(1 for r in roles.values() if r == role) for role in (PREFILL, DECODE)}

    def share(routed) -> float:
        return min(sum(1 for h in routed if roles.get(h) == role) / totals[role] for role in totals if totals[role])

    everyone = [host for batch in batches for host in batch.hosts]
    out, new = [], []
    for batch in batches:
        if batch.number == 1:
            out.append((f"{batch.name} switching", share([h for h in everyone if h not in batch.hosts])))
            new += batch.hosts
            out.append(("flip", share(new)))
        else:
            out.append((f"{batch.name} switching", share(new)))
            new += batch.hosts
    out.append(("done", share(new)))
    return out
