"""The gateway a host runs: whether ``sglang-gateway.service`` is up, and with which configuration."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

CONFIG = "SGLFLEET_GATEWAY_CONFIG"


class GatewayService(FactBase[dict]):
    """
    Returns the gateway unit's state and the configuration digest its running
    process started with (the launcher writes its ``SGLFLEET_GATEWAY_CONFIG`` to
    ``config`` in the unit's runtime directory, which goes with the process: the
    unit file may already be newer than the process).

    .. code:: python

        {"active": "active", "config": "9c41d0e2a7b35f18"}
        {"active": "inactive", "config": None}

    **Example:**

    .. code:: python

        found = host.get_fact(GatewayService, unit="sglang-gateway.service", runtime_dir="/run/sglang-gateway")
    """

    @staticmethod
    def default() -> dict:
        return {"active": "unknown", "config": None}

    def command(self, unit: str, runtime_dir: str) -> str:
        q_config = shlex.quote(f"{runtime_dir}/config")
        return (f"echo active=$(systemctl is-active {shlex.quote(unit)} 2>/dev/null); "
                f"if test -f {q_config}; then echo {CONFIG}=$(cat {q_config}); fi")

    def process(self, output):
        found = self.default()
        for line in output:
            key, _, value = line.partition("=")
            if key == "active":
                found["active"] = value or "unknown"
            elif key == CONFIG:
                found["config"] = value or None
        return found
