"""A Ctrl-C ends a deploy with exit status 130 and says what it left, instead of pyinfra's 0."""

from __future__ import annotations

import signal
import sys

MESSAGE = (
    "sglfleet: interrupted. A host in the middle of its switch finishes it on its own, "
    "under its lock (the gate, and a rollback if the gate fails); no later wave starts. "
    "Run the same command again to finish."
)


def exit_130_on_interrupt() -> None:
    """
    Replace pyinfra's SIGINT handler, which prints "Exiting upon user request!"
    and exits 0, so a script or CI job never takes an interrupted rollout for a
    finished one.

    **Example:**

    .. code:: python

        # config.py
        exit_130_on_interrupt()
    """
    def interrupted(signum, frame):
        print(MESSAGE, file=sys.stderr, flush=True)
        sys.exit(128 + signal.SIGINT)

    signal.signal(signal.SIGINT, interrupted)
