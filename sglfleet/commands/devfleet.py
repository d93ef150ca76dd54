"""``sglfleet devfleet``: boot, inspect and remove the local fleet."""

import os
import subprocess
import sys
from pathlib import Path

import click

from sglfleet.devfleet import FAULT_MODES, OSES, DevFleetError, Fleet


def _fleet() -> Fleet:
    return Fleet(log=lambda line: click.echo(line, err=True))


def _fail(error: DevFleetError):
    raise click.ClickException(str(error))


@click.group()
def devfleet():
    """The local fleet: real systemd hosts on this machine (systemd-nspawn)."""


def _oses(value: str | None) -> list[str] | None:
    """``--os bookworm,trixie`` as a list, each a known suite."""
    if value is None:
        return None
    oses = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in oses if name not in OSES]
    if unknown or not oses:
        raise click.BadParameter(f"{', '.join(unknown) or repr(value)}: use one of {', '.join(OSES)}, "
                                 "or several, comma-separated", param_hint="--os")
    return oses


OS_HELP = f"The hosts' Debian suites ({', '.join(OSES)}), cycled over the hosts: bookworm,trixie alternates."


@devfleet.command()
@click.option("--hosts", "n", default=3, show_default=True, help="How many hosts (node1..nodeN).")
@click.option("--os", "oses", default=None, help=OS_HELP + " Default: hosts running keep theirs, new ones bookworm.")
def up(n, oses):
    """Boot hosts node1..nodeN; hosts already running are left alone."""
    fleet = _fleet()
    try:
        changes = fleet.up(n, oses=_oses(oses))
    except DevFleetError as error:
        _fail(error)
    _print_changes(fleet, changes)


@devfleet.command()
@click.option("--hosts", "n", default=1, show_default=True, help="How many hosts to add after the last one.")
@click.option("--os", "oses", default=None, help=OS_HELP + " Default: bookworm.")
def add(n, oses):
    """Boot N more hosts after the last one; the others are left alone."""
    fleet = _fleet()
    try:
        changes = fleet.add(n, oses=_oses(oses))
    except DevFleetError as error:
        _fail(error)
    _print_changes(fleet, changes)


def _print_changes(fleet: Fleet, changes: dict) -> None:
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
    from sglfleet.devfleet.mirror import stop_demo

    fleet = _fleet()
    stop_demo(fleet.state_dir)
    try:
        stopped = fleet.down()
    except DevFleetError as error:
        _fail(error)
    click.echo(f"stopped: {' '.join(stopped)}" if stopped else "no fleet was up; nothing to stop")


@devfleet.group()
def mirror():
    """A local HF mirror (olah) serving a tiny pinned model and its draft, for the demo."""


@mirror.command("up")
@click.option("--port", default=8095, show_default=True, help="The mirror's port on the fleet's bridge.")
def mirror_up(port):
    """Make the demo's models, serve them on the bridge, lock their manifests (in .fleet/mirror/manifests)."""
    from sglfleet.devfleet.mirror import start_demo, stop_demo

    fleet = _fleet()
    if not fleet.state().get("gateway"):
        _fail(DevFleetError("no local fleet: run sglfleet devfleet up first"))
    stop_demo(fleet.state_dir)

    def lock(repo, revision, url, manifests):
        done = subprocess.run([str(Path(sys.executable).with_name("sglfleet")), "model", "lock",
                               f"{repo}@{revision}", "--endpoint", url], capture_output=True, text=True,
                              env={**os.environ, "SGLFLEET_MODELS": str(manifests)})
        if done.returncode != 0:
            raise click.ClickException(f"sglfleet model lock {repo}@{revision}: {done.stderr.strip()}")

    record = start_demo(fleet.state_dir, fleet.state()["gateway"], port, lock)
    click.echo(f"mirror: {record['url']} serves {record['model']}@{record['revision'][:12]} and "
               f"{record['draft']}@{record['draft_revision'][:12]}")
    click.echo(f"pin them: SGLFLEET_MODELS={record['manifests']} pyinfra inventory/dev.py deploy.py -y")
    click.echo(f"then its other revision, weights only: ... deploy.py -y --data model_revision={record['revisions'][-1]}")


