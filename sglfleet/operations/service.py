"""
A host's services in one operation: each one's system user and secrets file, then
every unit with the host tools.

pyinfra finds each operation's place in the deploy by walking the call stack, about
a millisecond a call on every host; composed with ``_inner``, as pyinfra's ``apt.key``
composes ``gpg.key``, the three steps pay it once. Each step still decides alone
from the one read's answer (``users.system_user``, ``secrets.secret_file``,
``files.in_place``).

**Example:**

.. code:: python

    service.installed(
        name="sglang.service: users, secrets, units and host tools",
        users=[dict(user="sglang", home="/var/lib/sglang")],
        secrets=[dict(path="/etc/sglfleet/sglang.env", content=env, redacted=shown)],
        files={"/etc/systemd/system/sglang.service": (unit, "644")},
    )
"""

from __future__ import annotations

from pyinfra.api import operation

from sglfleet.facts.host import READ
from sglfleet.operations.files import in_place
from sglfleet.operations.secrets import secret_file
from sglfleet.operations.users import system_user


@operation()
def installed(users: list[dict], secrets: list[dict], files: dict[str, tuple[bytes, str]], found=READ):
    """
    Ensure each service's system user and secrets file, in order, then ``files`` (the units
    and the host tools), as the three operations would one after another.

    + users: each service's ``system_user`` arguments
    + secrets: each service's ``secret_file`` arguments, in the same order
    + files: ``in_place``'s: remote path -> (content, octal mode)
    + found: ``FileDigests``'s answer for ``files``, already read; by default ``in_place`` reads it
    """
    for user, secret in zip(users, secrets, strict=True):
        yield from system_user._inner(**user)
        yield from secret_file._inner(**secret)
    yield from in_place._inner(files=files, found=found)
