"""Roll out, or back, wave by wave: each wave starts only when the one before passed its gates and bake."""

from pyinfra import host, inventory, state
from pyinfra.api import deploy

from sglfleet.context import fleet_waves, host_config, host_release
from sglfleet.operations import release
from sglfleet.operations.stack import REBUILT


def _worker_url(config) -> str:
    """This host's URL as the router knows it."""
    return f"http://{host.data.get('ssh_hostname') or host.name}:{config.launch.listen_port}"


def _steps(config):
    """This run's waves in order, each with this host's step, or None where the host is not in it."""
    earlier: list[str] = []
    for wave in fleet_waves(inventory, [h.name for h in inventory if state.is_host_in_limit(h)]):
        yield None if host.name not in wave.hosts else release.WaveStep(
            wave=wave.name,
            earlier_hosts=tuple(earlier),
            bake_s=config.gate_bake_s,
            router_url=config.router_url,
            worker_url=_worker_url(config) if config.router_url else None,
            # Another run's switch holds the lock through a gate, a bake and a rollback's gate.
            lock_wait_s=2 * config.gate_warmup_s + config.gate_bake_s + 300,
            # The host tool may wait for that lock, then gate, then gate a rollback:
            # past that, the link is gone, not slow.
            timeout_s=config.gate_answer_timeout_s or 4 * config.gate_warmup_s + config.gate_bake_s + 600,
        )
        earlier += wave.hosts


# pyinfra orders operations by call site, then by loop position: each host's one
# switch takes its wave's place, so the waves still run in order, and a host has
# no operation in the waves it is not in.
@deploy("Roll out")
def roll_out():
    release_id = host_release(host).release_id
    for step in host.loop(_steps(host_config(host))):
        if step:
            release.activated(name=f"Wave {step.wave}: serve the staged release",
                              release_id=release_id, step=step, restart=host.name in REBUILT)


@deploy("Roll back")
def roll_back():
    for step in host.loop(_steps(host_config(host))):
        if step:
            release.rolled_back(name=f"Wave {step.wave}: back to the previous release", step=step)
