"""Stack: the host's locked wheel stack, its wheels fanned out from the controller through peer hosts, built offline, verified."""

from pyinfra import host, state
from pyinfra.api import deploy

from sglfleet.artifacts.fanout import rounds, turns
from sglfleet.artifacts.temporaries import RUN_TOKEN
from sglfleet.facts.host import READ
from sglfleet.operations import stack as stack_ops
from sglfleet.plan.pd import role_of
from sglfleet.controller.reads import peer_read
from sglfleet.controller.wheels import host_wheels


@deploy("Stack")
def install_stack(fleet, plan, found, run):
    """
    + fleet: this run's plan (``sglfleet.plan.fleet_plan.FleetPlan``)
    + plan: the host's (``HostPlan``)
    + found: its read (``sglfleet.controller.reads.read_host``)
    + run: this run's record (``sglfleet.record.run``): the wheels fetched, the peers' reads
    """
    config = plan.config
    stack = plan.build(found.os.python_minor).stack
    # The controller's copies, fetched and checked against the lock once this run: the operations fetch none.
    wheels = host_wheels(run, stack)
    # Built and unchanged when the host was read: that answer holds. Else the stack
    # is read again once its wheels have come.
    known = found.stack if found.stack.verified else READ
    # pyinfra orders operations by call site, then loop position: one operation a round.
    # Gateways fan out among themselves: their wheelhouses hold none of a serving host's wheels.
    targets = fleet.targeted(gateways=plan.is_gateway)
    shares = list(turns(plan.name, [(one.name, one.address) for one in targets], config.distribution,
                        config.share_port, f"sglfleet-share-{RUN_TOKEN}"))
    for share in host.loop(shares):
        if share and known is READ:  # a stack built and unchanged needs no wheel
            stack_ops.wheels_fanned_out(name=f"Stack {stack.id}: wheels, round {share.round}", stack=stack,
                                        share=share, wheels=wheels, full_check=config.verify_stacks == "full",
                                        found=known,
                                        peers_hold=_peers_hold(fleet, run, targets, share.round) if share.sources else None)
    stack_ops.installed(
        name=f"Stack {stack.id} built, verified, old stacks collected",
        stack=stack,
        wheels=wheels,
        gpu_less=config.gpu_less,
        keep=config.stacks_keep,
        full_check=config.verify_stacks == "full",
        found=known,
        # A host that fetches wheels serves them to later rounds, until every stack is built.
        sharing=next((s.unit for s in shares if s and s.serves), None) if known is READ else None,
        textfile_dir=config.textfile_dir,
        patched=list(plan.patch_files),
        # The probe imports the transfer backend of each PD service (a real sglang's: the stand-in loads none).
        backends=sorted({s.config.launch.disaggregation_transfer_backend for s in plan.services
                         if role_of(s.config) and s.config.server == "sglang"}),
    )


def _peers_hold(fleet, run, targets, round_number: int) -> frozenset[str]:
    """
    The wheels the hosts of the rounds before ``round_number`` hold by then: each one's stack for its
    own Python. A wheel of another interpreter no such peer has; a host that never connected (a refused
    host key), or whose read failed, serves nothing.
    """
    active = {one.name for one in state.inventory.get_active_hosts()}
    earlier = [peer for hosts in rounds(targets)[:round_number] for peer in hosts if peer.name in active]
    reads = {peer.name: peer_read(peer.name, fleet, run) for peer in earlier}
    return frozenset(f.filename for peer in earlier if reads[peer.name] is not None
                     for f in peer.build(reads[peer.name].os.python_minor).stack.files)
