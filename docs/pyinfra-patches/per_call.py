"""
What each of the four functions costs a call, for the pyinfra importable here: run it once on 3.10.0's source
and once with the patches applied.

Python's own ``timeit`` (the best of 7 repeats, as ``python -m timeit`` reports), on inputs of a deploy's size:

- ``get_operation_order_from_stack``: an operation called 12 frames below a deploy file (``deploy.py`` calling
  a task, pyinfra's ``@deploy`` wrapper and the operation's frames), with every module of pyinfra's CLI and
  operations loaded (``inspect.getmodule`` scans them all for the deploy file)
- ``pop_global_arguments``: a host in two groups, with 120 variables for all hosts
- ``all_global_arguments``
- ``_get_group_data``: a group data folder with one file of 120 variables

**Example:**

.. code:: shell

    PYTHONPATH=pyinfra-3.10.0/src python docs/pyinfra-patches/per_call.py   # stock
    PYTHONPATH=patched/src python docs/pyinfra-patches/per_call.py           # the four patches applied
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import tempfile
import timeit
from pathlib import Path
from unittest.mock import patch

import pyinfra
import pyinfra.operations
import pyinfra_cli.cli  # noqa: F401  (the modules a CLI run loads)
from pyinfra.api import Config, Inventory, State
from pyinfra.api.arguments import all_global_arguments, pop_global_arguments
from pyinfra.api.util import get_operation_order_from_stack
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import _get_group_data

for module in pkgutil.iter_modules(pyinfra.operations.__path__):
    importlib.import_module(f"pyinfra.operations.{module.name}")

ALL = {f"variable_{n}": n for n in range(120)}


def best(function, number: int) -> float:
    """Microseconds a call: the best of 7 repeats of ``number`` calls."""
    return min(timeit.repeat(function, number=number, repeat=7)) / number * 1e6


def operation_order() -> float:
    state = State(inventory=Inventory((["somehost"], {})), config=Config())
    state.current_deploy_filename = "deploy.py"
    state.current_op_file_number = 0
    # deploy.py calls a task, which goes 10 frames deeper before the operation asks for its order.
    source = "def call(depth):\n    return call(depth - 1) if depth else order(state)\n"
    namespace = {"order": get_operation_order_from_stack, "state": state}
    exec(compile(source, "deploy.py", "exec"), namespace)
    with patch("pyinfra.is_cli", True):
        return best(lambda: namespace["call"](10), 200)


def global_arguments() -> tuple[float, float]:
    inventory = Inventory(([("somehost", {"_sudo_user": "svc"})], ALL),
                          web=(["somehost"], {"port": 1}), canary=(["somehost"], {"_timeout": 30}))
    state = State(inventory=inventory, config=Config())
    host = inventory.get_host("somehost")
    return best(lambda: pop_global_arguments(state, host, {"_sudo": True}), 2000), best(all_global_arguments, 2000)


def group_data() -> float:
    with tempfile.TemporaryDirectory() as folder:
        lines = "".join(f"{key} = {value}\n" for key, value in ALL.items())
        (Path(folder) / "all.py").write_text("import os\n" + lines)
        state = State(inventory=Inventory((["somehost"], {})), config=Config())
        with ctx_state.use(state):
            return best(lambda: _get_group_data(folder), 20)


if __name__ == "__main__":
    pop, types = global_arguments()
    print(f"pyinfra {pyinfra.__version__} from {Path(pyinfra.__file__).parents[1]}, "
          f"Python {sys.version.split()[0]}, {len(sys.modules)} modules loaded")
    print(f"get_operation_order_from_stack  {operation_order():9.1f} us a call")
    print(f"pop_global_arguments            {pop:9.1f} us a call")
    print(f"all_global_arguments            {types:9.1f} us a call")
    print(f"_get_group_data (120 variables) {group_data():9.1f} us a load")
