"""
A system user for a service, checked with one fact.

pyinfra's ``server.user`` reads the users, the groups, the OS and the home
directory: four round trips per host on every converge, for a user that
almost never changes.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from sglfleet.facts.host import READ
from sglfleet.facts.users import PasswdEntry


@operation()
def system_user(user: str, home: str, shell: str = "/usr/sbin/nologin", entry=READ):
    """
    Ensure a system user with its own group, ``home`` (not created) and ``shell``.

    + user: the user and its group
    + home: the home directory recorded in passwd; the service creates it
    + shell: the login shell
    + entry: ``PasswdEntry``'s answer for ``user``, already read; by default the operation reads it

    **Example:**

    .. code:: python

        system_user(name="System user sglang", user="sglang", home="/var/lib/sglang")
    """
    if entry is READ:
        entry = host.get_fact(PasswdEntry, user=user)
    if entry is None:
        options = shlex.join(["--home-dir", home, "--no-create-home", "--shell", shell, user])
        # Reuse a group of that name left by an earlier, removed user.
        yield (f"if getent group {shlex.quote(user)} > /dev/null; "
               f"then useradd --system --gid {shlex.quote(user)} {options}; "
               f"else useradd --system --user-group {options}; fi")
    elif (entry["home"], entry["shell"]) != (home, shell):
        yield shlex.join(["usermod", "--home", home, "--shell", shell, user])
    else:
        host.noop(f"user {user} exists")
