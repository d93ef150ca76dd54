"""
Each targeted host read once a run, in one command (``sglfleet.facts.host.HostRead``): what
the converge decides from. The first host to ask starts every targeted host's read at
once, so the hosts whose deploys load side by side wait on the same reads, and a step
that plans across the fleet (the rollout) finds every peer's answer. The answers live in
the run's record (``sglfleet.record.run``), passed in; the tasks are handed theirs as a value.

**Example:**

.. code:: python

    found = read_host(host, fleet, run)     # this host's HostState
    peer_read("node2", fleet, run)          # another's, or None where its read failed
    rollout_plan(fleet, run).restarts("node2")   # what its rollout step will do, as its read says
"""

from __future__ import annotations

import gevent
from pyinfra import state
from pyinfra.api import Host
from pyinfra.api.arguments import pop_global_arguments
from pyinfra.context import ctx_host, ctx_state

from sglfleet.artifacts.models import ModelError, load_manifest
from sglfleet.artifacts.patchsets import for_file
from sglfleet.facts.host import HostRead, HostState
from sglfleet.host.layout import GATEWAY, LAYOUT
from sglfleet.host.stacks import PATCHED, patched
from sglfleet.plan.fleet_plan import FleetPlan, HostPlan
from sglfleet.plan.rollout_plan import RolloutPlan, plan_rollout
from sglfleet.plan.rollout_steps import host_rollout
from sglfleet.record.run import RunRecord
from sglfleet.controller.wheels import patched_digests


def read_arguments(plan: HostPlan, sudo: dict, run: RunRecord) -> dict:
    """
    What ``HostRead`` reads on a host, and how it becomes root.

    + plan: the host's plan
    + sudo: pyinfra's global arguments for the host (``pop_global_arguments``): its ``_sudo`` and friends
    + run: the run's record, where the stacks' wheels fetched this run are kept
    """
    config, stack = plan.config, plan.stack
    # sudo -n is asked inside the read; a sudo password or user is pyinfra's to use.
    own_sudo = bool(sudo.get("_sudo")) and not any(
        sudo.get(key) for key in ("_sudo_password", "_sudo_user", "_use_sudo_login", "_preserve_sudo_env"))
    common = {"python": stack.pythons[0], "uv_version": stack.uv.version, "full": config.verify_stacks == "full",
              "sudo_check": own_sudo, **({"_sudo": False} if own_sudo else {}),
              "firewall_known": [plan.policy.digest] if plan.policy else None}
    if plan.is_gateway:
        # Its stack for each Python: the host's python3 picks its own in the read.
        variants = {python: {"stack_id": build.stack.id, "patch_path": None, "patch_known": [], "release_id": None}
                    for python, build in plan.builds.items()}
        return {**common, **variants[stack.pythons[0]], "variants": variants, "user": GATEWAY.service_user,
                "gateway_unit": GATEWAY.unit, "gateway_runtime_dir": GATEWAY.runtime_dir,
                "paths": sorted([GATEWAY.env_file, GATEWAY.unit_file, GATEWAY.gateway_launcher,
                                 *(one["path"] for one in plan.build(None).gateway.tls)])}
    # Each Python the stack serves: the host's python3 picks its own in the read.
    variants = {}
    for python, build in plan.builds.items():
        built = build.stack

        def known(member: str) -> list[str]:
            return sorted(patched_digests(run, built, member, for_file(list(plan.patch_sets), built.sglang_version, member)))

        variants[python] = {"stack_id": built.id, "patch_path": f"{built.venv}/{patched(python)}",
                            "patch_known": known(PATCHED),
                            # The other files the patch step visits, in the same read: a no-op converge
                            # stays one command a host.
                            "patch_more": {f"{built.venv}/{patched(python, member)}": known(member)
                                           for member in plan.patch_files if member != PATCHED},
                            "release_id": build.releases[plan.services[0].name].release_id}
        if config.services:  # each service's releases, read in the same command
            variants[python]["service_releases"] = {name: release.release_id
                                                    for name, release in build.releases.items()}
    paths = [*(path for service in plan.services for path in (service.layout.env_file, service.layout.unit_file)),
             *plan.tool_files, *(one["path"] for files in plan.service_files.values() for one in files.tls)]
    try:
        spec = [{"dir": model.dir, "digest": load_manifest(model.repo, model.revision).digest}
                for model in plan.models]
    except ModelError:
        spec = None  # the models step reads its own and says what is missing
    return {**common, **variants[stack.pythons[0]], "variants": variants, "user": LAYOUT.service_user,
            "paths": sorted(paths), "model_spec": spec or None, "patched": list(plan.patch_files)}


