"""
Print the command of one host's read (``sglfleet.facts.host.HostRead``), as a converge would run it, for
bench/scale.py's skeleton (which copies the size of its output). Run with the fleet's environment.

.. code:: shell

    .venv/bin/python bench/skeleton/read_command.py inventory/dev.py node1
"""

import sys

from pyinfra.api import State
from pyinfra.context import ctx_state

from sglfleet.facts.host import HostRead
from sglfleet.plan.validation import load_inventory, plan_inventory
from sglfleet.controller.reads import read_arguments

inventory_file, name = sys.argv[1:3]
fleet = plan_inventory(load_inventory(inventory_file))
with ctx_state.use(State()):  # the run's record keeps the wheels it checks
    arguments = read_arguments(fleet.hosts[name], {})  # as root: no sudo to ask
print(HostRead().command(**{key: value for key, value in arguments.items() if not key.startswith("_")}))
