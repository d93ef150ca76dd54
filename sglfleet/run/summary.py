"""
The rollout's closing lines: which hosts serve what, which failed and why, and
what a pause held back, printed after pyinfra's results table, so the end of a
run names the hosts that need a look.

**Example:**

.. code:: python

    verdict("node1", "gate passed on 3f2a9c1d0b7e (accept length 2.9, 256 tokens in 4 generations, 1.2 s)")
    passed("node1", "serves 3f2a9c1d0b7e6a55")
    failed("node2", "gate failed on release 3f2a9c1d0b7e6a55: unit: ...")
    print_summary()   # --> Rollout: 1 passed (node1); 1 failed: node2 (gate failed on ...);
                      # -->   node1: gate passed on 3f2a9c1d0b7e (accept length 2.9, ...)
"""

from __future__ import annotations

import re

import click

from sglfleet.run.record import record


def passed(host_name: str, outcome: str) -> None:
    """Record a host that passed its switch (or roll back), and what it serves now (each service's, in turn)."""
    passed = record().passed
    passed[host_name] = f"{passed[host_name]}; {outcome}" if host_name in passed else outcome


def failed(host_name: str, message: str) -> None:
    """Record why a host failed; the first reason counts (later lines explain it)."""
    record().failed.setdefault(host_name, message.splitlines()[0] if message else "failed")


def verdict(host_name: str, line: str) -> None:
    """Record one gate or bake verdict of a host, with its figures, in the order they came."""
    record().verdicts.setdefault(host_name, []).append(line)


def held(waves: list[str], until: str) -> None:
    """Record the waves ``rollout_until`` holds back this run."""
    record().held[:] = [f"paused after wave {until}: {', '.join(waves)} not started; run again without "
                f"rollout_until to go on"]


def paused() -> str | None:
    """What ``rollout_until`` held back this run, or None."""
    held = record().held
    return held[0] if held else None


def passed_hosts() -> list[str]:
    return sorted(record().passed, key=_host_order)


def failed_hosts() -> list[str]:
    return sorted(record().failed, key=_host_order)


def failure(host_name: str) -> str | None:
    """Why ``host_name`` failed (the first reason), or None."""
    return record().failed.get(host_name)


def lines() -> list[str]:
    """The summary, one line each, or [] when this run switched nothing."""
    run = record()
    out = []
    if run.passed:
        out.append(f"--> Rollout: {len(run.passed)} passed ({', '.join(sorted(run.passed))})")
    if run.failed:
        out.append(f"--> Rollout: {len(run.failed)} failed: " + "; ".join(
            f"{name} ({reason})" for name, reason in sorted(run.failed.items())))
    out += [f"--> Rollout: {line}" for line in run.held]
    for name in sorted(run.verdicts, key=_host_order):
        out += [f"-->   {name}: {line}" for line in run.verdicts[name]]
    return out


def _host_order(name: str) -> tuple:
    """node2 before node10: digits compare as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def print_summary() -> None:
    """Print the summary (for ``atexit``: after pyinfra's results)."""
    for line in lines():
        click.echo(line, err=False)