@mirror.command("down")
def mirror_down():
    """Stop the demo's mirror by its recorded pid."""
    from sglfleet.devfleet.mirror import stop_demo

    click.echo("mirror stopped" if stop_demo(_fleet().state_dir) else "no mirror was running")


@devfleet.command()
def status():
    """Tabulate hosts: address, pids, systemd state."""
    fleet = _fleet()
    rows = fleet.status()
    if not rows:
        click.echo("no fleet; run: sglfleet devfleet up")
        sys.exit(1)
    click.echo(f"{'HOST':<8} {'ADDRESS':<15} {'NSPAWN':>7} {'INIT':>7}  {'OS':<9} STATE")
    for row in rows:
        click.echo(f"{row['host']:<8} {row['address']:<15} {row['nspawn_pid'] or '-':>7} "
                   f"{row['leader_pid'] or '-':>7}  {row['os']:<9} {row['state']}")
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
@click.argument("params", nargs=-1)
def fault(host, mode, params):
    """Set the stand-in's fault on HOST for its next start (clear removes it); slow-load takes SECONDS, slow-after SECONDS [FACTOR]."""
    mode = " ".join([mode, *params])
    try:
        _fleet().fault(host, mode)
    except DevFleetError as error:
        _fail(error)
    click.echo(f"{host}: fault {mode}" if mode != "clear" else f"{host}: fault cleared")


@devfleet.command(context_settings={"ignore_unknown_options": True})
@click.option("--url", default=None, help="Where the traffic goes. Default: the gateway on the fleet's last host "
                                         "(the one SGLFLEET_DEV_GATEWAYS=1 makes), port 30080.")
@click.option("--rate", default=5.0, show_default=True, help="Requests a second at most, from 4 threads.")
@click.option("--generate-only", is_flag=True, help="Only sglang's native /generate, not the clients' mix.")
@click.option("--tls", is_flag=True, help="The gateway serves TLS (gateway_tls = \"fleet_ca\"): https, verified with "
                                         "the fleet CA beside the fleet's secrets file (docs/tls.md).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def traffic(url, rate, generate_only, tls, command):
    """Send clients' requests through the gateway while COMMAND runs; then count them: sglfleet devfleet traffic -- pyinfra ...

    The mix: the openai SDK's streamed chat completions (some long), its completions,
    native /generate, and a route no server has; counted by kind (sent, answered in
    full, streams cut before [DONE], errors by status). Exits with COMMAND's status,
    or 1 when it succeeded but a request was not answered as expected. The client key
    is SGLFLEET_API_KEY where set, else the fleet's client key ``demo``
    (``sglfleet keys issue inventory/dev.py demo``, as ``make demo`` does).
    """
    from sglfleet.artifacts.keys import KeyStore
    from sglfleet.artifacts.tls import FleetCA
    from sglfleet.devfleet.traffic import CLIENT_MIX, GENERATE_ONLY, Traffic

    fleet = _fleet()
    if url is None:
        hosts = fleet.hosts
        if not hosts:
            _fail(DevFleetError("no fleet; run: sglfleet devfleet up"))
        url = f"{'https' if tls else 'http'}://{fleet.address(hosts[-1])}:30080"
    demo = KeyStore(fleet.secrets_file).find("demo")
    load = Traffic(url, api_key=os.environ.get("SGLFLEET_API_KEY") or (demo.value if demo else None), rate=rate,
                   mix=GENERATE_ONLY if generate_only else CLIENT_MIX,
                   ca=str(FleetCA.beside(fleet.secrets_file).cert_path) if tls else None)
    try:
        code = subprocess.run(list(command)).returncode
    finally:
        load.stop()
    click.echo(f"--> Traffic: {load.summary()}")
    sys.exit(code or (1 if load.failed() else 0))
