"""
Validate and plan the fleet once pyinfra holds the inventory, before any connection.

**Example:**

.. code:: python

    # config.py
    after_init(state, plan_before_connecting, ...)
"""

from __future__ import annotations

import sys

from sglfleet.errors import ConfigError
from sglfleet.plan.fleet_plan import plan_fleet
from sglfleet.plan.validation import checked


def plan_before_connecting(state, inventory) -> None:
    """
    Check the inventory (with ``--data`` overrides applied and ``--limit`` known) before
    any connection: bad input gets one line per problem, exit 2, and no host is touched.
    Warnings are printed and the run goes on, with the fleet planned once
    (``sglfleet.plan.fleet_plan``) and the plan kept on the state, where
    ``fleet_plan(state)`` finds it. A hook of ``after_init``.

    + state: ``pyinfra.state`` as ``config.py`` sees it
    + inventory: the inventory ``State.init`` was given
    """
    try:
        findings, configs = checked(inventory, measured_os_severity="warning")
    except ConfigError as error:
        findings, configs = error.problems, {}
    for line in findings:
        print(line, file=sys.stderr)
    if any(": warning: " not in line for line in findings):
        raise SystemExit(2)
    limit = state.limit_hosts  # a list where --limit or --exclude narrowed the run
    state.sglfleet_plan = plan_fleet(inventory, configs,
                                     targets=[h.name for h in limit] if isinstance(limit, list) else None)
