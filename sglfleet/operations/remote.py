"""Commands that run Python on the controller and, through the operation's own connection, on the host."""

from __future__ import annotations

from pyinfra.api import FunctionCommand


class HostFunctionCommand(FunctionCommand):
    """
    A ``FunctionCommand`` whose function also gets the operation's connector
    arguments, so that what it runs on the host goes through pyinfra's sudo
    (``_sudo``, ``_sudo_user``, ...) as the operation's other commands do.

    **Example:**

    .. code:: python

        def switch(state, host, connector_arguments, release_id):
            return host.run_shell_command(f"sglfleet-release activate {release_id}", **connector_arguments)[0]

        yield HostFunctionCommand(switch, ("3f2a9c1d0b7e6a55",), {})
    """

    def execute(self, state, host, connector_arguments):
        return self.function(state, host, connector_arguments, *self.args, **self.kwargs)
