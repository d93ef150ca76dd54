"""
The local fleet: the hosts ``sglfleet devfleet up`` booted, read from ``.fleet/fleet.json``.

node1 is the canary; the rest split into wave1 and wave2. Every host is a
GPU-less local host (Debian 12 or 13: ``sglfleet devfleet up --os bookworm,trixie``)
that runs the dev stack, built for its own python3, and the SGLang stand-in, reached
as production hosts are: over SSH as ``deploy`` with the fleet's key and strict
host-key checking, and root through passwordless sudo.
``SGLFLEET_DEVFLEET_USER=root`` logs in as root instead, without sudo;
``SGLFLEET_DEVFLEET_JUMP=1`` reaches every host but node1 through node1, the
bastion (``ProxyJump`` in ``.fleet/ssh_config.jump``). With the demo's mirror up
(``sglfleet devfleet mirror up``) and ``SGLFLEET_MODELS`` pointing at its
manifests, the hosts serve its tiny model and draft, pinned and staged from it.
``SGLFLEET_DEV_GATEWAYS=N`` puts the last N hosts in the group ``gateways``: they
run SGLang's real gateway (smg, round robin, health checks every second) in
front of the others, which then listen on their fleet address, open to the gateways alone. ``SGLFLEET_DEV_PD=1``
makes the serving hosts prefills and decodes in turn (node1 prefill, node2
decode, ...; docs/pd.md), the canary their first pair, and the gateway smg in PD mode.
``SGLFLEET_DEV_MULTINODE=1`` makes node1 and node2 one server over both hosts (node1 the head,
node2 rank 1; docs/topologies.md), the canary, beside the other serving hosts.

**Example:**

.. code:: shell

    sglfleet devfleet up --hosts 3
    pyinfra inventory/dev.py deploy.py -y
    SGLFLEET_DEV_GATEWAYS=1 pyinfra inventory/dev.py deploy.py -y   # node1-3 behind node4's gateway
"""

import json as _json
import os as _os

from sglfleet.devfleet import Fleet as _Fleet

_fleet = _Fleet()
_state = _fleet.state()
if not _state.get("hosts"):
    raise RuntimeError(
        f"no local fleet in {_fleet.state_file}: run `sglfleet devfleet up` first"
    )


_user = _os.environ.get("SGLFLEET_DEVFLEET_USER", "deploy")
_mirror = _fleet.state_dir / "mirror.json"
_mirror = _json.loads(_mirror.read_text()) if _mirror.is_file() else None
if _mirror and _os.environ.get("SGLFLEET_MODELS") != _mirror["manifests"]:
    _mirror = None  # the mirror is up, but this run does not use its manifests
_jump = _os.environ.get("SGLFLEET_DEVFLEET_JUMP") == "1"
_gateways = int(_os.environ.get("SGLFLEET_DEV_GATEWAYS") or 0)


def _host(name, extra=None):
    record = _state["hosts"][name]
    return (name, {
        "ssh_hostname": record["address"],
        "ssh_user": _user,
        "_sudo": _user != "root",
        "ssh_key": _state["ssh_key"],
        "ssh_known_hosts_file": _state["known_hosts"],
        "ssh_strict_host_key_checking": "yes",
        "secrets_file": str(_fleet.secrets_file),  # this fleet's keys: `sglfleet keys list inventory/dev.py`
        **({"ssh_config_file": _state["ssh_config"] + ".jump"} if _jump and name != "node1" else {}),
        "gpu_less": True,     # no GPU: preflight skips GPU checks, the unit runs the stand-in
        "stack": "dev",       # files/stacks/dev.toml: real wheels, sglang without CUDA deps
        "server": "standin",  # files/standin/ in place of the GPU-only sglang server
        "standin_warmup_s": 1,  # the stand-in "loads the model" this long: nothing listens meanwhile
        # and compiles this long with a cold compile cache (minutes on a GPU)
        "standin_compile_s": 1,
        "standin_sampling_jit_s": 1,
        "gate_warmup_s": 60,    # gate budget for /health to turn 200 (minutes in production)
        # sglang's own waits (a 5 s SIGTERM watchdog, 1 s health looks), the gate's looks and
        # systemd's restart delay, shortened: the suite restarts hosts some hundred times.
        # The stand-in's own tests hold it to sglang's real timings (scale 1).
        "standin_time_scale": 0.1,
        "gate_poll_s": 0.2,
        "service_restart_s": 1,
        # What production serves; the stand-in loads no weights but checks the flags
        # and, for EAGLE3, the delegation methods in the installed kimi_k25.py.
        "model_path": "moonshotai/Kimi-K2.5",
        "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3",
        "trust_remote_code": True,
        # Served by name, with no weights on the hosts: nothing to pin or stage.
        # tests/test_models.py pins tiny models it serves from a mirror instead.
        "allow_unpinned_models": True,
        **(_pinned(_mirror) if _mirror else {}),
        **(extra or {}),
    })


def _pinned(mirror):
    """The demo mirror's tiny model and draft, pinned, staged from it and served offline."""
    return {"model_path": mirror["model"], "model_revision": mirror["revision"],
            "speculative_draft_model_path": mirror["draft"],
            "speculative_draft_model_revision": mirror["draft_revision"],
            "hf_endpoint": mirror["url"], "allow_unpinned_models": False}


_names = sorted(_state["hosts"], key=lambda name: int(name[4:]))
_names, _gateway_names = (_names[:-_gateways], _names[-_gateways:]) if _gateways else (_names, [])
_rest = _names[1:]
_half = (len(_rest) + 1) // 2

canary = [_host(name) for name in _names[:1]]
wave1 = [_host(name) for name in _rest[:_half]]
wave2 = [_host(name) for name in _rest[_half:]]
if _os.environ.get("SGLFLEET_DEV_PD") == "1":
    # Prefill and decode on separate hosts (docs/pd.md): node1 prefill, node2 decode, node3 prefill, ...;
    # the canary is the first pair (the PD rollout's first batch flips the gateways to it), the
    # waves the pairs after it. The stand-in moves the KV cache over HTTP: no transfer wheel.
    _roles = {name: ("prefill", "decode")[number % 2] for number, name in enumerate(_names)}
    _pd = [_host(name, {"disaggregation_mode": _roles[name]}) for name in _names]
    _pairs = (len(_pd) - 2 + 1) // 2
    canary, wave1, wave2 = _pd[:2], _pd[2:2 + 2 * ((_pairs + 1) // 2)], _pd[2 + 2 * ((_pairs + 1) // 2):]
if _os.environ.get("SGLFLEET_DEV_MULTINODE") == "1":
    # One server over node1 and node2 (docs/topologies.md): node1 the head, node2 rank 1, each with
    # one of the group's two tensor-parallel ranks; the canary is the group, the other serving hosts
    # serve alone in the waves after it.
    _group = {"nodes": _names[:2], "tp_size": 2}
    canary = [_host(name, _group) for name in _names[:2]]
    _rest = _names[2:]
    _half = (len(_rest) + 1) // 2
    wave1 = [_host(name) for name in _rest[:_half]]
    wave2 = [_host(name) for name in _rest[_half:]]
# The gateway spreads the tests' one repeated prompt over every worker (cache_aware, smg's
# default, would send it to one) and sees a stopped worker within seconds.
gateways = [_host(name, {"gateway_policy": "round_robin", "gateway_health_check_interval_s": 1,
                         "gateway_health_failure_threshold": 1, "gateway_health_success_threshold": 1,
                         "gateway_health_check_timeout_s": 2, "gateway_start_timeout_s": 60})
            for name in _gateway_names]
