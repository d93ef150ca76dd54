"""
Validate and plan the fleet once pyinfra holds the inventory, before any connection.

**Example:**

.. code:: python

    # config.py
    after_init(state, plan_before_connecting, ...)
"""

from __future__ import annotations

import os
import sys

from sglfleet.artifacts.keys import ADMIN_VARIABLES, KeysError, KeyStore
from sglfleet.errors import ConfigError
from sglfleet.plan.fleet_plan import plan_fleet
from sglfleet.plan.tls import made_fleet_cas
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
    made_admin_keys(config.secrets_file for config in configs.values())
    made_cas({host.name: host.groups for host in inventory}, configs)
    limit = state.limit_hosts  # a list where --limit or --exclude narrowed the run
    state.sglfleet_plan = plan_fleet(inventory, configs,
                                     targets=[h.name for h in limit] if isinstance(limit, list) else None)


def made_admin_keys(secrets_files, environ=os.environ) -> None:
    """
    Make gateway-admin and engine-admin where a secrets file lacks them (and the environment does
    not give them), so that no fleet runs with its control planes open; say so once for each.

    + secrets_files: the hosts' ``secrets_file``s (None where a host has none: nothing to keep them in)
    + environ: the controller's environment, whose keys win over the file's
    """
    if all(environ.get(variable) for variable in ADMIN_VARIABLES.values()):
        return
    for path in dict.fromkeys(path for path in secrets_files if path):
        try:
            made = KeyStore(path).ensure_admin_keys()
        except (KeysError, OSError) as error:
            print(f"sglfleet: error: {path}: cannot keep the admin keys: {error}", file=sys.stderr)
            raise SystemExit(2) from None
        for key in made:
            print(f"sglfleet: made the {key.role} key in {key.source} (`sglfleet keys list` shows it)",
                  file=sys.stderr)


def made_cas(groups, configs) -> None:
    """
    Make the fleet CA beside each secrets file whose hosts ask for TLS from it and lack one; say so once
    for each (``sglfleet.plan.tls.made_fleet_cas``).

    + groups: every host's inventory groups
    + configs: every host's validated ``HostConfig``
    """
    try:
        made = made_fleet_cas(configs, groups)
    except OSError as error:
        print(f"sglfleet: error: cannot keep the fleet CA: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    for ca in made:
        print(f"sglfleet: made the fleet CA in {ca.folder} (docs/tls.md)", file=sys.stderr)
