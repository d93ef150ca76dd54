"""Stack: the host's locked wheel stack, its wheels fanned out from the controller through peer hosts, built offline, verified."""

from pyinfra import host, inventory, state
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError

from sglfleet import wheelhouse
from sglfleet.context import fleet_shares, host_config, host_stack
from sglfleet.operations import stack as stack_ops
from sglfleet.stacks import Stack, StackError
from sglfleet.temporaries import RUN_TOKEN


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
    # pyinfra orders operations by call site, then loop position: one operation a round.
    targets = [h for h in inventory if state.is_host_in_limit(h)]
    shares = fleet_shares(host, targets, config.distribution, config.share_port,
                          f"sglfleet-share-{RUN_TOKEN}")
    for share in host.loop(shares):
        if share:
            stack_ops.wheels_fanned_out(name=f"Stack {stack.id}: wheels, round {share.round}", stack=stack,
                                        share=share, full_check=config.verify_stacks == "full")
    stack_ops.installed(
        name=f"Stack {stack.id} built, verified, old stacks collected",
        stack=stack,
        gpu_less=config.gpu_less,
        keep=config.stacks_keep,
        full_check=config.verify_stacks == "full",
    )
