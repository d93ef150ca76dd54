"""
The fleet's network: one bridge on this machine, one veth link per host on it.

systemd-nspawn makes each host's link and attaches it (``--network-bridge``);
this module gives the bridge its gateway address, refuses a subnet or name that
is already in use, and removes links.
"""

from __future__ import annotations

import ipaddress
import json
import os

from sglfleet.devfleet.errors import DevFleetError
from sglfleet.devfleet.processes import _run

# A private /24 unlikely to clash with anything; override when it does.
SUBNET = os.environ.get("SGLFLEET_DEVFLEET_SUBNET", "10.213.47.0/24")
BRIDGE = os.environ.get("SGLFLEET_DEVFLEET_BRIDGE", "sglfleet0")
# Prepended to nspawn machine names, so a second fleet's links (vb-<machine>) differ.
PREFIX = os.environ.get("SGLFLEET_DEVFLEET_PREFIX", "")
# Every bridge a local fleet makes carries this alias, so a leftover one is told from a stranger's.
ALIAS = "sglfleet local fleet"


def veth_of(machine: str) -> str:
    """The host-side link nspawn makes for ``machine``: vb-<machine>, cut to 15 characters."""
    return f"vb-{machine}"[:15]


def ensure_bridge(state: dict, bridge: str, subnet: str, save) -> None:
    """
    The bridge with the fleet's gateway address; refuse a subnet or name in use.

    + state: fleet.json as a dict; ``bridge_created`` marks a bridge this fleet made
    + bridge: the bridge's name
    + subnet: the private /24; the bridge takes its first address
    + save: writes ``state`` to fleet.json, as soon as the bridge exists, so that
      ``down`` after a crash still removes it

    **Example:**

    .. code:: python

        ensure_bridge(state, "sglfleet0", "10.213.47.0/24", fleet._save)
    """
    net = ipaddress.ip_network(subnet)
    gateway = f"{net[1]}/{net.prefixlen}"
    links = {link["ifname"]: link for link in json.loads(_run(["ip", "-j", "addr"]).stdout)}
    for ifname, link in links.items():
        if ifname == bridge:
            continue
        for addr in link.get("addr_info", []):
            if addr.get("family") != "inet":
                continue
            theirs = ipaddress.ip_network(f"{addr['local']}/{addr['prefixlen']}", strict=False)
            if theirs.overlaps(net):
                raise DevFleetError(
                    f"subnet {net} is taken by {ifname} ({addr['local']}/{addr['prefixlen']}); "
                    f"set SGLFLEET_DEVFLEET_SUBNET to a free private /24")
    for route in json.loads(_run(["ip", "-j", "-4", "route"]).stdout):
        dst = route.get("dst", "")
        if dst in ("default", "") or route.get("dev") == bridge:
            continue
        if ipaddress.ip_network(dst, strict=False).overlaps(net):
            raise DevFleetError(f"subnet {net} overlaps route {dst} via {route.get('dev')}; "
                                f"set SGLFLEET_DEVFLEET_SUBNET to a free private /24")
    if bridge in links and not state.get("bridge_created"):
        if _alias(bridge) != ALIAS:
            raise DevFleetError(f"link {bridge} exists and is not this fleet's; remove it "
                                f"(ip link del {bridge}) or set SGLFLEET_DEVFLEET_BRIDGE")
        if _ports(bridge):
            raise DevFleetError(f"bridge {bridge} carries another local fleet's hosts; stop that "
                                f"fleet (sglfleet devfleet down, in its checkout) or set "
                                f"SGLFLEET_DEVFLEET_BRIDGE")
        # A local fleet's bridge with no host on it: left by a fleet whose processes were
        # ended without 'down' (a session stopped, a machine's jobs killed). Take it over.
    elif bridge not in links:
        _run(["ip", "link", "add", bridge, "type", "bridge"])
        _run(["ip", "link", "set", bridge, "alias", ALIAS])
    if not state.get("bridge_created"):
        state["bridge_created"] = True  # ours to remove at 'down'
        save(state)
    if not any(a.get("local") == str(net[1]) for a in links.get(bridge, {}).get("addr_info", [])):
        _run(["ip", "addr", "replace", gateway, "dev", bridge])
    _run(["ip", "link", "set", bridge, "up"])
    state.update(bridge=bridge, subnet=str(net), gateway=str(net[1]))


def _alias(link: str) -> str | None:
    """The link's alias (``ip -j addr`` leaves it out; ``ip -j link`` has it)."""
    return json.loads(_run(["ip", "-j", "link", "show", link]).stdout)[0].get("ifalias")


def _ports(bridge: str) -> list[str]:
    """The links attached to ``bridge``: the veths of hosts that are up."""
    return [link["ifname"] for link in json.loads(_run(["ip", "-j", "link", "show", "master", bridge]).stdout)]


def delete_link(name: str) -> None:
    """Remove the link ``name`` (a host's veth, the bridge) when it exists."""
    if _run(["ip", "link", "show", name], check=False).returncode == 0:
        _run(["ip", "link", "del", name], check=False)


def set_host_link(leader_pid: int, updown: str) -> None:
    """Set the host's own end of its link (host0) ``up`` or ``down``, from inside its namespace."""
    _run(["nsenter", "-t", str(leader_pid), "-n",
          "ip", "link", "set", "host0", updown])
