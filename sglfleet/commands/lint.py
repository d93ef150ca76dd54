"""``sglfleet lint INVENTORY``: check an inventory's launch configuration without connecting.

Loads the inventory as pyinfra does (group data included, ``--data`` applied),
validates it against the schema and the wave plan, loads each host's stack,
renders its unit, env file and release, and lints its launch flags against the
stack's sglang flag set and the host's architecture (``gpu_compute_cap``).
Prints one line per finding (an open advisory of a host's sglang is a warning); on stderr, the
advisories its hosts' releases have that are closed there, and why; exits 1 when anything is an error.

**Example:**

.. code:: shell

    sglfleet lint inventory/prod.py
    sglfleet lint inventory/dev.py --data speculative_num_steps=4
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sglfleet.errors import ConfigError
from sglfleet.plan.advisories import closed_lines
from sglfleet.plan.templates import TEMPLATES
from sglfleet.plan.validation import check_inventory, load_inventory, parse_data


@click.command()
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("--data", "data", multiple=True, metavar="KEY=VALUE",
              help="Override host data, as pyinfra's --data does.")
@click.option("--templates", type=click.Path(exists=True, file_okay=False), default=str(TEMPLATES),
              show_default=True, help="The templates directory to render.")
def lint(inventory, data, templates):
    """Check INVENTORY's launch configuration against its stacks' sglang flags and GPUs."""
    accounting: list = []
    try:
        lines = check_inventory(load_inventory(inventory, parse_data(data)), Path(templates), accounting=accounting)
    except ConfigError as error:
        for line in error.problems:
            click.echo(line)
        sys.exit(1)
    for line in lines:
        click.echo(line)
    for line in closed_lines(accounting):  # none silently: the closed ones too, apart from the findings
        click.echo(f"sglfleet lint: {line}", err=True)
    errors = sum(": error: " in line for line in lines)
    click.echo(f"sglfleet lint: {errors} errors, {len(lines) - errors} warnings", err=True)
    sys.exit(1 if errors else 0)
