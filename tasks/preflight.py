"""Preflight: does each host fit its stack (GPU, driver, architecture, python3 and glibc, disk), and its services their GPUs? A host that does not fails alone."""

from pyinfra.api import deploy

from sglfleet.artifacts import wheelhouse
from sglfleet.artifacts.stacks import loadable
from sglfleet.operations import stack as stack_ops
from sglfleet.plan.measured import record
from sglfleet.plan.multinode import gpus_per_host
from sglfleet.plan.pd import role_of
from sglfleet.plan.preflight import Declared, PdService, check, fitting_instead, rdma_problems
from sglfleet.plan.services import gpu_problems
from sglfleet.controller.wheels import host_wheels


@deploy("Preflight")
def preflight(plan, found, run):
    """
    + plan: the host's plan (``sglfleet.plan.fleet_plan.HostPlan``)
    + found: its read (``sglfleet.controller.reads.read_host``)
    + run: this run's record (``sglfleet.record.run``), where the wheels fetched this run are kept
    """
    config = plan.config
    stack = plan.build(found.os.python_minor).stack
    host_wheels(run, stack)  # fetched and checked against the lock before any host changes
    unpacked = 0 if found.stack.verified else wheelhouse.unpacked_size(stack)
    if plan.is_gateway:  # no GPU preflight: the gateway's python and disk for its stack
        problems = check(plan.name, stack, [], found.stack.disk_free, True, found.os, built=found.stack.verified,
                         unpacked=unpacked)
        if problems:
            stack_ops.fits(name=f"Preflight for stack {stack.name}", problems=problems)
        return
    record(plan.name, found.gpus, found.os)  # the lint judges the next run's flags and stack by what was measured
    services = plan.services
    # With services, each one's tp_size was checked against its own GPUs; they must exist here.
    # A group's host runs its share of tp_size (sglfleet.plan.multinode).
    declared = Declared(config.gpu_compute_cap, config.gpu_count, 1 if config.services else gpus_per_host(config.launch))
    problems = check(plan.name, stack, found.gpus, found.stack.disk_free, config.gpu_less, found.os,
                     built=found.stack.verified, declared=declared, unpacked=unpacked,
                     others=fitting_instead(stack, found.os, config.gpu_less, loadable))
    if found.gpus:  # a GPU-less host's services were checked against its gpu_count, if any
        problems += gpu_problems(plan.name, list(services), len(found.gpus))
    if not config.gpu_less and config.server == "sglang":  # the stand-in moves its "KV" over HTTP
        pd = [PdService(s.name, role_of(s.config), s.config.launch.disaggregation_transfer_backend,
                        s.config.launch.disaggregation_ib_device) for s in services if role_of(s.config)]
        problems += rdma_problems(plan.name, pd, found.rdma, config.disaggregation_allow_tcp)
    if problems:  # a host that fits has no preflight operation: nothing to say, nothing to run
        stack_ops.fits(name=f"Preflight for stack {stack.name}", problems=problems)
