"""
What the host tool and the controller agree on: the tool's exit statuses, its
result lines, and how long a run may hold a host's lock. Shipped to hosts with
the tool (stdlib only); the controller reads the same names.

**Example:**

.. code:: python

    print(result_line(stage="startup", passed=True))   # the tool
    status == ROLLED_BACK                                # the controller: the host serves its earlier release
"""

from __future__ import annotations

import json

PASSED = 0  # the switch, gate or bake passed
ROLLED_BACK = 1  # failed; the host serves its earlier release again
USAGE = 2  # a usage or layout error: nothing was changed
BUSY = 3  # another run held the lock past --wait-lock
DOWN = 4  # failed, and nothing serves
BAKE_FAILED = 5  # the bake failed; the release still serves (revert it)
SWITCHED_AWAY = 6  # the release is no longer current: another run switched the host
SYSTEM = 7  # a system command (systemctl) failed: the host's state is unknown
NOT_IN_PLACE = 8  # ``update``: the change is not weights-only on this host; nothing was changed (switch instead)

RESULT = "sglfleet-result"


def result_line(**result) -> str:
    """One result record as the tool prints it on stdout: ``sglfleet-result {...}``."""
    return f"{RESULT} {json.dumps(result, sort_keys=True)}"


def results(lines: list[str]) -> list[dict]:
    """The result records among the tool's stdout lines, in order."""
    return [json.loads(line[len(RESULT) + 1:]) for line in lines if line.startswith(f"{RESULT} ")]


def lock_wait_s(warmup_s: float, bake_s: float) -> float:
    """
    How long a run may hold a host's lock: a switch's gate and bake, then a rollback's gate.

    + warmup_s, bake_s: the release's gate settings
    """
    return 2 * warmup_s + bake_s + 300
