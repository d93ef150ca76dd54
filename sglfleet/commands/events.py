"""
``sglfleet events``: what earlier runs did, from the controller's event log.

**Example:**

.. code:: shell

    sglfleet events --since 2h --host node1
    sglfleet events --json | jq 'select(.reason == "GateFailed")'
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from sglfleet.events import default_path, parse_since, read_events


def _line(event: dict) -> str:
    releases = ""
    if event.get("from") or event.get("to"):
        releases = f" {(event.get('from') or '-')[:12]} -> {(event.get('to') or '-')[:12]}"
    return (f"{event['time']}  {event['run']}  {event.get('host') or '-':<8} {event['reason']:<21}"
            f"{releases}  {event.get('message', '')}").rstrip()


@click.command()
@click.option("--since", help="only events this recent: 30m, 2h, 1d, or a time such as 2026-12-01T14:00:00Z")
@click.option("--host", "host_name", help="only this host's events (and the run-wide ones)")
@click.option("--run", help="only the events of this run id")
@click.option("--file", "path", type=click.Path(dir_okay=False, path_type=Path),
              help="the log (default: $XDG_STATE_HOME/sglfleet/events.jsonl; an inventory's events_file)")
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line, as logged")
def events(since, host_name, run, path, as_json):
    """The events of earlier runs, oldest first: batches, switches, gates, bakes, rollbacks, drift."""
    try:
        cutoff = parse_since(since) if since else None
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    for event in read_events(path or default_path(), since=cutoff, host=host_name, run=run):
        click.echo(json.dumps(event, sort_keys=True) if as_json else _line(event))
