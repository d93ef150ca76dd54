"""``--dry`` always shows the plan, whatever ``-y`` says."""

from __future__ import annotations

import click


def plan_when_dry(state) -> None:
    """
    Make pyinfra plan (and so print diffs and "will switch" lines) on a dry run
    given ``-y`` too: pyinfra skips change detection under ``-y``, and a dry run
    then shows nothing at all. A dry run executes nothing either way.

    + state: ``pyinfra.state`` as ``config.py`` sees it

    **Example:**

    .. code:: python

        # config.py
        plan_when_dry(state)
    """
    context = click.get_current_context(silent=True)
    if context is not None and context.params.get("dry"):
        state.check_for_changes = True
