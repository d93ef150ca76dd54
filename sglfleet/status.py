"""
``sglfleet status INVENTORY``: one row a host, read from the hosts themselves.

Each host answers with one command, ``sglfleet-release state``, which reads its
links, its unit and its own ``/health`` and ``/metrics`` (the serving port may
be closed to the controller).
"""

from __future__ import annotations

import json

import click
from pyinfra.api import Config, State
from pyinfra.api.connect import connect_all

from sglfleet.context import fleet_waves
from sglfleet.lint_cli import load_inventory
from sglfleet.operations.release import RELEASE_TOOL

COLUMNS = ("host", "wave", "current", "previous", "stack", "unit", "health", "accept_len")


def fleet_status(inventory_path: str) -> list[dict]:
    """
    Connect to every host of the inventory and collect its release state.

    + inventory_path: a pyinfra inventory file, e.g. ``inventory/dev.py``

    **Example:**

    .. code:: python

        for row in fleet_status("inventory/dev.py"):
            print(row["host"], row["current"], row["health"])
    """
    inventory = load_inventory(inventory_path)
    state = State(inventory, Config())
    connect_all(state)
    wave_of = {
        name: wave.name
        for wave in fleet_waves(inventory, [h.name for h in inventory])
        for name in wave.hosts
    }

    rows = []
    for host in inventory:
        row = {"host": host.name, "wave": wave_of.get(host.name)}
        if not host.connected:
            row["error"] = "unreachable"
        else:
            ok, output = host.run_shell_command(f"{RELEASE_TOOL} state")
            if ok:
                row.update(json.loads(output.stdout))
            else:
                row["error"] = output.stderr or "sglfleet-release is not installed"
        rows.append(row)
    return rows


def _cell(row: dict, column: str) -> str:
    key = {"unit": "active_state", "accept_len": "spec_accept_length"}.get(column, column)
    value = row.get(key)
    if column in ("current", "previous") and value:
        return value[:12]
    if column == "unit" and row.get("error"):
        return row["error"]
    return "-" if value is None else str(value)


@click.command()
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(inventory, as_json):
    """Tabulate the hosts of INVENTORY: wave, releases, stack, unit state, health."""
    rows = fleet_status(inventory)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = [COLUMNS] + [tuple(_cell(row, c) for c in COLUMNS) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    for line in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    if any(row.get("error") for row in rows):
        raise SystemExit(1)
