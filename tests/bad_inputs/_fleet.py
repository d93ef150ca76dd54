"""
The valid local-fleet inventory every bad input starts from.

node1 is the canary, node2 wave1, node3 wave2: GPU-less hosts on the dev stack
with the stand-in, as inventory/dev.py. When a local fleet is up, hosts get
its SSH addresses, so a run that wrongly connected would show in the hosts'
sshd logs; otherwise the names do not resolve and nothing can be reached.
"""

import json
import os
from pathlib import Path

BASE = {
    "stack": "dev",
    "server": "standin",
    "gpu_less": True,
    "model_path": "moonshotai/Kimi-K2.5",
    "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3",
    "trust_remote_code": True,
    "allow_unpinned_models": True,  # served by name, as inventory/dev.py
    "gate_warmup_s": 60,
    "standin_warmup_s": 2,
}

# The fleet inventory/dev.py targets: SGLFLEET_FLEET_DIR, as sglfleet.devfleet reads it.
_STATE = Path(os.environ.get("SGLFLEET_FLEET_DIR") or Path(__file__).resolve().parents[2] / ".fleet") / "fleet.json"


def _connection(name):
    try:
        state = json.loads(_STATE.read_text())
        record = state["hosts"][name]
    except (OSError, ValueError, KeyError):
        return {}
    return {
        "ssh_hostname": record["address"],
        "ssh_user": "root",
        "ssh_key": state["ssh_key"],
        "ssh_known_hosts_file": state["known_hosts"],
        "ssh_strict_host_key_checking": "yes",
    }


def host(name, **data):
    """One host: its connection, the valid base, then the case's data."""
    return (name, {**_connection(name), **BASE, **data})


def waves(**data):
    """canary, wave1, wave2 with ``data`` on every host."""
    return [host("node1", **data)], [host("node2", **data)], [host("node3", **data)]
