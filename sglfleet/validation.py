"""Validate the whole inventory after pyinfra builds it and before it connects."""

from __future__ import annotations

import sys

from sglfleet.config import ConfigError, validate_inventory


def validate_before_connecting(state) -> None:
    """
    Run the inventory schema and the lint once pyinfra's state holds the
    inventory (with ``--data`` overrides applied), before any connection.

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
        try:
            validate_inventory(inventory)
        except ConfigError as error:
            for line in str(error).splitlines():
                print(line, file=sys.stderr)
            raise SystemExit(2) from None

    state.init = init_then_validate
