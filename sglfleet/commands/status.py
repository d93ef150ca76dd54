"""
``sglfleet status INVENTORY``: one row a host, read from the hosts themselves.

The rows come from ``sglfleet.status.fleet_status.fleet_status``; this command prints them
as a table (or JSON) and the rollout's progress, and exits 1 when a host did
not answer.

**Example:**

.. code:: shell

    sglfleet status inventory/dev.py
    sglfleet status inventory/prod.py --ssh-user deploy --sudo --json
"""

from __future__ import annotations

import json

import click

from sglfleet.host.bake import describe
from sglfleet.host.layout import LAYOUT
from sglfleet.plan.validation import parse_data
from sglfleet.status.fleet_status import fleet_status, progress

COLUMNS = ("host", "wave", "os", "python", "declared", "current", "serving", "revision", "previous", "stack", "unit", "health",
           "gate", "bake", "models", "firewall")


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
        cut = f"; its stop cut {startup['cut_at_stop']} requests" if startup.get("cut_at_stop") is not None else ""
        if not startup.get("passed"):
            return "failed" + cut
        return (f"passed (accept {figures['spec_accept_length']:g})" if "spec_accept_length" in figures
                else "passed") + cut
    if column == "bake":
        baked = row.get("bake") or {}
        return f"{baked['verdict']}: {describe(baked.get('figures') or {})}" if baked else "-"
    if column == "models":
        revisions = [f"{m['repo']}@{m['revision'][:8]}{'' if m['verified'] else ' (unverified)'}"
                     for m in row.get("models") or []]
        return f"{', '.join(revisions)} ({row.get('models_bytes', 0) / 1e9:.2f} GB)" if revisions else "-"
    if column == "revision" and row.get("revision"):  # the model revision served; loaded in place, or at start
        return row["revision"][:12] + (" (in place)" if row.get("in_place") else "")
    value = row.get({"unit": "active_state"}.get(column, column))
    if column in ("current", "previous", "serving") and value:
        return value[:12]
    return "-" if value is None else str(value)


@click.command()
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--ssh-user", help="Log in as this user, as pyinfra's --ssh-user does.")
@click.option("--sudo", is_flag=True, default=None, help="Run through sudo, as pyinfra's --sudo does.")
@click.option("--data", "data", multiple=True, metavar="KEY=VALUE",
              help="Override host data, as pyinfra's --data does (what the declared release is rendered from).")
def status(inventory, as_json, ssh_user, sudo, data):
    """Tabulate the hosts of INVENTORY: wave, OS and python3, releases, what serves, stack, unit, health, gate, bake,
    models, and whether each host's firewall policy is in force."""
    overrides = {**parse_data(data), "ssh_user": ssh_user, "_sudo": sudo}
    rows = fleet_status(inventory, {key: value for key, value in overrides.items() if value is not None})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    serving = [row for row in rows if "gateway" not in row]
    gateways = [row for row in rows if "gateway" in row]
    # A service column where a host runs several: each of its services is a row.
    columns = COLUMNS if all(LAYOUT.for_service(row.get("service", LAYOUT.service_name)).legacy for row in serving) else (
        COLUMNS[:1] + ("service",) + COLUMNS[1:])
    _table(columns, [tuple(_cell(row, c) for c in columns) for row in serving])
    click.echo(progress(rows))
    if gateways:
        click.echo("")
        _table(GATEWAY_COLUMNS, [line for row in gateways for line in _gateway_lines(row)])
    if any(row.get("error") or row.get("gateway_error") for row in rows):
        raise SystemExit(1)


GATEWAY_COLUMNS = ("gateway", "url", "unit", "firewall", "worker", "health", "load")


def _gateway_lines(row: dict) -> list[tuple[str, ...]]:
    """A gateway's lines: one a worker it lists, with its health (or why it did not answer)."""
    first = (row["host"], row["gateway"], row.get("error") or row.get("active_state") or "-", row.get("firewall") or "-")
    if row.get("workers") is None:
        return [(*first, row.get("gateway_error") or "-", "-", "-")]
    if not row["workers"]:
        return [(*first, "(no worker)", "-", "-")]
    return [(*(first if number == 0 else ("", "", "", "")), worker["url"] + (f" ({worker['role']})" if worker.get("role") else ""),
             ("healthy" if worker["healthy"] else "unhealthy") + (f" ({worker['status']})" if worker["status"] else ""),
             "-" if worker["load"] is None else str(worker["load"]))
            for number, worker in enumerate(row["workers"])]


def _table(columns: tuple[str, ...], lines: list[tuple[str, ...]]) -> None:
    table = [columns] + lines
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
