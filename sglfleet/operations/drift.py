"""
Drift on the host's ``sglfleet.prom``: marked when a converge finds it, cleared once the converge got through.

An operation that finds drift says so with ``found``, and yields the command it returns
(which keeps the drift in the run's record as the run executes) and ``marked`` before
its repair, so a repair that fails leaves ``sglfleet_drift{kind=...} 1`` behind. The converge's last operation,
``cleared``, puts every kind back to 0 on a host it reached, and costs nothing
on a host where nothing was found or left marked: a quiet converge stays one
round trip.

**Example:**

.. code:: python

    yield found("stack", "stack dev-0a24", ["added .../sitecustomize.py"], "will build it again from its lock")
    yield marked("stack", "/var/lib/prometheus/node-exporter")
    cleared(name="Drift repaired", recorded=found.release.drifted)
"""

from __future__ import annotations

import shlex

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, operation

from sglfleet.controller import drift
from sglfleet.host.drift import KINDS
from sglfleet.host.layout import LAYOUT
from sglfleet.host.textfile import DEFAULT_DIR
from sglfleet.operations.output import say


def found(kind: str, what: str, differences: list[str], action: str) -> FunctionCommand:
    """
    Say, once, what on the host no longer is as sglfleet left it, and what this run does about it;
    the command that keeps it in the run's record as the run executes (yield it with ``marked``).

    + kind: one of ``sglfleet.host.drift.KINDS``, e.g. ``"stack"``: the ``kind`` of ``sglfleet_drift``
    + what: e.g. ``"stack dev-0a24832cc36f"``
    + differences: one line each, e.g. ``"added lib/python3.11/site-packages/sitecustomize.py"``
    + action: e.g. ``"will build it again from its lock"``
    """
    assert kind in KINDS, kind
    line = f"Drift: {what} changed on the host: {'; '.join(differences)}; {action}"
    say(line, logger.warning)
    return FunctionCommand(drift.recorded, (kind, what, line), {})


def marked(kind: str, textfile_dir: str = DEFAULT_DIR) -> str:
    """
    The command that records on the host that ``kind`` drifted (now), and rewrites ``sglfleet.prom``.

    + kind: one of ``sglfleet.host.drift.KINDS``
    + textfile_dir: node_exporter's textfile folder
    """
    assert kind in KINDS, kind
    return _tool("found", kind, "--textfile-dir", textfile_dir)


def _tool(*args: str) -> str:
    # A gateway host has no host tool (nor sglfleet.prom): nothing to mark there.
    tool = shlex.quote(LAYOUT.tool)
    return f"if [ -x {tool} ]; then {shlex.join([LAYOUT.tool, 'drift', *args])}; fi"


@operation()
def cleared(recorded: list[str] | None, textfile_dir: str = DEFAULT_DIR):
    """
    Record on the host that nothing is drifted any more: this converge reached its end there,
    and repaired what it found. Nothing to do when it found nothing and the host has nothing marked.

    + recorded: the kinds the host has marked as drifted (``ReleaseState``'s ``drifted``), as read
      at the start of the run; None when unknown (a gateway host): only this run's finds count
    + textfile_dir: node_exporter's textfile folder

    **Example:**

    .. code:: python

        cleared(name="No drift left", recorded=["stack"])
    """
    # This run's finds, as it executes: each finding operation's command kept them (``found``).
    kinds = drift.kinds(state, host.name) | set(recorded or ())
    if not kinds:
        host.noop("no drift found, none marked")
        return
    say(f"Will mark {', '.join(sorted(kinds))} as no longer drifted in sglfleet.prom")
    yield _tool("clear", "--textfile-dir", textfile_dir)
