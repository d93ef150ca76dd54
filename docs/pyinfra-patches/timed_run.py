"""
pyinfra's config for a timed sglfleet run: the project's ``config.py``, then each function the engine's cuts
replace timed wherever pyinfra calls it, and the run's totals appended to ``$SGLFLEET_TIMED_RUN`` at exit.

Whatever is at each of a cut's places once ``config.py`` has run is timed: pyinfra's own function
(``SGLFLEET_PYINFRA=stock``) or the cut. A line of JSON a run: for each cut, its calls and the seconds
spent in them (``time.perf_counter``, the calls it makes included: ``pop_global_arguments``'s include
``all_global_arguments``'s). The timing wrapper is compiled as one of pyinfra's files, so the operation
order leaves its frame out, as it leaves pyinfra's own.

**Example:**

.. code:: shell

    SGLFLEET_PYINFRA=stock SGLFLEET_TIMED_RUN=/tmp/stock.jsonl \\
        pyinfra --config docs/pyinfra-patches/timed_run.py inventory/dev.py deploy.py -y
    SGLFLEET_TIMED_RUN=/tmp/cut.jsonl pyinfra --config docs/pyinfra-patches/timed_run.py inventory/dev.py deploy.py -y
"""

import atexit
import json
import os
import time
from pathlib import Path

from pyinfra.api import util
from pyinfra_cli.util import exec_file

exec_file(str(Path(__file__).resolve().parents[2] / "config.py"))  # the project's own, as every run loads it

from sglfleet.hooks.engine import CUTS  # noqa: E402  (after config.py, as the run imports it)

_TIMED = '''
def timed(function, total):
    def call(*args, **kwargs):
        started = perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            total[0] += 1
            total[1] += perf_counter() - started
    return call
'''
_namespace = {"perf_counter": time.perf_counter}
exec(compile(_TIMED, f"{util.PYINFRA_INSTALL_DIR}/api/_timed.py", "exec"), _namespace)

totals = {cut.name: [0, 0.0] for cut in CUTS}
for cut in CUTS:
    wrapped = {}  # one wrapper a function: a place that holds it again gets the same one
    for module, attribute in cut.places:
        function = getattr(module, attribute)
        wrapped.setdefault(id(function), _namespace["timed"](function, totals[cut.name]))
        setattr(module, attribute, wrapped[id(function)])


def write_totals() -> None:
    with open(os.environ["SGLFLEET_TIMED_RUN"], "a") as out:
        out.write(json.dumps(totals) + "\n")


atexit.register(write_totals)
