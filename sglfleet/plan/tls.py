"""
TLS where the stack allows it (docs/tls.md): what each host serves and trusts, the flags that
tell smg and sglang, the root-only files a host gets, and what is refused before any connection.

- A gateway with ``gateway_tls`` serves its client port with TLS: smg 1.13.0's ``--tls-cert-path``
  and ``--tls-key-path`` (``smg/router_args.py:2223-2234``, read into ``server_cert_path`` and
  ``server_key_path`` at :2443-2447), with a certificate from the fleet CA (``"fleet_ca"``) or the
  operator's own pair.
- A serving host with ``worker_tls`` serves TLS with a certificate from the fleet CA: sglang's
  ``--ssl-certfile``/``--ssl-keyfile``/``--ssl-ca-certs``, which 0.5.14 declares
  (``srt/server_args.py:545-547``) and 0.5.23 too (``srt/arg_groups/fields/serving.py:139-147``);
  0.5.9 has none of them, and such a stack is refused. ``--ssl-ca-certs`` is what sglang's own
  warm-up verifies its server with (0.5.14 ``server_args.py:6524-6536``, ``ssl_verify``; without
  it, verification is off). Its gateways then verify it: smg's ``--ca-cert-paths``
  (``router_args.py:2212-2222``), the fleet CA.
- Each private key sits on the host in a root-only file under ``/etc/sglfleet/tls/`` and reaches
  the service through systemd's ``LoadCredential=`` (its private ``/run/credentials/<unit>/``):
  the command line names the file, never the key, and the gateway's ``DynamicUser`` reads it there.

**Example:**

.. code:: python

    tls = plan_tls(names, groups, configs, data)     # host -> HostTls
    worker_ssl_args(LAYOUT)                          # ["--ssl-certfile", "/run/credentials/sglang.service/tls.crt", ...]
    tls["node1"].files(LAYOUT)[0]["redacted"]        # "certificate sha256:1f2e... node1 (10.0.0.11, ...) until 2027-12-05"
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sglfleet.artifacts.tls import FleetCA, Pair, TlsError, describe, digest, load_pair, names_of
from sglfleet.plan.gateway import address, is_gateway

# The names the files carry in the unit's credentials folder.
CERT, KEY, CA = "tls.crt", "tls.key", "ca.crt"
# The first sglang release whose server takes --ssl-certfile (0.5.14 server_args.py:545-547; 0.5.9 has none).
SSL_FLAG = "--ssl-certfile"


@dataclass(frozen=True)
class HostTls:
    """
    What one host serves and trusts.

    + pair: the certificate and key its gateway or its services serve with; None: plain HTTP
    + ca: the fleet CA's certificate where the host needs it (a worker's own warm-up verifies with it; a
      gateway verifies its workers with it); "" where it needs none
    """

    pair: Pair | None = None
    ca: str = ""

    def files(self, layout) -> list[dict]:
        """
        The host's TLS files for one service, as ``secret_file`` takes them: path, content and the one
        form a diff shows (a fingerprint, never key material).

        + layout: the service's ``Layout``
        """
        found = []
        if self.pair is not None:
            shown = describe(self.pair.cert)
            found += [dict(path=layout.tls_cert, content=self.pair.cert, redacted=f"certificate {shown}\n"),
                      dict(path=layout.tls_key, content=self.pair.key, redacted=f"<private key of {shown}>\n")]
        if self.ca:
            found.append(dict(path=layout.tls_ca, content=self.ca, redacted=f"CA certificate {describe(self.ca)}\n"))
        return found

    def credentials(self, layout) -> list[str]:
        """``LoadCredential=`` values of the service's unit: ``NAME:PATH`` of each file it gets."""
        return [f"{name}:{path}" for name, path, wanted in ((CERT, layout.tls_cert, self.pair), (KEY, layout.tls_key, self.pair),
                                                            (CA, layout.tls_ca, self.ca)) if wanted]

    @property
    def digest(self) -> str:
        """What a release or the gateway's configuration covers of it ("" when off): a renewed certificate restarts."""
        if self.pair is None and not self.ca:
            return ""
        return digest(self.pair.cert if self.pair else "", self.ca)


def worker_ssl_args(layout) -> list[str]:
    """sglang's TLS flags for one service, naming its credentials folder (0.5.14 ``server_args.py:545-547``)."""
    folder = layout.credentials
    return ["--ssl-certfile", posixpath.join(folder, CERT), "--ssl-keyfile", posixpath.join(folder, KEY),
            "--ssl-ca-certs", posixpath.join(folder, CA)]


def gateway_tls_args(tls: HostTls, layout) -> list[str]:
    """smg's TLS flags for a gateway: its client port (``--tls-*``), and the CA it verifies workers with."""
    folder, args = layout.credentials, []
    if tls.pair is not None:
        args += ["--tls-cert-path", posixpath.join(folder, CERT), "--tls-key-path", posixpath.join(folder, KEY)]
    if tls.ca:
        args += ["--ca-cert-paths", posixpath.join(folder, CA)]
    return args


