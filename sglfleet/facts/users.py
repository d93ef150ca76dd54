"""The passwd entry of one user, in one round trip (pyinfra's ``server.user`` asks four facts)."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


class PasswdEntry(FactBase["dict | None"]):
    """
    Returns one user's passwd entry, or ``None`` when there is no such user.

    .. code:: python

        {"uid": 999, "gid": 999, "home": "/var/lib/sglang", "shell": "/usr/sbin/nologin"}

    **Example:**

    .. code:: python

        entry = host.get_fact(PasswdEntry, user="sglang")
    """

    def command(self, user: str) -> str:
        return f"getent passwd {shlex.quote(user)} || true"

    def process(self, output):
        fields = output[0].split(":") if output else []
        if len(fields) != 7:
            return None
        return {"uid": int(fields[2]), "gid": int(fields[3]), "home": fields[5], "shell": fields[6]}
