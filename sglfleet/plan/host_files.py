"""
The files a host gets besides its stack and releases, rendered on the controller: each
service's unit and env file, the host tool (and the stand-in where it runs), a gateway's
unit, launcher and env file. Pure but for reading the project's own files.

**Example:**

.. code:: python

    files = service_files(service, load_secrets(config.secrets_file), behind_gateways=True)
    files.unit          # "[Unit]\\nDescription=SGLang ..."
    files.env_redacted  # "HF_TOKEN=<redacted sha256:1f2e3d4c>\\n"
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sglfleet import FILES, PROJECT_ROOT
from sglfleet.host.layout import LAYOUT
from sglfleet.plan.gateway import gateway_args
from sglfleet.plan.secrets import Secrets, engine_env, gateway_env, render_env
from sglfleet.plan.services import Service
from sglfleet.plan.templates import render, render_gateway_unit, render_unit

HOST_PACKAGE = PROJECT_ROOT / "sglfleet" / "host"
# The stand-in, its modules, and beside them the shipped modules it imports (files/shipped/).
STANDIN_FILES = {path.name: path for folder in ("standin", "shipped") for path in sorted((FILES / folder).glob("*.py"))}
GATEWAY_LAUNCHER = FILES / "gateway" / "sglfleet-gateway.py"


@dataclass(frozen=True)
class ServiceFiles:
    """The unit and the env file of one service; ``env_redacted`` is the only form ever shown."""

    unit: str
    env: str
    env_redacted: str

    @property
    def digest(self) -> str:
        """What a release covers of them: a new unit or a rotated key restarts the service, behind the gate."""
        return hashlib.sha256(f"{self.unit}\0{self.env}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class GatewayFiles:
    """
    A gateway host's unit, launcher and env file; ``digest`` names the whole configuration
    (the running gateway carries it), ``env_redacted`` is the only form of the env file ever shown.
    """

    unit: str
    launcher: bytes
    env: str
    env_redacted: str
    digest: str


def service_files(service: Service, secrets: Secrets, behind_gateways: bool) -> ServiceFiles:
    """
    One service's unit and env file.

    + service: one of the host's services (``sglfleet.plan.services.host_services``)
    + secrets: the host's secrets (``load_secrets``)
    + behind_gateways: whether the fleet's own gateways stand in front of it (``engine_env``)
    """
    env = engine_env(secrets, behind_gateways)
    return ServiceFiles(unit=render_unit(service.config, layout=service.layout), env=render_env(env),
                        env_redacted=render_env(env, redacted=True))


def gateway_files(config, secrets: Secrets, workers: list, python: str) -> GatewayFiles:
    """
    A gateway host's unit, launcher and env file, for the gateway stack's ``python`` on the host.

    + config: the gateway host's ``HostConfig``
    + secrets: its secrets (``load_secrets``): the env file holds the client keys and gateway-admin
    + workers: every worker of the fleet (``sglfleet.plan.pd.Worker``), in inventory order
    + python: the gateway stack's python on the host (its venv's, for the host's own python3)
    """
    values = gateway_env(secrets)
    env = render_env(values, template="sglang-gateway.env.j2")
    launcher = GATEWAY_LAUNCHER.read_bytes()
    args = gateway_args(config, workers)
    # The digest covers everything the gateway starts from; the unit carries it, so it is
    # taken over the unit rendered without it.
    bare = render_gateway_unit(config, args, python, digest="")
    digest = hashlib.sha256(b"\0".join([bare.encode(), env.encode(), launcher])).hexdigest()[:16]
    return GatewayFiles(unit=render_gateway_unit(config, args, python, digest=digest), launcher=launcher, env=env,
                        env_redacted=render_env(values, redacted=True, template="sglang-gateway.env.j2"),
                        digest=digest)


def tool_files(server: str) -> dict[str, tuple[bytes, str]]:
    """
    What the host tool is made of on a host (its entry script and the ``sglfleet.host``
    package as ``lib/sglfleet_host``), and the stand-in where the host runs it:
    remote path -> (content, mode).

    + server: the host's ``server`` ("sglang", or "standin" on the local fleet)
    """
    tools = {LAYOUT.tool: (render("sglfleet-release.j2", FILES / "host", layout=LAYOUT).encode(), "755")}
    tools.update({f"{LAYOUT.lib}/sglfleet_host/{path.name}": (path.read_bytes(), "644")
                  for path in sorted(HOST_PACKAGE.glob("*.py"))})
    if server == "standin":
        tools.update({f"{LAYOUT.standin}/{name}": (source.read_bytes(), "644")
                      for name, source in STANDIN_FILES.items()})
    return tools
