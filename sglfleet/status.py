"""
``sglfleet status INVENTORY``: one row a host, read from the hosts themselves.

Each host answers with one command, ``sglfleet-release state``, which reads its
links, its unit and its own ``/health`` and ``/metrics`` (the serving port may
be closed to the controller). It runs as the deploy does: as the inventory's
SSH user, through sudo where the inventory (``_sudo``) or ``--sudo`` asks.
"""

from __future__ import annotations

import json

import click
from pyinfra.api import Config, State
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.api.connect import connect_all

from sglfleet.context import fleet_waves, host_release
from sglfleet.facts.sudo import SudoAccess
from sglfleet.host.bake import describe
from sglfleet.host.layout import LAYOUT
from sglfleet.validation import load_inventory, parse_data

COLUMNS = ("host", "wave", "declared", "current", "serving", "previous", "stack", "unit", "health", "gate", "bake",
           "models")


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
    state = State(inventory, Config())
    connect_all(state)
    wave_of = {
        name: wave.name
        for wave in fleet_waves(inventory, [h.name for h in inventory])
        for name in wave.hosts
    }

    rows = []
    for host in inventory:
        # What this inventory declares the host should serve, as a converge would render it.
        row = {"host": host.name, "wave": wave_of.get(host.name), "declared": host_release(host).release_id}
        if not host.connected:
            row["error"] = "unreachable"
        else:
            row.update(_host_state(state, host))
        rows.append(row)
    return rows


def _host_state(state: State, host) -> dict:
    """What ``sglfleet-release state`` says on ``host``, or ``{"error": ...}``."""
    # The host's sudo settings, from its data, as pyinfra resolves them for an operation.
    arguments, _ = pop_global_arguments(state, host, {})
    connector = {key: arguments[key] for key in CONNECTOR_ARGUMENT_KEYS if key in arguments}
    if connector.get("_sudo") and not connector.get("_sudo_password"):
        # Asked first, without sudo: a sudo that wants a password would make pyinfra prompt.
        ok, output = host.run_shell_command(SudoAccess().command())
        access = SudoAccess().process(output.stdout_lines)
        if access["status"] != "ok":
            return {"error": f"sudo: {access['message']}"}
    ok, output = host.run_shell_command(f"{LAYOUT.tool} state", **connector)
    if not ok:
        return {"error": output.stderr or "sglfleet-release is not installed"}
    return json.loads(output.stdout)


def _cell(row: dict, column: str) -> str:
    if column == "unit" and row.get("error"):
        return row["error"]
    if column == "serving" and row.get("serving") and row.get("serving") != row.get("current"):
        return f"{row['serving'][:12]} (not current!)"
    if column == "current" and row.get("current") and row.get("current") != row.get("declared"):
        return f"{row['current'][:12]} (not declared!)"
    if column in ("current", "previous") and row.get(column) in (row.get("drifted") or []):
        return f"{row[column][:12]} (edited on the host!)"
    if column == "gate":
        startup = row.get("startup") or {}
        figures = startup.get("figures") or {}
        if not startup:
            return "-"
        if not startup.get("passed"):
            return "failed"
        return f"passed (accept {figures['spec_accept_length']:g})" if "spec_accept_length" in figures else "passed"
    if column == "bake":
        baked = row.get("bake") or {}
        return f"{baked['verdict']}: {describe(baked.get('figures') or {})}" if baked else "-"
    if column == "models":
        revisions = [f"{m['repo']}@{m['revision'][:8]}{'' if m['verified'] else ' (unverified)'}"
                     for m in row.get("models") or []]
        return f"{', '.join(revisions)} ({row.get('models_bytes', 0) / 1e9:.2f} GB)" if revisions else "-"
    value = row.get({"unit": "active_state"}.get(column, column))
    if column in ("current", "previous", "serving") and value:
        return value[:12]
    return "-" if value is None else str(value)


def progress(rows: list[dict]) -> str:
    """
    How far the rollout of the declared releases has got, wave by wave: a host
    counts when it serves its declared release.

    **Example:**

    .. code:: python

        progress(rows)   # "rollout: 3 of 6 hosts serve their declared release (canary 1/1, wave1 2/3, wave2 0/2)"
    """
    waves: dict[str, list[bool]] = {}
    for row in rows:
        done = row.get("declared") is not None and row.get("serving") == row.get("declared") == row.get("current")
        waves.setdefault(row.get("wave") or "-", []).append(done)
    done = sum(sum(hosts) for hosts in waves.values())
    per_wave = ", ".join(f"{wave} {sum(hosts)}/{len(hosts)}" for wave, hosts in waves.items())
    return f"rollout: {done} of {len(rows)} hosts serve their declared release ({per_wave})"


@click.command()
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--ssh-user", help="Log in as this user, as pyinfra's --ssh-user does.")
@click.option("--sudo", is_flag=True, default=None, help="Run through sudo, as pyinfra's --sudo does.")
@click.option("--data", "data", multiple=True, metavar="KEY=VALUE",
              help="Override host data, as pyinfra's --data does (what the declared release is rendered from).")
def status(inventory, as_json, ssh_user, sudo, data):
    """Tabulate the hosts of INVENTORY: wave, releases, what serves, stack, unit, health, gate, bake and models."""
    overrides = {**parse_data(data), "ssh_user": ssh_user, "_sudo": sudo}
    rows = fleet_status(inventory, {key: value for key, value in overrides.items() if value is not None})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = [COLUMNS] + [tuple(_cell(row, c) for c in COLUMNS) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    for line in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    click.echo(progress(rows))
    if any(row.get("error") for row in rows):
        raise SystemExit(1)
