"""
The rollout's closing lines: which hosts serve what, which failed and why, and
what a pause held back, printed after pyinfra's results table, so the end of a
run names the hosts that need a look.

Each function takes the run's record (``sglfleet.record.run``) as its first argument.

**Example:**

.. code:: python

    verdict(run, "node1", "gate passed on 3f2a9c1d0b7e (accept length 2.9, 256 tokens in 4 generations, 1.2 s)")
    passed(run, "node1", "serves 3f2a9c1d0b7e6a55")
    failed(run, "node2", "gate failed on release 3f2a9c1d0b7e6a55: unit: ...")
    print_summary(state)   # --> Rollout: 1 passed (node1); 1 failed: node2 (gate failed on ...);
                           # -->   node1: gate passed on 3f2a9c1d0b7e (accept length 2.9, ...)
"""

from __future__ import annotations

import re

import click

from sglfleet.plan.fleet_plan import FleetPlan
from sglfleet.record.run import RunRecord, record


def passed(run: RunRecord, host_name: str, outcome: str) -> None:
    """Record a host that passed its switch (or roll back), and what it serves now (each service's, in turn)."""
    run.passed[host_name] = f"{run.passed[host_name]}; {outcome}" if host_name in run.passed else outcome


def failed(run: RunRecord, host_name: str, message: str) -> None:
    """Record why a host failed; the first reason counts (later lines explain it)."""
    run.failed.setdefault(host_name, message.splitlines()[0] if message else "failed")


def verdict(run: RunRecord, host_name: str, line: str) -> None:
    """Record one gate or bake verdict of a host, with its figures, in the order they came."""
    run.verdicts.setdefault(host_name, []).append(line)


def paused(fleet: FleetPlan | None) -> str | None:
    """
    What ``rollout_until`` holds back this run, or None: the plan says it.

    + fleet: this run's plan, or None where the run planned nothing (bad input)
    """
    if fleet is None or not fleet.rollout.held or all(one.is_gateway for one in fleet.hosts.values()):
        return None
    return (f"paused after wave {fleet.rollout.batches[-1].wave}: "
            f"{', '.join(wave.name for wave in fleet.rollout.held)} not started; run again without "
            f"rollout_until to go on")


def passed_hosts(run: RunRecord) -> list[str]:
    return sorted(run.passed, key=_host_order)


def failed_hosts(run: RunRecord) -> list[str]:
    return sorted(run.failed, key=_host_order)


def failure(run: RunRecord, host_name: str) -> str | None:
    """Why ``host_name`` failed (the first reason), or None."""
    return run.failed.get(host_name)


def lines(run: RunRecord, fleet: FleetPlan | None = None) -> list[str]:
    """
    The summary, one line each, or [] when this run switched nothing.

    + run: the run's record
    + fleet: its plan, for what ``rollout_until`` held back
    """
    out = []
    if run.passed:
        out.append(f"--> Rollout: {len(run.passed)} passed ({', '.join(sorted(run.passed))})")
    if run.failed:
        out.append(f"--> Rollout: {len(run.failed)} failed: " + "; ".join(
            f"{name} ({reason})" for name, reason in sorted(run.failed.items())))
    held = paused(fleet)
    out += [f"--> Rollout: {held}"] if held else []
    for name in sorted(run.verdicts, key=_host_order):
        out += [f"-->   {name}: {line}" for line in run.verdicts[name]]
    return out


def _host_order(name: str) -> tuple:
    """node2 before node10: digits compare as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def print_summary(state) -> None:
    """
    Print the summary of the run ``state`` is (for ``atexit``: after pyinfra's results).

    + state: ``pyinfra.state`` as ``config.py`` sees it
    """
    for line in lines(record(state), getattr(state, "sglfleet_plan", None)):
        click.echo(line, err=False)
