"""Whether the SSH user may run commands as root through ``sudo -n``, asked without sudo."""

from __future__ import annotations

from pyinfra.api import FactBase

# sudo's own words, as sudo 1.9 (Debian bookworm, Ubuntu 22.04/24.04) prints them.
PASSWORD = ("a password is required", "a terminal is required")
REFUSED = ("is not in the sudoers file", "is not allowed to execute", "may not run sudo")


class SudoAccess(FactBase[dict]):
    """
    Returns how ``sudo -n true`` ends for the SSH user: ``ok``, ``password``
    (sudo asks for one), ``refused`` (sudo says so without asking), ``missing``
    (no sudo), or ``failed``, with sudo's own message. sudo authenticates
    before it reads sudoers, so a user outside sudoers usually gets
    ``password`` too. Ask it with ``_sudo=False``: under sudo, the question
    answers itself.

    .. code:: python

        {"status": "password", "message": "sudo: a password is required"}

    **Example:**

    .. code:: python

        access = host.get_fact(SudoAccess, _sudo=False)
    """

    def command(self) -> str:
        return "command -v sudo >/dev/null || { echo sudo-missing; exit 0; }; sudo -n true 2>&1; echo sudo-exit=$?"

    def process(self, output):
        if output == ["sudo-missing"]:
            return {"status": "missing", "message": "sudo is not installed"}
        message = " ".join(line for line in output if not line.startswith("sudo-exit="))
        if output and output[-1] == "sudo-exit=0":
            return {"status": "ok", "message": message}
        if any(words in message for words in PASSWORD):
            return {"status": "password", "message": message}
        if any(words in message for words in REFUSED):
            return {"status": "refused", "message": message}
        return {"status": "failed", "message": message}
