"""Stack: the host's locked wheel stack, synced from the controller's wheelhouse, built offline, verified."""

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError

from sglfleet import wheelhouse
from sglfleet.context import host_config, host_stack
from sglfleet.operations import stack as stack_ops
from sglfleet.stacks import Stack, StackError


def stack_or_refuse() -> Stack:
    """The host's stack, complete, hashed (or allowed unhashed), in the controller's wheelhouse; else a clear refusal."""
    try:
        stack = host_stack(host)
        stack.require_complete()
        # Every file fetched once and checked against the lock while the deploy is
        # planned: a wrong hash stops the run before any operation runs.
        wheelhouse.ensure(stack)
    except StackError as e:
        # A lock problem is the whole inventory's: stop before any host changes.
        raise PyinfraError(str(e)) from None
    return stack


@deploy("Stack")
def install_stack():
    config = host_config(host)
    stack = stack_or_refuse()
    stack_ops.installed(
        name=f"Stack {stack.id} built, verified, old stacks collected",
        stack=stack,
        gpu_less=config.gpu_less,
        keep=config.stacks_keep,
        full_check=config.verify_stacks == "full",
    )
