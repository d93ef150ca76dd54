"""
The one hook between building the inventory and connecting to it: ``State.init``, wrapped once.

pyinfra has no hook between building the inventory and connecting to it (callback
handlers are created by ``State.init`` itself), so ``after_init`` wraps ``init`` on the
one state object the CLI uses, and calls each of its hooks after it, in order.

**Example:**

.. code:: python

    # config.py
    after_init(state, plan_before_connecting, record_events, read_on_connect)
"""

from __future__ import annotations

from collections.abc import Callable


def after_init(state, *hooks: Callable) -> None:
    """
    Call each of ``hooks`` with ``(state, inventory)`` once ``state.init`` has run, in the order given.

    + state: ``pyinfra.state`` as ``config.py`` sees it
    + hooks: functions of ``(state, inventory)``; one that raises stops the run before any connection
    """
    init = state.init

    def init_then_hooks(inventory, *args, **kwargs):
        init(inventory, *args, **kwargs)
        for hook in hooks:
            hook(state, inventory)

    state.init = init_then_hooks
