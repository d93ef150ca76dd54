"""
Who may reach what: where each engine listens, and each host's nftables policy. Pure.

An engine listens on its host's fleet address (``fleet_address``, else its
``ssh_hostname``) where anything outside the host needs it: the fleet's gateways,
an external router, a PD peer, the monitoring hosts; else on loopback. Never on
every address by default.

Each host gets one table of sglfleet's own, ``table inet sglfleet``, whose input
chain drops what no rule of its role accepts (docs/network.md):

- SSH from ``ssh_networks`` (anywhere by default);
- a gateway's client port from ``client_networks`` (anywhere), its metrics port from ``monitoring_networks``;
- an engine's port from its gateways and the monitoring hosts; with no gateway, from
  ``client_networks`` (an external router, or the clients themselves);
- a prefill's bootstrap port, and the ports its KV transfer opens, from the fleet's
  other prefill and decode hosts alone (the gateway pairs any prefill with any decode);
- a group's head's ``dist_init_port``, and the ports NCCL opens, from the group's other hosts alone
  (``sglfleet.plan.multinode``);
- node_exporter from the monitoring hosts; the peer file shares from the fleet's hosts;
- a gateway's port, while its unit restarts, drops the new connections nothing could answer yet
  (sets ``gateway_stopping`` and ``gateway_starting``, filled by the unit): its clients' SYNs come
  again and find the new gateway;
- established traffic, loopback and ICMP first, then ``firewall_extra_rules`` (which may refuse
  what sglfleet's own rules accept), then those.

**Example:**

.. code:: python

    resolved = listen_addresses(configs, groups, data)   # listen_host None -> "10.0.0.11" or "127.0.0.1"
    policy = host_policy("node1", fleet_view)             # Policy(text="table inet sglfleet ...", digest="3f2a...")
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from sglfleet.plan.gateway import address, is_gateway
from sglfleet.plan.pd import role_of
from sglfleet.plan.services import host_services

TABLE = "inet sglfleet"
# The ports PD opens besides the bootstrap port (docs/network.md has the lines read): each rank's
# ZMQ socket on a port the OS picks (sglang 0.5.9 disaggregation/common/conn.py:480-500, pyzmq's
# bind_to_random_port), from Linux's default ip_local_port_range; no sglang setting pins it.
EPHEMERAL = (32768, 60999)
# mooncake's transfer engine handshake (and its TCP transport): a port in MC_MIN_RPC_PORT..MC_MAX_RPC_PORT,
# 15000-16999 by default (mooncake_transfer_engine.py:111-122); nixl opens none of its own.
MOONCAKE = (15000, 16999)
LOOPBACK_ADDRESS = "127.0.0.1"


def needs_the_network(config, fleet_has_gateways: bool) -> bool:
    """Whether something outside the host reaches its engines: gateways, an external router, a PD peer,
    the monitoring hosts (their /metrics)."""
    return (fleet_has_gateways or bool(config.router_url) or bool(config.monitoring_networks)
            or any(role_of(s.config) for s in host_services(config)))


def listen_addresses(configs: Mapping, groups: Mapping[str, Iterable[str]], data: Mapping[str, Mapping]) -> dict:
    """
    The hosts' configs with each ``listen_host`` left at None resolved: the host's fleet address
    where the fleet needs its engines, else loopback. A given address is kept.

    + configs: every host's validated ``HostConfig``, by name
    + groups: every host's groups
    + data: every host's data (``fleet_address``, ``ssh_hostname``)
    """
    gateways = any(is_gateway(one) for one in groups.values())
    resolved = {}
    for name, config in configs.items():
        where = address(name, data[name]) if needs_the_network(config, gateways) else LOOPBACK_ADDRESS

        def own(launch):
            return launch if launch.listen_host is not None else launch.model_copy(update={"listen_host": where})

        services = [one.model_copy(update={"launch": own(one.launch)}) for one in config.services or ()]
        resolved[name] = config.model_copy(update={"launch": own(config.launch), "services": services or None})
    return resolved


@dataclass(frozen=True)
class Policy:
    """
    One host's nftables policy.

    + text: the file ``nft -f`` applies: sglfleet's table replaced whole, in one transaction
    + digest: its sha256, which names it on the host and in what the run says
    """

    text: str
    digest: str


@dataclass(frozen=True)
class FleetView:
    """
    What one host's policy depends on of the fleet.

    + addresses: every host's fleet address, by name
    + gateways: the gateway hosts' names
    + pd_hosts: the names of the prefill and decode hosts
    + configs: every host's ``HostConfig``, by name
    + ssh_ports: every host's SSH port (pyinfra's ``ssh_port``), by name
    """

    addresses: dict[str, str]
    gateways: tuple[str, ...]
    pd_hosts: tuple[str, ...]
    configs: dict
    ssh_ports: dict[str, int] = field(default_factory=dict)


def fleet_view(configs: Mapping, groups: Mapping[str, Iterable[str]], data: Mapping[str, Mapping]) -> FleetView:
    """
    The fleet as the hosts' policies see it.

    + configs, groups, data: as ``listen_addresses`` takes them, every host of the inventory
    """
    return FleetView(
        addresses={name: address(name, data[name]) for name in configs},
        gateways=tuple(name for name in configs if is_gateway(groups[name])),
        pd_hosts=tuple(name for name in configs if not is_gateway(groups[name])
                       and any(role_of(s.config) for s in host_services(configs[name]))),
        configs=dict(configs),
        ssh_ports={name: int(data[name].get("ssh_port") or 22) for name in configs})


def _ports(ports: Iterable) -> str:
    unique = sorted(set(ports), key=lambda port: port if isinstance(port, int) else port[0])
    shown = [f"{port[0]}-{port[1]}" if isinstance(port, tuple) else str(port) for port in unique]
    return shown[0] if len(shown) == 1 else "{ " + ", ".join(shown) + " }"


def _accept(sources: Iterable[str] | None, ports: Iterable, what: str) -> list[str]:
    """The rule lines accepting TCP ``ports`` from ``sources`` (None: anywhere; empty: nobody)."""
    ports = list(ports)
    if not ports:
        return []
    if sources is None:
        return [f'tcp dport {_ports(ports)} accept comment "{what}"']
    networks, names = set(), set()
    for one in sources:
        try:
            networks.add(ipaddress.ip_network(one, strict=False))
        except ValueError:  # a host name: nft resolves it on the host when the policy loads (IPv4)
            names.add(one)
    networks = sorted(networks, key=lambda n: (n.version, n))
    lines = []
    for family, match in ((4, "ip saddr"), (6, "ip6 saddr")):
        these = [str(n) if n.prefixlen < n.max_prefixlen else str(n.network_address)
                 for n in networks if n.version == family] + (sorted(names) if family == 4 else [])
        if these:
            lines.append(f'{match} {{ {", ".join(these)} }} tcp dport {_ports(ports)} accept comment "{what}"')
    return lines


def _with(networks: list[str] | None, more: Iterable[str]) -> list[str] | None:
    """``networks`` and ``more``; None (anywhere) stays anywhere."""
    return None if networks is None else [*networks, *more]


def rules(name: str, fleet: FleetView) -> list[str]:
    """
    The accept rules of ``name``'s input chain, in order, before its ``firewall_extra_rules``.

    + name: the host
    + fleet: ``fleet_view``'s answer
    """
    config = fleet.configs[name]
    monitoring = list(config.monitoring_networks)
    everyone = list(fleet.addresses.values())
    out = _accept(config.ssh_networks, [fleet.ssh_ports.get(name, 22)], "ssh")
    out += _accept(monitoring, [config.node_exporter_port], "node_exporter")
    if name in fleet.gateways:
        out += _accept(config.client_networks, [config.gateway_port], "gateway: clients and the controller")
        out += _accept(monitoring, [config.gateway_metrics_port], "gateway: metrics")
        out += _accept([fleet.addresses[one] for one in fleet.gateways], [config.share_port], "peers: wheels")
        return out
    services = host_services(config)
    engines = [service.port for service in services]
    gateways = [fleet.addresses[one] for one in fleet.gateways]
    if gateways:
        out += _accept(gateways + monitoring, engines, "engines: the gateways and monitoring")
    else:
        out += _accept(_with(config.client_networks, monitoring), engines, "engines: clients and monitoring")
    roles = [role_of(service.config) for service in services]
    if any(roles):
        peers = [fleet.addresses[one] for one in fleet.pd_hosts if one != name]
        pd = [s.config.launch for s, role in zip(services, roles) if role]
        mooncake = [MOONCAKE] if any(one.disaggregation_transfer_backend == "mooncake" for one in pd) else []
        out += _accept(peers, [*(one.disaggregation_bootstrap_port for one in pd), *mooncake, EPHEMERAL],
                       "pd: bootstrap and KV transfer, from the PD hosts")
    if config.nodes:
        # The head holds torch.distributed's store at dist_init_port (sglang 0.5.9 model_runner.py:776-777);
        # NCCL's bootstrap and socket transport, and gloo's, listen on ports the OS picks: only the group's hosts.
        members = [fleet.addresses[one] for one in config.nodes if one != name and one in fleet.addresses]
        out += _accept(members, [*([config.dist_init_port] if config.nodes[0] == name else []), EPHEMERAL],
                       "group: torch.distributed and NCCL, from the group's hosts")
    shares = [config.share_port, config.model_share_port] + ([config.compile_share_port]
                                                             if config.share_compile_caches else [])
    if config.distribution == "peers":
        out += _accept(everyone, shares, "peers: wheels, models and compile caches")
    return out


def _render(name: str, roles: str, lines: list[str], extra: list[str], templates, hold: bool) -> str:
    environment = Environment(loader=FileSystemLoader(str(templates)), undefined=StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    return environment.get_template("sglfleet.nft.j2").render(host=name, roles=roles, table=TABLE, rules=lines,
                                                             extra=extra, hold=hold)


def host_policy(name: str, fleet: FleetView, templates) -> Policy | None:
    """
    ``name``'s policy, or None where ``firewall`` is off.

    + name: the host
    + fleet: ``fleet_view``'s answer
    + templates: the templates folder (``sglfleet.plan.templates.TEMPLATES``)
    """
    config = fleet.configs[name]
    if not config.firewall:
        return None
    roles = "gateway" if name in fleet.gateways else ", ".join(
        dict.fromkeys(role_of(s.config) or "engine" for s in host_services(config)))
    text = _render(name, roles, rules(name, fleet), list(config.firewall_extra_rules), templates,
                   hold=name in fleet.gateways)
    return Policy(text=text, digest=hashlib.sha256(text.encode()).hexdigest())
