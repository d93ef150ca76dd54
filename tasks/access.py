"""Access: the SSH user can become root the way the inventory says, before anything is planned."""

from pyinfra import host, state
from pyinfra.api.arguments import pop_global_arguments
from pyinfra.api.exceptions import PyinfraError

from sglfleet.facts.sudo import SudoAccess

FIX = ("give {user} passwordless sudo on the host, e.g. the line "
       "'{user} ALL=(ALL:ALL) NOPASSWD: ALL' in /etc/sudoers.d/sglfleet (visudo -f), "
       "or log in as root without --sudo")


def check_access(found=None):
    """
    Stop the run, before any host changes, when the inventory asks for sudo and sudo -n refuses.
    No operation: it only reads (a plain step, not a ``@deploy``).

    + found: the host's read (``sglfleet.controller.reads.read_host``), which asked sudo with the rest;
      None asks sudo alone (a rollback needs no more)
    """
    if found is not None:
        access = found.sudo  # None: the read did not ask (no sudo, or a sudo password)
    else:
        arguments, _ = pop_global_arguments(state, host, {})
        # A password pyinfra was given (--sudo-password) makes sudo -n beside the point.
        if not arguments.get("_sudo") or arguments.get("_sudo_password"):
            return
        access = host.get_fact(SudoAccess, _sudo=False)
    if access is None or access["status"] == "ok":
        return
    user = host.data.get("ssh_user") or "the SSH user"
    why = {
        "password": f"sudo asks {user} for a password",
        "refused": f"sudo refuses {user}",
        "missing": "sudo is not installed",
    }.get(access["status"], f"sudo fails for {user}")
    # Raised while the deploy is planned: no host has been changed.
    raise PyinfraError(f"{host.name}: the inventory asks for sudo, but {why} ({access['message']}); "
                       f"{FIX.format(user=user)}. Nothing was changed.")
