"""Roll out, or back, wave by wave: each wave starts only when the one before passed."""

import shlex

from pyinfra import host, inventory, state
from pyinfra.api import deploy

from sglfleet.context import fleet_waves, host_config, host_release
from sglfleet.operations import release


def _gate_args(config):
    args = ["--warmup-s", f"{config.gate_warmup_s:g}", "--prompt", shlex.quote(config.gate_generate_prompt)]
    if config.gate_min_spec_accept_length is not None:
        args += ["--min-spec-accept-length", f"{config.gate_min_spec_accept_length:g}"]
    return args


def _router(config):
    worker = f"http://{host.data.get('ssh_hostname') or host.name}:{config.port}"
    return {"router_url": config.router_url, "worker_url": worker if config.router_url else None}


def _waves():
    return fleet_waves(inventory, [h.name for h in inventory if state.is_host_in_limit(h)])


@deploy("Roll out")
def roll_out():
    config = host_config(host)
    release_id = host_release(host).release_id
    earlier: list[str] = []
    # Every host calls the same operations in the same order, so pyinfra runs
    # them wave by wave (one operation each); a host acts only in its own wave.
    for wave in _waves():
        release.activated(
            name=f"Wave {wave.name}: serve the staged release",
            release_id=release_id,
            wave_name=wave.name,
            in_wave=host.name in wave.hosts,
            earlier_wave_hosts=list(earlier),
            gate_args=_gate_args(config),
            **_router(config),
        )
        earlier += wave.hosts


@deploy("Roll back")
def roll_back():
    config = host_config(host)
    earlier: list[str] = []
    for wave in _waves():
        release.rolled_back(
            name=f"Wave {wave.name}: back to the previous release",
            wave_name=wave.name,
            in_wave=host.name in wave.hosts,
            earlier_wave_hosts=list(earlier),
            gate_args=_gate_args(config),
            **_router(config),
        )
        earlier += wave.hosts
