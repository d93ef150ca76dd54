"""
A new nftables policy applied, then confirmed over a new SSH connection, as the controller runs it.

The host applies the policy with its own undoing scheduled (``sglfleet.plan.firewall``);
the controller then opens a connection of its own, as a client after the change would,
and confirms. A policy that refuses that connection is undone: at once over the old
connection where it still answers (it is established traffic), else by the host's timer.

**Example:**

.. code:: python

    yield HostFunctionCommand(applied_and_confirmed, (policy.digest, 30), {})
"""

from __future__ import annotations

import gevent
from pyinfra import logger
from pyinfra.api import StringCommand

from sglfleet.controller.outcomes import fail
from sglfleet.plan.firewall import apply_command, confirm_command, revert_command


def _confirmed(state, host, connector_arguments, digest: str, timeout_s: float) -> str | None:
    """Confirm over a new connection: None, or why it could not."""
    fresh = type(host.connector)(state, host)
    try:
        with gevent.Timeout(timeout_s, TimeoutError):
            fresh.connect()
            ok, output = fresh.run_shell_command(StringCommand(confirm_command(digest)), **connector_arguments)
    except TimeoutError:
        return f"a new SSH connection got no answer within {timeout_s:g} s"
    except Exception as error:  # refused, reset, or pyinfra's ConnectError
        return f"a new SSH connection failed: {type(error).__name__}: {error}"
    finally:
        client = getattr(fresh, "client", None)
        if client is not None:
            client.close()
    return None if ok else " ".join(output.stderr_lines)[-300:] or "the confirmation failed"


def applied_and_confirmed(state, host, connector_arguments, digest: str, confirm_s: int) -> bool:
    """
    Apply the pending policy, then confirm it over a new SSH connection; False fails the host.

    + digest: the policy's digest, which the host records once confirmed
    + confirm_s: the host's own deadline: past it, the policy undoes itself
    """
    ok, output = host.run_shell_command(StringCommand(apply_command(confirm_s)), **connector_arguments)
    if not ok:
        said = " ".join(output.stderr_lines)[-400:]
        return fail(state, host, f"firewall policy {digest[:12]} not applied (nothing changed): {said}")
    # Within the host's deadline, with room for the undoing over the old connection.
    why = _confirmed(state, host, connector_arguments, digest, max(5.0, confirm_s * 2 / 3))
    if why is None:
        host.log(f"Firewall policy {digest[:12]} in force, confirmed over a new SSH connection", logger.info)
        return True
    try:
        with gevent.Timeout(10, TimeoutError):
            undone, _ = host.run_shell_command(StringCommand(revert_command()), **connector_arguments)
    except Exception:  # the old connection is gone too: the host's timer undoes it
        undone = False
    return fail(state, host, f"firewall policy {digest[:12]} cut the controller off ({why}); "
                             + ("the host put its previous rules back" if undone else
                                f"the host puts its previous rules back by itself within {confirm_s} s")
                             + ": fix ssh_networks or firewall_extra_rules, then run again")
