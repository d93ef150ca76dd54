"""Preflight: does each host fit its stack (GPU, driver, architecture, python3 and glibc, disk), and its services their GPUs? A host that does not fails alone."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.artifacts import wheelhouse
from sglfleet.operations import stack as stack_ops
from sglfleet.plan.measured import record
from sglfleet.plan.pd import role_of
from sglfleet.plan.preflight import Declared, PdService, check, fitting_instead, rdma_problems
from sglfleet.plan.services import gpu_problems
from sglfleet.run.context import (complete_stack, host_config, host_is_gateway, host_services, host_state,
                                  loadable_stacks)


@deploy("Preflight")
def preflight():
    config = host_config(host)
    stack = complete_stack(host)
    found = host_state(host)
    if host_is_gateway(host):  # no GPU preflight: the gateway's python and disk for its stack
        problems = check(host.name, stack, [], found.stack.disk_free, True, found.os, built=found.stack.verified,
                         unpacked=0 if found.stack.verified else wheelhouse.unpacked_size(stack))
        if problems:
            stack_ops.fits(name=f"Preflight for stack {stack.name}", problems=problems)
        return
    record(host.name, found.gpus, found.os)  # the lint judges the next run's flags and stack by what was measured
    services = host_services(host)
    # With services, each one's tp_size was checked against its own GPUs; they must exist here.
    declared = Declared(config.gpu_compute_cap, config.gpu_count, 1 if config.services else config.launch.tp_size)
    problems = check(host.name, stack, found.gpus, found.stack.disk_free, config.gpu_less, found.os,
                     built=found.stack.verified, declared=declared,
                     unpacked=0 if found.stack.verified else wheelhouse.unpacked_size(stack),
                     others=fitting_instead(stack, found.os, config.gpu_less, lambda: loadable_stacks(host.inventory)))
    if found.gpus:  # a GPU-less host's services were checked against its gpu_count, if any
        problems += gpu_problems(host.name, services, len(found.gpus))
    if not config.gpu_less and config.server == "sglang":  # the stand-in moves its "KV" over HTTP
        pd = [PdService(s.name, role_of(s.config), s.config.launch.disaggregation_transfer_backend,
                        s.config.launch.disaggregation_ib_device) for s in services if role_of(s.config)]
        problems += rdma_problems(host.name, pd, found.rdma, config.disaggregation_allow_tcp)
    if problems:  # a host that fits has no preflight operation: nothing to say, nothing to run
        stack_ops.fits(name=f"Preflight for stack {stack.name}", problems=problems)
