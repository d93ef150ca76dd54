"""What a host holds of its pinned models, read by the host tool in one command.

**Example:**

.. code:: python

    answers = host.get_fact(ModelState, spec=[{"dir": "/opt/sglfleet/models/org/m/4d01...", "digest": "9f2c..."}])
    answers[0]["state"]   # "ok", "drifted" (changed files), "partial" (verified files) or "absent"
"""

from __future__ import annotations

import json
import shlex

from pyinfra.api import FactBase

from sglfleet.host.layout import LAYOUT


def _tool(*args: str) -> str:
    # Before the host tool is installed (a blank host being planned) nothing is staged either.
    return (f"if [ -x {shlex.quote(LAYOUT.tool)} ]; then {shlex.join([LAYOUT.tool, 'models', *args])}; "
            "else echo null; fi")


class ModelState(FactBase["dict | None"]):
    """
    Each wanted revision's state: its marker against the manifest's digest and
    one ``stat`` per file against the marker's snapshot; no file is read.
    ``None`` when the host tool is not installed yet.
    """

    def command(self, spec: list[dict]) -> str:
        return _tool("check", json.dumps(spec, sort_keys=True))

    def process(self, output: list[str]):
        return json.loads("\n".join(output) or "null")


class ModelGarbage(FactBase[list[str]]):
    """Revisions (and stale partial folders) the store holds that no staged release loads and ``keep`` lacks."""

    @staticmethod
    def default() -> list:
        return []

    def command(self, keep: list[str]) -> str:
        return _tool("collect", "--dry-run", *(f"--keep={path}" for path in keep))

    def process(self, output: list[str]) -> list[str]:
        return [line.removeprefix("would remove ").strip() for line in output if line.startswith("would remove ")]
