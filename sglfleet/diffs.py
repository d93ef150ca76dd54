"""
Show what an operation would change, the way pyinfra's own ``files.put`` does
under ``--diff`` (pyinfra's ``generate_color_diff``), for the operations of
sglfleet that pyinfra's ``--diff`` does not cover.

**Example:**

.. code:: python

    if wants_diff():
        show_diff("Will update /etc/systemd/system/sglang.service", old_text, new_text)
"""

from __future__ import annotations

from pyinfra import host, logger, state
from pyinfra.operations.util.files import generate_color_diff


def wants_diff() -> bool:
    """
    Under ``--diff``, once: while planning, as operation bodies run again to
    execute; at execution only when nothing was planned (``-y``).
    """
    return bool(state.config.DIFF) and (not state.is_executing or not state.should_check_for_changes())


def show_diff(title: str, old: str, new: str) -> None:
    """
    Log ``title`` for the host at hand, then a unified diff of ``old`` to ``new``.

    + title: what changes, e.g. ``"Will update /etc/sglfleet/sglang.env"``
    + old, new: the texts ("" for a file that does not exist yet)
    """
    host.log(title, logger.info)
    for line in generate_color_diff(old.splitlines(), new.splitlines()):
        logger.info("    %s", line)
