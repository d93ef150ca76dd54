"""Gateway: on the hosts of the group gateways, SGLang's gateway, its files, and a restart one gateway at a time;
on the others, no gateway."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.facts.files import narrowed
from sglfleet.facts.host import READ
from sglfleet.host.layout import GATEWAY
from sglfleet.operations import files, gateway, secrets as secret_files, stack


@deploy("Gateway")
def install_gateway(fleet, plan, found):
    """
    + fleet: this run's plan (``sglfleet.plan.fleet_plan.FleetPlan``)
    + plan: the host's (``HostPlan``)
    + found: its read (``sglfleet.controller.reads.read_host``)
    """
    if not plan.is_gateway:
        # Last in the run: the host's clients had it until then.
        if found.installed.gateway:
            gateway.gateway_retired(name=f"No {GATEWAY.unit} outside group gateways", installed=True)
        return
    build = plan.build(found.os.python_minor)
    wanted = build.gateway
    gateway.sglang_retired(name="No sglang service on a gateway host", installed=found.installed.services,
                           textfile_dir=plan.config.textfile_dir)
    # The retired services' releases kept their stacks until now: left to the next converge, their
    # collection would be a change in a run that should make none.
    if found.installed.services:
        stack.collected_after_rollout(name="Stacks the retired sglang services kept, collected", stack=build.stack,
                                      keep=plan.config.stacks_keep)
    secret_files.secret_file(
        name=f"Secrets of {GATEWAY.unit}", path=GATEWAY.env_file,
        content=wanted.env, redacted=wanted.env_redacted, found=narrowed(found.files, [GATEWAY.env_file]),
    )
    # TLS: its client port's certificate and key, and the CA it verifies workers with; root-only (diffs show
    # fingerprints), handed to the DynamicUser service by systemd (LoadCredential=). They are in its digest.
    for one in wanted.tls:
        secret_files.secret_file(name=f"TLS of {GATEWAY.unit}: {one['path']}", path=one["path"],
                                 content=one["content"], redacted=one["redacted"],
                                 found=narrowed(found.files, [one["path"]]))
    in_place = {GATEWAY.gateway_launcher: (wanted.launcher, "644"), GATEWAY.unit_file: (wanted.unit.encode(), "644")}
    files.in_place(name=f"{GATEWAY.unit} and its launcher", files=in_place, found=narrowed(found.files, in_place))
    # pyinfra orders operations by call site, then loop position: one gateway's restart a
    # position, so two gateways are never down together (each restart returns once it routes).
    names = [name for name, _ in fleet.gateways]
    for turn in host.loop(names):
        if turn == host.name:
            gateway.serving(name=f"{GATEWAY.unit} serves its configuration", digest=wanted.digest,
                            earlier=tuple(names[:names.index(turn)]), found=found.gateway if found.gateway is not None else READ)
