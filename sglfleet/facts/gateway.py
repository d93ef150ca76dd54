"""The gateway a host runs: whether ``sglang-gateway.service`` is up, and with which configuration."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

CONFIG = "SGLFLEET_GATEWAY_CONFIG"


class GatewayService(FactBase[dict]):
    """
    Returns the gateway unit's state and the configuration digest its running
    process started with (its ``SGLFLEET_GATEWAY_CONFIG``, read from the main
    process's environment: the unit file may already be newer than the process).

    .. code:: python

        {"active": "active", "config": "9c41d0e2a7b35f18"}
        {"active": "inactive", "config": None}

    **Example:**

    .. code:: python

        found = host.get_fact(GatewayService, unit="sglang-gateway.service")
    """

    @staticmethod
    def default() -> dict:
        return {"active": "unknown", "config": None}

    def command(self, unit: str) -> str:
        q_unit = shlex.quote(unit)
        # Only the one variable leaves the process's environment (its API key stays there).
        return (f"echo active=$(systemctl is-active {q_unit} 2>/dev/null); "
                f"pid=$(systemctl show -p MainPID --value {q_unit} 2>/dev/null); "
                f"if [ \"${{pid:-0}}\" != 0 ]; then tr '\\0' '\\n' < /proc/$pid/environ 2>/dev/null "
                f"| grep '^{CONFIG}=' || true; fi")

    def process(self, output):
        found = self.default()
        for line in output:
            key, _, value = line.partition("=")
            if key == "active":
                found["active"] = value or "unknown"
            elif key == CONFIG:
                found["config"] = value or None
        return found