def read_host(host: Host, fleet: FleetPlan, run: RunRecord) -> HostState:
    """
    Everything the converge decides from on ``host`` (``sglfleet.facts.host.HostState``),
    read once a run: the first call reads every targeted host at once, one command each.

    + host: ``pyinfra.host``
    + fleet: this run's plan (``sglfleet.plan.fleet_plan.fleet_plan``)
    + run: this run's record (``sglfleet.record.run.record``), where the reads are kept

    **Example:**

    .. code:: python

        read_host(host, fleet, run).release.current   # "3f2a9c1d0b7e6a55"
    """
    # One greenlet per host: hosts whose deploys load side by side wait on the same reads.
    if host.name not in run.reads:
        hosts = [h for h in state.inventory.get_active_hosts() if state.is_host_in_limit(h)]
        # The host itself, not pyinfra's context proxy of the host being loaded.
        start_reads(state, [state.inventory.get_host(host.name), *hosts], fleet, run)
    return run.reads[host.name].get()


def start_reads(state, hosts: list[Host], fleet: FleetPlan, run: RunRecord) -> None:
    """
    Start the read of each of ``hosts`` not yet read, each in a greenlet of its own.

    + state: pyinfra's state of the run
    + hosts: the hosts to read
    + fleet: this run's plan
    + run: this run's record, where each read's greenlet is kept
    """
    unread = [h for h in dict.fromkeys(hosts) if h.name not in run.reads]
    # A refusal stops the run before any read.
    arguments = {h.name: read_arguments(fleet.hosts[h.name], pop_global_arguments(state, h, {})[0], run)
                 for h in unread}

    def read(one: Host) -> HostState:
        with ctx_state.use(state.inventory.state), ctx_host.use(one):
            return one.get_fact(HostRead, **arguments[one.name])

    # Not pyinfra's pool: its slots may all be held by the deploys being loaded.
    run.reads.update({h.name: gevent.spawn(read, h) for h in unread})


def peer_read(name: str, fleet: FleetPlan, run: RunRecord) -> HostState | None:
    """
    Another host's read, or None where it failed: that host fails alone, in its own deploy,
    and a plan across the fleet leaves it out.

    + name: the other host's name
    + fleet: this run's plan
    + run: this run's record
    """
    greenlet = run.reads.get(name)
    if greenlet is None:
        try:
            return read_host(state.inventory.get_host(name), fleet, run)
        except Exception:  # its own deploy reports it
            return None
    greenlet.join()
    return greenlet.value if greenlet.successful() else None


def rollout_plan(fleet: FleetPlan, run: RunRecord) -> RolloutPlan:
    """
    What every host of this run's batches will do in its rollout steps, as their reads say
    (``sglfleet.plan.rollout_plan``), planned once a run: which hosts restart, and which hand
    compile caches on to a later batch.

    + fleet: this run's plan
    + run: this run's record, where the reads and the plan, once made, are kept
    """
    batches = tuple(batch.hosts for batch in fleet.rollout.batches)
    known = run.rollout_plans
    if batches not in known:
        known[batches] = plan_rollout(batches, {name: host_rollout(fleet.hosts[name], peer_read(name, fleet, run))
                                                for batch in batches for name in batch})
    return known[batches]
