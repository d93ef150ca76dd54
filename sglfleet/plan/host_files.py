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
from dataclasses import dataclass, field

from sglfleet import FILES, PROJECT_ROOT
from sglfleet.host.layout import GATEWAY, LAYOUT
from sglfleet.plan.gateway import gateway_args
from sglfleet.plan.secrets import Secrets, engine_env, gateway_env, render_env
from sglfleet.plan.services import Service
from sglfleet.plan.templates import render, render_gateway_unit, render_unit
from sglfleet.plan.tls import HostTls, gateway_tls_args

NO_TLS = HostTls()

HOST_PACKAGE = PROJECT_ROOT / "sglfleet" / "host"
# The stand-in, its modules, and beside them the shipped modules it imports (files/shipped/).
STANDIN_FILES = {path.name: path for folder in ("standin", "shipped") for path in sorted((FILES / folder).glob("*.py"))}
GATEWAY_LAUNCHER = FILES / "gateway" / "sglfleet-gateway.py"


@dataclass(frozen=True)
class ServiceFiles:
    """
    The unit and the env file of one service, and its TLS files; ``env_redacted`` is the only form of the
    env file ever shown, each TLS file's ``redacted`` the only form of it.
    """

    unit: str
    env: str
    env_redacted: str
    tls: tuple[dict, ...] = field(default=(), repr=False)
    tls_digest: str = ""

    @property
    def digest(self) -> str:
        """What a release covers of them: a new unit, a rotated key or a renewed certificate restarts the
        service, behind the gate (without TLS, the digest is what it was before TLS existed)."""
        tls = f"\0{self.tls_digest}" if self.tls_digest else ""
        return hashlib.sha256(f"{self.unit}\0{self.env}{tls}".encode()).hexdigest()[:16]


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
    tls: tuple[dict, ...] = field(default=(), repr=False)


def service_files(service: Service, secrets: Secrets, behind_gateways: bool, tls: HostTls = NO_TLS) -> ServiceFiles:
    """
    One service's unit and env file, and its TLS files where it serves TLS.

    + service: one of the host's services (``sglfleet.plan.services.host_services``)
    + secrets: the host's secrets (``load_secrets``)
    + behind_gateways: whether the fleet's own gateways stand in front of it (``engine_env``)
    + tls: the host's TLS (``sglfleet.plan.tls.plan_tls``); none by default
    """
    env = engine_env(secrets, behind_gateways)
    unit = render_unit(service.config, layout=service.layout, credentials=tls.credentials(service.layout))
    return ServiceFiles(unit=unit, env=render_env(env), env_redacted=render_env(env, redacted=True),
                        tls=tuple(tls.files(service.layout)), tls_digest=tls.digest)


def gateway_files(config, secrets: Secrets, workers: list, python: str, tls: HostTls = NO_TLS) -> GatewayFiles:
    """
    A gateway host's unit, launcher and env file, for the gateway stack's ``python`` on the host.

    + config: the gateway host's ``HostConfig``
    + secrets: its secrets (``load_secrets``): the env file holds the client keys and gateway-admin
    + workers: every worker of the fleet (``sglfleet.plan.pd.Worker``), in inventory order
    + python: the gateway stack's python on the host (its venv's, for the host's own python3)
    + tls: the gateway's TLS (``sglfleet.plan.tls.plan_tls``): its client port's pair, the CA it verifies workers with
    """
    values = gateway_env(secrets)
    env = render_env(values, template="sglang-gateway.env.j2")
    launcher = GATEWAY_LAUNCHER.read_bytes()
    args = gateway_args(config, workers, gateway_tls_args(tls, GATEWAY))
    credentials = tls.credentials(GATEWAY)
    # The digest covers everything the gateway starts from (a renewed certificate too); the unit
    # carries it, so it is taken over the unit rendered without it.
    bare = render_gateway_unit(config, args, python, digest="", credentials=credentials)
    digest = hashlib.sha256(b"\0".join([bare.encode(), env.encode(), launcher, *([tls.digest.encode()] if tls.digest
                                                                                else [])])).hexdigest()[:16]
    return GatewayFiles(unit=render_gateway_unit(config, args, python, digest=digest, credentials=credentials),
                        launcher=launcher, env=env,
                        env_redacted=render_env(values, redacted=True, template="sglang-gateway.env.j2"),
                        digest=digest, tls=tuple(tls.files(GATEWAY)))


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
