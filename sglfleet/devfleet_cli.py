"""``sglfleet devfleet``: boot, inspect and remove the local fleet."""

import subprocess
import sys

import click

from sglfleet.devfleet import FAULT_MODES, DevFleetError, Fleet


def _fleet() -> Fleet:
    return Fleet(log=lambda line: click.echo(line, err=True))


def _fail(error: DevFleetError):
    raise click.ClickException(str(error))


@click.group()
def devfleet():
    """The local fleet: real systemd hosts on this machine (systemd-nspawn)."""


@devfleet.command()
@click.option("--hosts", "n", default=3, show_default=True, help="How many hosts (node1..nodeN).")
def up(n):
    """Boot hosts node1..nodeN; hosts already running are left alone."""
    fleet = _fleet()
    try:
        changes = fleet.up(n)
    except DevFleetError as error:
        _fail(error)
    for what in ("started", "stopped", "kept"):
        if changes[what]:
            click.echo(f"{what}: {' '.join(changes[what])}")
    if not changes["started"] and not changes["stopped"]:
        click.echo("fleet already up; nothing changed")
    click.echo(f"inventory: pyinfra {fleet.inventory.relative_to(fleet.inventory.parents[1])} "
               f"deploy.py -y    ssh: ssh -F {fleet.ssh_config} node1")


@devfleet.command()
def down():
    """Stop every host by its recorded pid and remove links, overlays and state."""
    try:
        stopped = _fleet().down()
    except DevFleetError as error:
        _fail(error)
    click.echo(f"stopped: {' '.join(stopped)}" if stopped else "no fleet was up; nothing to stop")


@devfleet.command()
def status():
    """Tabulate hosts: address, pids, systemd state."""
    fleet = _fleet()
    rows = fleet.status()
    if not rows:
        click.echo("no fleet; run: sglfleet devfleet up")
        sys.exit(1)
    click.echo(f"{'HOST':<8} {'ADDRESS':<15} {'NSPAWN':>7} {'INIT':>7}  STATE")
    for row in rows:
        click.echo(f"{row['host']:<8} {row['address']:<15} {row['nspawn_pid'] or '-':>7} "
                   f"{row['leader_pid'] or '-':>7}  {row['state']}")
    sys.exit(0 if all(row["state"] == "running" for row in rows) else 1)


@devfleet.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.argument("host")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(host, command):
    """Run COMMAND on HOST over SSH: sglfleet devfleet exec node1 -- systemctl status."""
    fleet = _fleet()
    try:
        argv = fleet.ssh_argv(host) + ["--", " ".join(command)]
    except DevFleetError as error:
        _fail(error)
    sys.exit(subprocess.run(argv).returncode)


@devfleet.command()
@click.argument("host")
@click.argument("mode", type=click.Choice([*FAULT_MODES, "clear"]))
def fault(host, mode):
    """Set the stand-in's fault on HOST for its next start (clear removes it)."""
    try:
        _fleet().fault(host, mode)
    except DevFleetError as error:
        _fail(error)
    click.echo(f"{host}: fault {mode}" if mode != "clear" else f"{host}: fault cleared")
