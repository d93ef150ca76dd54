"""
Drift found on a host, kept in the run's record as the run executes (``sglfleet.operations.drift.found``).

**Example:**

.. code:: python

    yield FunctionCommand(recorded, ("stack", "stack dev-0a24", "Drift: stack dev-0a24 changed ..."), {})
"""

from __future__ import annotations

from sglfleet.record.events import drift_found
from sglfleet.record.run import record


def recorded(state, host, kind: str, what: str, line: str) -> bool:
    """
    Keep the drift in the run's record and its event log: repaired if the run ends well on the host.

    + state, host: as pyinfra calls a ``FunctionCommand``
    + kind: one of ``sglfleet.host.drift.KINDS``
    + what, line: what drifted, and what the run said of it
    """
    drift_found(record(state), host.name, kind, what, line)
    return True


def kinds(state, host_name: str) -> set[str]:
    """
    The kinds of drift this run found on ``host_name`` so far.

    + state: pyinfra's state of the run
    + host_name: the host
    """
    return set(record(state).drift_kinds.get(host_name, ()))
