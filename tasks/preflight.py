"""Preflight: does each host fit its stack (GPU, driver, architecture, python, disk)? A host that does not fails alone."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.context import host_config
from sglfleet.facts.gpu import NvidiaGpus
from sglfleet.facts.stack import StackState
from sglfleet.operations import stack as stack_ops
from sglfleet.preflight import check
from tasks.stack import stack_or_refuse


@deploy("Preflight")
def preflight():
    config = host_config(host)
    stack = stack_or_refuse()
    gpus = host.get_fact(NvidiaGpus)
    state = host.get_fact(StackState, stack_id=stack.id, python=stack.python, uv_version=stack.uv.version,
                           hash_wheels=False)
    problems = check(host.name, stack, gpus, state.disk_free, config.gpu_less, state.python, built=state.verified)
    stack_ops.fits(name=f"Preflight for stack {stack.name}", problems=problems)
