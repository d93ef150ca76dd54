"""Validate and lint the whole inventory after pyinfra builds it and before it connects."""

from __future__ import annotations

import sys

from sglfleet.config import ConfigError


def validate_before_connecting(state) -> None:
    """
    Run the inventory schema, the wave plan and the lint once pyinfra's state
    holds the inventory (with ``--data`` overrides applied), before any
    connection: bad input gets one line per problem, exit 2, and no host is
    touched. Lint warnings are printed and the run goes on.

    pyinfra has no hook between building the inventory and connecting to it
    (callback handlers are created by ``State.init`` itself), so this wraps
    ``init`` on the one state object the CLI uses.

    + state: ``pyinfra.state`` as ``config.py`` sees it

    **Example:**

    .. code:: python

        # config.py
        from pyinfra import state
        validate_before_connecting(state)
    """
    init = state.init

    def init_then_validate(inventory, *args, **kwargs):
        init(inventory, *args, **kwargs)
        from sglfleet.lint_cli import lint_loaded

        try:
            findings = lint_loaded(inventory)
        except ConfigError as error:
            findings = error.problems
        for line in findings:
            print(line, file=sys.stderr)
        if any(": warning: " not in line for line in findings):
            raise SystemExit(2)

    state.init = init_then_validate
