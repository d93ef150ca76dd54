"""
Where sglfleet keeps things on a host, and the name of the service it runs.

One ``Layout`` owns every path: the controller plans with it and the host tool
(shipped with this module) acts with it, so the two never disagree. Standard
library only: it runs on the hosts' own python3 (3.9 or newer).

    /opt/sglfleet/stacks/<stack-id>/venv        a stack's venv, wheel list, marker
    /opt/sglfleet/wheelhouse/                   the wheels stacks are built from
    /opt/sglfleet/releases/<release-id>/        launch, launch.args, release.json, gate.json
    /opt/sglfleet/current, previous             links to releases, switched with rename(2)
    /opt/sglfleet/services/<name>/              a named service's own releases/, current, previous, .lock
    /opt/sglfleet/models/<org>/<name>/<rev>/    staged, verified model revisions (or models_dir)
    /opt/sglfleet/bin/sglfleet-release          the host tool; its modules in lib/
    /etc/systemd/system/sglang.service          runs current/launch
    /etc/sglfleet/sglang.env                    secrets, root-only
    /etc/sglfleet/tls/                          TLS files, root-only: <service>.crt, <service>.key, ca.crt
    /etc/systemd/system/sglang-<name>.service   a named service's unit (``LAYOUT.for_service(name)``),
    /etc/sglfleet/sglang-<name>.env             its env file, its user, state, cache and runtime folders
    /etc/systemd/system/sglang-gateway.service  a gateway host's one service (``GATEWAY``)
    /etc/sglfleet/sglang-gateway.env            its secrets, root-only
    /opt/sglfleet/bin/sglfleet-gateway          its launcher, run by the gateway stack's python
    /var/lib/sglang/, /run/sglang/              the service's state (its home) and runtime directories
    /var/cache/sglang/compile/<stack-id>/       the service's compile caches (triton, inductor, JITs), per stack
    /opt/sglfleet/compile-caches/<key>.tar      one stack's compile caches packed for later hosts (``compile_cache``)

**Example:**

.. code:: python

    LAYOUT.release("3f2a9c1d0b7e6a55")   # "/opt/sglfleet/releases/3f2a9c1d0b7e6a55"
    LAYOUT.venv("dev-0a24832cc36f")      # "/opt/sglfleet/stacks/dev-0a24832cc36f/venv"
    LAYOUT.model("org/name", "4d01...")  # "/opt/sglfleet/models/org/name/4d01..."
    LAYOUT.for_service("small").current  # "/opt/sglfleet/services/small/current"
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

# A temporary file or folder this old belongs to a run that was killed: no live
# run takes an hour between writing it and renaming it into place. The controller
# and the host tool both collect by it.
STALE_MINUTES = 60
# The service of a host without ``services``, and the name that keeps today's paths in a list of them.
DEFAULT_SERVICE = "sglang"


@dataclass(frozen=True)
class Layout:
    """
    The paths of one sglfleet service on a host.

    + root: everything sglfleet owns but the unit and the env file
    + service: the systemd service's name, without ``.service``
    + etc: the folder of the env file (and the stand-in's fault file)
    + name: the service's name among a host's ``services``; "" for the host's one service
      (``sglang``), whose releases sit at the root as they always have
    """

    root: str = "/opt/sglfleet"
    service: str = "sglang"
    etc: str = "/etc/sglfleet"
    name: str = ""

    def for_service(self, name: str) -> "Layout":
        """
        The layout of the host's service ``name``: its own unit, user, env file and
        releases; stacks, models and tools stay the host's. ``"sglang"`` is the host's
        one service, at today's paths.

        + name: a service's name from the inventory's ``services``
        """
        if name == DEFAULT_SERVICE:
            return self
        return Layout(root=self.root, service=f"{self.service}-{name}", etc=self.etc, name=name)

    @property
    def service_name(self) -> str:
        """The service's name as the inventory and ``sglfleet status`` say it: ``sglang`` or its own."""
        return DEFAULT_SERVICE if self.legacy else self.name

    @property
    def legacy(self) -> bool:
        """
        Whether this is the host's one service from before ``services`` (``sglang``): its releases
        sit at the root, what the run says of it names no unit, and the host tool takes no
        ``--service`` for it. The one place that tells it from a named service.
        """
        return not self.name

    @property
    def tool_args(self) -> tuple[str, ...]:
        """What picks this service on the host tool's command line: ``--service <name>``; nothing for
        the legacy one, as the tools of hosts from before ``services`` take it."""
        return () if self.legacy else ("--service", self.name)

    def labelled(self, label: str) -> str:
        """``label`` as this service's messages say it: ``"wave1 sglang-a.service"``; ``"wave1"`` for the legacy one."""
        return label if self.legacy else f"{label} {self.unit}"

    @property
    def services(self) -> str:
        """Where named services keep their releases and links."""
        return posixpath.join(self.root, "services")

    @property
    def service_root(self) -> str:
        """The folder of this service's releases, links and lock: the root for the host's one service."""
        return self.root if self.legacy else posixpath.join(self.services, self.name)

    @property
    def own_root(self) -> str:
        """The folder of this service's releases and links and nothing of another's, removed when it
        retires: ``services/<name>``; the legacy one's ``releases`` (the root holds the host's stacks)."""
        return self.releases if self.legacy else self.service_root

    # The service

    @property
    def unit(self) -> str:
        return f"{self.service}.service"

    @property
    def unit_file(self) -> str:
        return f"/etc/systemd/system/{self.unit}"

    @property
    def env_file(self) -> str:
        return posixpath.join(self.etc, f"{self.service}.env")

    # TLS (docs/tls.md): root-only files, which systemd hands the service as credentials

    @property
    def tls_dir(self) -> str:
        """The host's TLS files, root-only: each service's certificate and key, and the fleet CA."""
        return posixpath.join(self.etc, "tls")

    @property
    def tls_cert(self) -> str:
        return posixpath.join(self.tls_dir, f"{self.service}.crt")

    @property
    def tls_key(self) -> str:
        return posixpath.join(self.tls_dir, f"{self.service}.key")

    @property
    def tls_ca(self) -> str:
        """The fleet CA's certificate: what the host tool trusts when it calls its own server over https."""
        return posixpath.join(self.tls_dir, "ca.crt")

    @property
    def credentials(self) -> str:
        """The unit's ``$CREDENTIALS_DIRECTORY`` (``LoadCredential=``): a system unit's is fixed, so argv can name it."""
        return posixpath.join("/run/credentials", self.unit)

    @property
    def service_user(self) -> str:
        """The system user the service runs as."""
        return self.service

    @property
    def state_dir(self) -> str:
        """The service user's home and model cache: the unit's ``StateDirectory=``."""
        return posixpath.join("/var/lib", self.service)

    @property
    def cache_dir(self) -> str:
        """The unit's ``CacheDirectory=``: the compile caches, kept across restarts."""
        return posixpath.join("/var/cache", self.service)

    @property
    def runtime_dir(self) -> str:
        """The unit's private ``RuntimeDirectory=``, where the launcher writes the API key's config."""
        return posixpath.join("/run", self.service)

    # Switching

    @property
    def lock(self) -> str:
        """Held by the host tool for a whole switch, gate and rollback."""
        return posixpath.join(self.service_root, ".lock")

    @property
    def current(self) -> str:
        return posixpath.join(self.service_root, "current")

    @property
    def previous(self) -> str:
        return posixpath.join(self.service_root, "previous")

    # Releases

    @property
    def releases(self) -> str:
        return posixpath.join(self.service_root, "releases")

    def release(self, release_id: str, name: str = "") -> str:
        """A release's folder, or a file in it."""
        return posixpath.join(self.releases, release_id, name) if name else posixpath.join(self.releases, release_id)

    # Stacks

    @property
    def stacks(self) -> str:
        return posixpath.join(self.root, "stacks")

    @property
    def stacks_lock(self) -> str:
        """Held by one stack build or collection at a time."""
        return posixpath.join(self.stacks, ".lock")

    def stack(self, stack_id: str, name: str = "") -> str:
        """A stack's folder, or a file in it."""
        return posixpath.join(self.stacks, stack_id, name) if name else posixpath.join(self.stacks, stack_id)

    def venv(self, stack_id: str) -> str:
        return self.stack(stack_id, "venv")

    def python(self, stack_id: str) -> str:
        """The python of a stack's venv: it runs sglang (or the stand-in)."""
        return self.stack(stack_id, "venv/bin/python")

    @property
    def wheelhouse(self) -> str:
        return posixpath.join(self.root, "wheelhouse")

    def uv(self, version: str) -> str:
        """The uv binary hosts extract from its wheel."""
        return posixpath.join(self.root, "tools", f"uv-{version}", "uv")

    # Models

    @property
    def models(self) -> str:
        """The default model store (an inventory's ``models_dir`` puts it elsewhere)."""
        return posixpath.join(self.root, "models")

    def model(self, repo: str, revision: str, models_dir: str = "") -> str:
        """A staged revision's folder: ``<models_dir>/<org>/<name>/<revision>``."""
        return posixpath.join(models_dir or self.models, repo, revision)

    # Compile caches

    def compile_cache(self, stack_id: str) -> str:
        """The compile caches the service writes while it runs ``stack_id``: the launcher points every JIT here."""
        return posixpath.join(self.cache_dir, "compile", stack_id)

    @property
    def compile_archives(self) -> str:
        """Packed compile caches, root's, served read-only to later hosts of the same stack, GPU and driver."""
        return posixpath.join(self.root, "compile-caches")

    def compile_key(self, key: str) -> str:
        """
        The key this service's compile caches are shared under: the host's ``key`` (its stack, GPUs
        and driver, ``compile_cache.cache_key``), and a named service's name after it: each service
        compiles for its own model and launch, and one archive a key fits on a host.
        """
        return key if self.legacy else f"{key}+{self.name}"

    def compile_archive(self, key: str) -> str:
        return posixpath.join(self.compile_archives, f"{key}.tar")

    # Tools shipped to the host

    @property
    def bin(self) -> str:
        return posixpath.join(self.root, "bin")

    @property
    def tool(self) -> str:
        """The host tool: switch, gate, bake, rollback, state."""
        return posixpath.join(self.bin, "sglfleet-release")

    @property
    def lib(self) -> str:
        """Where the host tool's modules live (``lib/sglfleet_host/``)."""
        return posixpath.join(self.root, "lib")

    @property
    def gateway_launcher(self) -> str:
        """What ``sglang-gateway.service`` runs with the gateway stack's python (``files/gateway/``)."""
        return posixpath.join(self.bin, "sglfleet-gateway")

    @property
    def standin(self) -> str:
        """The SGLang stand-in's folder (local fleet only)."""
        return posixpath.join(self.root, "standin")

    # The host's nftables policy, table inet sglfleet (the host's, whatever its services)

    @property
    def firewall_rules(self) -> str:
        """The policy in force, confirmed: what ``sglfleet-firewall.service`` applies at boot."""
        return posixpath.join(self.etc, "sglfleet.nft")

    @property
    def firewall_pending(self) -> str:
        """A policy applied and not yet confirmed over a new SSH connection."""
        return posixpath.join(self.etc, "sglfleet.nft.pending")

    @property
    def firewall_previous(self) -> str:
        """What the host puts back when a pending policy is not confirmed in time."""
        return posixpath.join(self.etc, "sglfleet.nft.previous")

    @property
    def firewall_state(self) -> str:
        """The confirmed policy's digest, and the digest of the table as nft listed it then."""
        return posixpath.join(self.etc, "firewall.state")

    @property
    def fault_file(self) -> str:
        """The stand-in's fault file (local fleet only)."""
        return posixpath.join(self.etc, "standin-fault")


def on_host(layout: "Layout") -> list["Layout"]:
    """
    The layouts of every service this host holds releases of: its one service, and each
    named one under ``services/`` (read from the disk: the host tool's view, not the inventory's).

    + layout: the host's layout (``LAYOUT``)
    """
    names = sorted(os.listdir(layout.services)) if os.path.isdir(layout.services) else []
    return [layout, *(layout.for_service(name) for name in names if not name.startswith("."))]


LAYOUT = Layout()
# The unit that applies the confirmed policy at boot, and the timer that undoes one not confirmed.
FIREWALL_UNIT = "sglfleet-firewall.service"
FIREWALL_REVERT = "sglfleet-firewall-revert"
# The service of a host in the inventory group ``gateways``: SGLang's gateway, and nothing else.
GATEWAY = Layout(service="sglang-gateway")