def worker_tls_problem(stack_name: str, version: str | None, flags) -> str | None:
    """
    Why ``worker_tls`` cannot be on for a host's stack, in one line (the lint's ``worker_tls`` finding); None where it can.

    + stack_name, version: its stack and the sglang release it carries
    + flags: that release's flag set (``sglfleet.plan.flagsets.flagset_for``), or None where unknown
    """
    if flags is not None and SSL_FLAG in flags.options:
        return None
    return (f"stack {stack_name}'s sglang {version or '(unknown)'} has no "
            f"{SSL_FLAG} (sglang 0.5.14 and later have it); set worker_tls = false, or move the host to a "
            f"stack with sglang 0.5.14 or later (e.g. cu130-sglang-0.5.23)")


def gateway_tls_problem(config, where: str) -> str | None:
    """
    Why the operator's pair of a gateway cannot serve, in one line (a file missing, a key not its
    certificate's, a certificate that does not name the address the fleet reaches the gateway by),
    the lint's ``gateway_tls`` finding; None when it can.

    + config: its ``HostConfig``
    + where: its address (``sglfleet.plan.gateway.address``): the controller verifies the gateway by it
    """
    if isinstance(config.gateway_tls, str):
        return None
    try:
        pair = load_pair(config.gateway_tls.cert, config.gateway_tls.key)
    except TlsError as error:
        return str(error)
    if where not in names_of(pair.cert):
        return (f"{config.gateway_tls.cert} names {', '.join(names_of(pair.cert)) or 'nothing'}, "
                f"not {where}, where the controller and the fleet reach this gateway; add {where} to its "
                f"subjectAltName, or use gateway_tls = \"fleet_ca\"")
    return None


def _ca(config) -> FleetCA:
    return FleetCA.beside(config.secrets_file)


def wants_ca(config, gateway: bool) -> bool:
    """Whether a host needs its fleet's CA: a worker with ``worker_tls``, a gateway on ``fleet_ca`` or before TLS workers."""
    return config.worker_tls if not gateway else config.gateway_tls == "fleet_ca"


def made_fleet_cas(configs: Mapping, groups: Mapping[str, Iterable[str]]) -> list[FleetCA]:
    """
    Make the fleet CA beside each secrets file whose hosts need one and lack it; the CAs made now.

    + configs: every host's ``HostConfig``
    + groups: every host's inventory groups
    """
    workers_tls = any(configs[name].worker_tls for name in configs if not is_gateway(groups[name]))
    made = []
    for name, config in configs.items():
        gateway = is_gateway(groups[name])
        if wants_ca(config, gateway) or (gateway and workers_tls):
            ca = _ca(config)
            if ca.ensure():
                made.append(ca)
    return made


def plan_tls(names: Iterable[str], groups: Mapping[str, Iterable[str]], configs: Mapping,
             data: Mapping[str, Mapping]) -> dict[str, HostTls]:
    """
    Each host's ``HostTls``: certificates issued (or reused) by its fleet CA, the operator's pair read.
    Writes only the controller's CA folder (``FleetCA.issue``), and only where a certificate is new.

    + names: the hosts to plan (the run's targets: the others get no file)
    + groups, configs, data: every host's inventory groups, ``HostConfig`` and data
    """
    workers_tls = any(configs[name].worker_tls for name in configs if not is_gateway(groups[name]))
    found = {}
    for name in names:
        config, gateway = configs[name], is_gateway(groups[name])
        fleet_ca = _ca(config)
        if wants_ca(config, gateway) or (gateway and workers_tls):
            fleet_ca.ensure()  # made before, by the hook that says so (made_fleet_cas); here for plans without it
        # Clients reach it by its address; its inventory name is a DNS name where the fleet resolves it.
        sans = list(dict.fromkeys([address(name, data[name]), name]))
        pair, ca = None, ""
        if gateway:
            if config.gateway_tls == "fleet_ca":
                pair = fleet_ca.issue(name, sans)
            elif not isinstance(config.gateway_tls, str):
                pair = load_pair(config.gateway_tls.cert, config.gateway_tls.key)
            if workers_tls:
                ca = fleet_ca.cert
        elif config.worker_tls:
            pair, ca = fleet_ca.issue(name, sans), fleet_ca.cert
        found[name] = HostTls(pair=pair, ca=ca)
    return found


def controller_trust(configs: Mapping, groups: Mapping[str, Iterable[str]]) -> str:
    """
    What the controller trusts when it calls the gateways and the workers over https (PEM, "" for none):
    the fleet CAs, and each operator's gateway certificate, pinned as it is.

    + configs, groups: every host's ``HostConfig`` and inventory groups
    """
    pems = []
    for name, config in configs.items():
        gateway = is_gateway(groups[name])
        # Where TLS is turned off, the gateways serve it until they restart: its CA is trusted until gone.
        if _ca(config).exists():
            pems.append(_ca(config).cert)
        if gateway and not isinstance(config.gateway_tls, str):
            pems.append(load_pair(config.gateway_tls.cert, config.gateway_tls.key).cert)
    return "".join(dict.fromkeys(pems))
