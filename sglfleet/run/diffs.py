"""
Show what an operation would change, the way pyinfra's own ``files.put`` does
under ``--diff`` (pyinfra's ``generate_color_diff``), for the operations of
sglfleet that pyinfra's ``--diff`` does not cover.

**Example:**

.. code:: python

    if wants_diff():
        show_diff("Will update /etc/systemd/system/sglang.service", old_text, new_text)
    report_drift("release", "release 3f2a", ["launch.args"], "will put back the controller's rendering")
"""

from __future__ import annotations

from pyinfra import host, logger, state
from pyinfra.operations.util.files import generate_color_diff

from sglfleet.run import recording
from sglfleet.run.record import record


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


def report_drift(kind: str, what: str, differences: list[str], action: str) -> None:
    """
    Say, once, what on the host no longer is as sglfleet left it, and what this run does about it.

    + kind: one of ``sglfleet.host.drift.KINDS``, e.g. ``"stack"``: the ``kind`` of ``sglfleet_drift``
    + what: e.g. ``"stack dev-0a24832cc36f"``
    + differences: one line each, e.g. ``"added lib/python3.11/site-packages/sitecustomize.py"``
    + action: e.g. ``"will build it again from its lock"``
    """
    if first_pass():
        line = f"Drift: {what} changed on the host: {'; '.join(differences)}; {action}"
        host.log(line, logger.warning)
        recording.drift_found(host.name, what, line)
        record().drift_kinds.setdefault(host.name, set()).add(kind)


def drift_kinds(host_name: str) -> set[str]:
    """The kinds of drift this run found on ``host_name`` so far."""
    return set(record().drift_kinds.get(host_name, ()))


def show_diff(title: str, old: str, new: str) -> None:
    """
    Log ``title`` for the host at hand, then a unified diff of ``old`` to ``new``.

    + title: what changes, e.g. ``"Will update /etc/sglfleet/sglang.env"``
    + old, new: the texts ("" for a file that does not exist yet)
    """
    host.log(title, logger.info)
    for line in generate_color_diff(old.splitlines(), new.splitlines()):
        logger.info("    %s", line)
