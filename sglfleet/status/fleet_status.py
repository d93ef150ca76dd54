"""
The fleet's release state, one row a host (a row for each of a host's ``services``), read from the hosts themselves
(what ``sglfleet status`` tabulates).

Each host answers with one command: its OS, glibc and ``python3`` (``HostOs``),
then ``sglfleet-release state``, which reads its links, its unit and its own
``/health`` and ``/metrics`` (the serving port may be closed to the controller).
The release a host should serve is its stack's for its own ``python3``. It runs
as the deploy does: as the inventory's SSH user, through sudo where the host's
data (``_sudo``) asks. A gateway host (group ``gateways``) answers with its
unit's state, and its gateway with its workers and their health (``GET
/workers``, asked from the controller as the rollout asks it, with the API key).

**Example:**

.. code:: python

    rows = fleet_status("inventory/dev.py", {"_sudo": True})
    progress(rows)   # "rollout: 2 of 2 hosts serve their declared release (canary 1/1, wave1 1/1)"
"""

from __future__ import annotations

import itertools
import json
import shlex

from pyinfra.api import Config, State
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.api.connect import connect_all

from sglfleet.facts import sections
from sglfleet.facts.firewall import NO_NFT, FirewallHostState, FirewallState
from sglfleet.facts.os import HostOs, OsInfo
from sglfleet.facts.sudo import SudoAccess
from sglfleet.host.layout import GATEWAY, LAYOUT
from sglfleet.plan.validation import load_inventory, plan_inventory
from sglfleet.controller import router

# What starts each service's answer in the status read, after the OS's own sections.
STATE_MARK = "## state "
FIREWALL_MARK = "## firewall"


def firewall_word(found: FirewallHostState | None, policy) -> str:
    """
    Whether the host's policy is in force, in a word or two: ``in force 3f2a9c1d0b7e``, ``drifted``,
    ``differs`` (a converge applies another), ``not confirmed``, ``absent``, ``no nft``, or ``off``.

    + found: the host's ``FirewallState``, or None where it was not read
    + policy: the planned policy (``HostPlan.policy``), or None where ``firewall`` is off
    """
    if found is None:
        return "-"
    if policy is None:
        return "off" if found.digest is None else "off (a converge removes it)"
    if found.live == NO_NFT:
        return "no nft"
    if found.pending:
        return "not confirmed"
    if found.digest is None:
        return "absent"
    if found.drifted:
        return "drifted"
    return f"in force {found.digest[:12]}" if found.digest == policy.digest else "differs"


def fleet_status(inventory_path: str, data: dict | None = None) -> list[dict]:
    """
    Connect to every host of the inventory and collect its release state.

    + inventory_path: a pyinfra inventory file, e.g. ``inventory/dev.py``
    + data: host data overrides, e.g. ``{"ssh_user": "deploy", "_sudo": True}``

    **Example:**

    .. code:: python

        for row in fleet_status("inventory/dev.py"):
            print(row["host"], row["current"], row["health"])
    """
    inventory = load_inventory(inventory_path, data)
    fleet = plan_inventory(inventory)
    state = State(inventory, Config())
    connect_all(state)
    wave_of = {name: wave.name for wave in fleet.waves for name in wave.hosts}

    rows = []
    for host in inventory:
        plan = fleet.hosts[host.name]
        if plan.is_gateway:
            rows.append(_gateway_row(state, host, dict(fleet.gateways)[host.name], plan, fleet.trust))
            continue
        base = {"host": host.name, "wave": wave_of.get(host.name), "os": None, "python": None, "declared": None}
        if not host.connected:
            rows += [{**base, "service": service.name, "error": "unreachable"} for service in plan.services]
            continue
        found, answers, firewall = _host_state(state, host, plan.services)
        for service in plan.services:  # one row a service: its own releases, unit and health
            row = {**base, "service": service.name, "os": found.name if found.pretty else None,
                   "python": found.python, "firewall": firewall_word(firewall, plan.policy), **answers[service.name]}
            # What this inventory declares the service should serve, as a converge would render it
            # for the host's own python3 (none for a Python its stack does not serve).
            if plan.stack.serves(found.python):
                row["declared"] = plan.build(found.python_minor).releases[service.name].release_id
            rows.append(row)
    return rows


def _connector(state: State, host) -> dict:
    """The host's sudo settings, from its data, as pyinfra resolves them for an operation."""
    arguments, _ = pop_global_arguments(state, host, {})
    return {key: arguments[key] for key in CONNECTOR_ARGUMENT_KEYS if key in arguments}


