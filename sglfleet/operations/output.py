"""
What an operation says: what it will do, once a run, and what it would change, the way
pyinfra's own ``files.put`` does under ``--diff`` (pyinfra's ``generate_color_diff``), for
the operations of sglfleet that pyinfra's ``--diff`` does not cover. Output only: nothing
here keeps state.

**Example:**

.. code:: python

    if wants_diff():
        show_diff("Will update /etc/systemd/system/sglang.service", old_text, new_text)
"""

from __future__ import annotations

from pyinfra import host, logger, state
from pyinfra.operations.util.files import generate_color_diff



def first_pass() -> bool:
    """
    Whether this run of an operation's body is the one to speak: bodies run
    twice (to plan, then to execute), once under ``-y`` (to execute).
    """
    return not state.is_executing or not state.should_check_for_changes()


def say(message: str, level=logger.info, unless_diff: bool = False) -> None:
    """
    Log ``message`` for the host at hand, once a run (see ``first_pass``): what an operation will do.

    + level: a ``pyinfra.logger`` method, e.g. ``logger.warning``
    + unless_diff: not under ``--diff``, whose diff says it

    **Example:**

    .. code:: python

        say(f"Will restart {unit}, one gateway at a time")
    """
    if first_pass() and not (unless_diff and state.config.DIFF):
        host.log(message, level)


def wants_diff() -> bool:
    """Under ``--diff``, once (see ``first_pass``)."""
    return bool(state.config.DIFF) and first_pass()


def show_diff(title: str, old: str, new: str) -> None:
    """
    Log ``title`` for the host at hand, then a unified diff of ``old`` to ``new``.

    + title: what changes, e.g. ``"Will update /etc/sglfleet/sglang.env"``
    + old, new: the texts ("" for a file that does not exist yet)
    """
    host.log(title, logger.info)
    for line in generate_color_diff(old.splitlines(), new.splitlines()):
        logger.info("    %s", line)
