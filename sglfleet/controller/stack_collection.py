"""
The stacks a rollout left unused, collected from the controller once it is over: the
host's stacks and releases read again (``StackState``'s command), then what no current
or previous release keeps removed (``sglfleet.plan.stack_commands.collect_commands``).

``sglfleet.operations.stack.collected_after_rollout`` decides whether a host needs this
(a service of it switched or was retired); ``collect_unused`` is what it yields
(``HostFunctionCommand``): what the rollout leaves is known only when it has run.

**Example:**

.. code:: python

    yield HostFunctionCommand(collect_unused, (stack, 1), {})
"""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api import StringCommand

from sglfleet.artifacts.stacks import Stack
from sglfleet.facts.stack import StackState
from sglfleet.plan.stack_commands import collect_commands, collected


def collect_unused(state, host, connector_arguments, stack: Stack, keep: int) -> bool:
    """
    Read the host's stacks and releases as they are now, then remove what no release keeps;
    False fails the host.

    + stack: the host's stack (``host_stack``)
    + keep: how many unused stacks beside it to keep (``stacks_keep``)
    """
    fact = StackState()
    ok, output = host.run_shell_command(StringCommand(fact.command(stack.id, stack.python, "", hash_wheels=False)),
                                        **connector_arguments)
    if not ok:
        return False
    found = fact.process(output.stdout_lines)
    for command in collect_commands(stack, found, keep):
        if not host.run_shell_command(StringCommand(command), **connector_arguments)[0]:
            return False
    doomed = collected(stack, found, keep)
    if doomed:
        host.log(f"collected {', '.join(doomed)}: no release keeps them since this run's rollout", logger.info)
    return True
