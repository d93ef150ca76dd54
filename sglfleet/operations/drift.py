"""
Drift on the host's ``sglfleet.prom``: marked when a converge finds it, cleared once the converge got through.

An operation that finds drift (``sglfleet.run.diffs.report_drift``) yields
``marked`` before its repair, so a repair that fails leaves
``sglfleet_drift{kind=...} 1`` behind. The converge's last operation,
``cleared``, puts every kind back to 0 on a host it reached, and costs nothing
on a host where nothing was found or left marked: a quiet converge stays one
round trip.

**Example:**

.. code:: python

    yield marked("stack", "/var/lib/prometheus/node-exporter")
    cleared(name="Drift repaired", recorded=host_state(host).release.drifted)
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from sglfleet.host.drift import KINDS
from sglfleet.host.layout import LAYOUT
from sglfleet.host.textfile import DEFAULT_DIR
from sglfleet.run.diffs import drift_kinds, say


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
    kinds = drift_kinds(host.name) | set(recorded or ())
    if not kinds:
        host.noop("no drift found, none marked")
        return
    say(f"Will mark {', '.join(sorted(kinds))} as no longer drifted in sglfleet.prom")
    yield _tool("clear", "--textfile-dir", textfile_dir)
