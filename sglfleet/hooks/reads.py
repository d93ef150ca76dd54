"""
Each host's read started as soon as the host is connected (``deploy.py``'s runs).

**Example:**

.. code:: python

    # config.py
    after_init(state, ..., read_on_connect)
"""

from __future__ import annotations

from pathlib import Path

import click
from pyinfra.api import Host
from pyinfra.api.state import BaseStateCallback

from sglfleet.controller.reads import start_reads
from sglfleet.plan.fleet_plan import fleet_plan
from sglfleet.record.run import record


class ReadOnConnect(BaseStateCallback):
    """
    Start a host's read as soon as it is connected: it runs while the other hosts connect and the
    deploy file loads, and ``read_host`` finds it under way.

    **Example:**

    .. code:: python

        state.add_callback_handler(ReadOnConnect())  # once the state is initialised, before connecting
    """

    @staticmethod
    def host_connect(state, host: Host) -> None:
        fleet = fleet_plan(state)
        if host.name in fleet.targets:
            start_reads(state, [host], fleet, record(state))


def read_on_connect(state, inventory) -> None:
    """
    When the run is ``deploy.py``'s, start each host's read as soon as it connects (``ReadOnConnect``).
    Its other playbook, ``rollback.py``, reads each host in its own steps. A hook of ``after_init``:
    pyinfra makes its callback handlers in ``State.init``, and this adds one after them.

    + state: ``pyinfra.state`` as ``config.py`` sees it
    + inventory: the inventory ``State.init`` was given
    """
    context = click.get_current_context(silent=True)
    playbooks = context.params.get("operations") or () if context is not None else ()
    if any(Path(name).name == "deploy.py" for name in playbooks):
        state.add_callback_handler(ReadOnConnect())
