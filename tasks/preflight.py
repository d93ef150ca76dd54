"""Preflight: does each host fit its stack (GPU, driver, architecture, python, disk)? A host that does not fails alone."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet import wheelhouse
from sglfleet.context import host_config
from sglfleet.facts.gpu import NvidiaGpus
from sglfleet.facts.stack import StackState
from sglfleet.measured import record
from sglfleet.operations import stack as stack_ops
from sglfleet.operations.stack import VERIFIED
from sglfleet.preflight import Declared, check
from tasks.stack import stack_or_refuse


@deploy("Preflight")
def preflight():
    config = host_config(host)
    stack = stack_or_refuse()
    gpus = host.get_fact(NvidiaGpus)
    record(host.name, gpus)  # the lint judges the next run's flags by what was measured
    state = host.get_fact(StackState, stack_id=stack.id, python=stack.python, uv_version=stack.uv.version,
                           hash_wheels=False, full=config.verify_stacks == "full")
    if state.verified:
        VERIFIED.add(host.name)  # the stack step needs no round trip to know it
    declared = Declared(config.gpu_compute_cap, config.gpu_count, config.launch.tp_size)
    problems = check(host.name, stack, gpus, state.disk_free, config.gpu_less, state.python,
                     built=state.verified, declared=declared,
                     unpacked=0 if state.verified else wheelhouse.unpacked_size(stack))
    stack_ops.fits(name=f"Preflight for stack {stack.name}", problems=problems)