def _gateway_row(state: State, host, url: str, plan, trust: str = "") -> dict:
    """A gateway host's row: its unit's state, and its gateway's workers with their health (``trust``: an https gateway's CA)."""
    row: dict = {"host": host.name, "wave": "gateway", "gateway": url, "workers": None}
    if not host.connected:
        row["error"] = "unreachable"
        return row
    ok, output = host.run_shell_command(f"systemctl is-active {GATEWAY.unit}; echo {shlex.quote(FIREWALL_MARK)}; "
                                        f"{FirewallState().command()}", **_connector(state, host))
    unit, firewall = _split(output.stdout_lines, FIREWALL_MARK)
    row["active_state"] = (unit or ["unknown"])[0]
    row["firewall"] = firewall_word(None if firewall is None else FirewallState().process(firewall), plan.policy)
    try:
        listed = router.workers(url, plan.gateway_admin_key, trust or None)
    except router.RouterError as error:
        row["gateway_error"] = str(error)
        return row
    # smg lists a PD worker's role as its worker_type ("prefill", "decode"; "regular" for a whole server).
    row["workers"] = [{"url": worker_url, "healthy": bool(worker.get("is_healthy")),
                       "status": worker.get("status"), "load": worker.get("load"),
                       "role": worker.get("worker_type") if worker.get("worker_type") in ("prefill", "decode") else None}
                      for worker_url, worker in sorted(listed.items())]
    return row


def _host_state(state: State, host, services) -> tuple[OsInfo, dict[str, dict], FirewallHostState | None]:
    """
    The host's OS, what ``sglfleet-release state`` says of each service (or ``{"error": ...}``), and its
    firewall (None where it was not read), in one command.
    """
    connector = _connector(state, host)
    if connector.get("_sudo") and not connector.get("_sudo_password"):
        # Asked first, without sudo: a sudo that wants a password would make pyinfra prompt.
        ok, output = host.run_shell_command(SudoAccess().command())
        access = SudoAccess().process(output.stdout_lines)
        if access["status"] != "ok":
            return OsInfo(), {service.name: {"error": f"sudo: {access['message']}"} for service in services}, None
    asks = " && ".join(f"echo {shlex.quote(STATE_MARK + service.name)} && "
                       + shlex.join([LAYOUT.tool, *service.layout.tool_args,
                                     "state"]) for service in services)
    ok, output = host.run_shell_command(f"{HostOs().command()}; echo {shlex.quote(FIREWALL_MARK)}; {FirewallState().command()}; "
                                        f"{asks}", **connector)
    head = list(itertools.takewhile(lambda line: not line.startswith(STATE_MARK), output.stdout_lines))
    lines = output.stdout_lines[len(head):]
    os_lines, firewall = _split(head, FIREWALL_MARK)
    found = HostOs().process(os_lines)
    answers = {}
    for name, answer in sections(lines, STATE_MARK).items():
        try:
            answers[name] = json.loads("\n".join(answer))
        except ValueError:
            pass  # cut short: its error below
    why = output.stderr or "sglfleet-release is not installed"
    return found, {service.name: answers.get(service.name) or {"error": why} for service in services}, \
        None if firewall is None else FirewallState().process(firewall)


def _split(lines: list[str], mark: str) -> tuple[list[str], list[str] | None]:
    """The lines before ``mark``, and those after it (None where it is missing: the read was cut short)."""
    if mark not in lines:
        return lines, None
    at = lines.index(mark)
    return lines[:at], lines[at + 1:]


def progress(rows: list[dict]) -> str:
    """
    How far the rollout of the declared releases has got, wave by wave: a host
    counts when it serves its declared release.

    **Example:**

    .. code:: python

        progress(rows)   # "rollout: 3 of 6 hosts serve their declared release (canary 1/1, wave1 2/3, wave2 0/2)"
    """
    waves: dict[str, list[bool]] = {}
    rows = [row for row in rows if "gateway" not in row]  # a gateway serves no release
    for row in rows:
        done = row.get("declared") is not None and row.get("serving") == row.get("declared") == row.get("current")
        waves.setdefault(row.get("wave") or "-", []).append(done)
    done = sum(sum(hosts) for hosts in waves.values())
    per_wave = ", ".join(f"{wave} {sum(hosts)}/{len(hosts)}" for wave, hosts in waves.items())
    what = "services" if len(rows) != len({row["host"] for row in rows}) else "hosts"
    return f"rollout: {done} of {len(rows)} {what} serve their declared release ({per_wave})"
