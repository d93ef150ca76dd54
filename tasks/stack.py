"""Stack: the host's locked wheel stack, its wheels fanned out from the controller through peer hosts, built offline, verified."""

from pyinfra import host, inventory, state
from pyinfra.api import deploy

from sglfleet.artifacts.temporaries import RUN_TOKEN
from sglfleet.facts.host import READ
from sglfleet.operations import stack as stack_ops
from sglfleet.plan.pd import role_of
from sglfleet.run.context import (complete_stack, fleet_shares, host_config, host_is_gateway, host_patch_files,
                                  host_services, host_state, host_wheels, peer_files)


@deploy("Stack")
def install_stack():
    config = host_config(host)
    stack = complete_stack(host)
    # The controller's copies, fetched and checked against the lock once this run: the operations fetch none.
    wheels = host_wheels(host)
    # Built and unchanged when the host was read: that answer holds. Else the stack
    # is read again once its wheels have come.
    found = host_state(host).stack
    known = found if found.verified else READ
    # pyinfra orders operations by call site, then loop position: one operation a round.
    # Gateways fan out among themselves: their wheelhouses hold none of a serving host's wheels.
    targets = [h for h in inventory if state.is_host_in_limit(h) and host_is_gateway(h) == host_is_gateway(host)]
    shares = list(fleet_shares(host, targets, config.distribution, config.share_port,
                               f"sglfleet-share-{RUN_TOKEN}"))
    for share in host.loop(shares):
        if share and known is READ:  # a stack built and unchanged needs no wheel
            stack_ops.wheels_fanned_out(name=f"Stack {stack.id}: wheels, round {share.round}", stack=stack,
                                        share=share, wheels=wheels, full_check=config.verify_stacks == "full",
                                        found=known,
                                        peers_hold=peer_files(targets, share.round) if share.sources else None)
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
        patched=host_patch_files(host),
        # The probe imports the transfer backend of each PD service (a real sglang's: the stand-in loads none).
        backends=sorted({s.config.launch.disaggregation_transfer_backend for s in host_services(host)
                         if role_of(s.config) and s.config.server == "sglang"}) if not host_is_gateway(host) else (),
    )
