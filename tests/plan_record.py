"""
pyinfra's config for ``tests/test_engine_fleet.py``: the project's ``config.py``, then each host's plan written out.

When the run ends (a dry run, once every operation is planned), each host's operations are written
to ``$SGLFLEET_TEST_PLAN`` as JSON, in the order pyinfra would run them (``state.get_op_order()``),
each with what pyinfra planned for it: its order (the line numbers the operation order gives), hash,
names and arguments, the global arguments of the host's call and those shared by every host, and
whether it would change the host. Also the engine's cuts that were in place during the run. Values
that are not JSON are written as their names (functions) or their ``repr`` without memory addresses,
so that two runs of the same plan write the same file.

**Example:**

.. code:: shell

    SGLFLEET_TEST_PLAN=/tmp/plan.json pyinfra --config tests/plan_record.py inventory/dev.py deploy.py --dry
"""

import atexit
import json
import os
import re
from pathlib import Path

from pyinfra import state
from pyinfra_cli.util import exec_file

from sglfleet.hooks.engine import cuts_in_place

exec_file(str(Path(__file__).resolve().parents[1] / "config.py"))  # the project's own, as every run loads it


def plain(value):
    """``value`` as JSON, the same in every run: functions by name, other objects by ``repr`` without addresses."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(item) for item in value), key=repr)
    if hasattr(value, "__self__") and hasattr(value, "__func__"):  # a bound method: _if=unit.did_change
        return f"{value.__func__.__qualname__} of {plain(value.__self__)}"
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{value.__module__}.{value.__qualname__}"
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


def plans(state) -> dict:
    """Each host's operations in pyinfra's order, as the module's docstring says, and the cuts in place."""
    order = state.get_op_order()
    hosts = {}
    for host in state.inventory:
        ops = state.ops.get(host, {})
        hosts[host.name] = [{
            "order": list(state.op_meta[op_hash].op_order), "hash": op_hash,
            "names": sorted(state.op_meta[op_hash].names), "args": plain(state.op_meta[op_hash].args),
            "arguments": plain(ops[op_hash].global_arguments),
            "shared": plain(state.op_meta[op_hash].global_arguments),
            "change": ops[op_hash].operation_meta._maybe_is_change,
        } for op_hash in order if op_hash in ops]
    return {"cuts": list(cuts_in_place()), "hosts": hosts}


def write_plans() -> None:
    path = os.environ.get("SGLFLEET_TEST_PLAN")
    if path:
        Path(path).write_text(json.dumps(plans(state), indent=1, sort_keys=True))


atexit.register(write_plans)  # after config.py's: run before its handlers (the summary, gc.freeze)
