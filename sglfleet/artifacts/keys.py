"""
The fleet's keys, one for each role, kept in the controller's secrets file.

Three roles, each opening only what it needs:

- **client** keys, one per client application, each with a name
  (``SGLFLEET_CLIENT_KEY_<name>``): the gateways accept them; ``SGLFLEET_API_KEY``,
  the single key of earlier releases, reads as the client key ``default``;
- **gateway-admin** (``SGLFLEET_GATEWAY_ADMIN_KEY``): smg's control plane, the
  controller's alone: only it adds, drains and removes workers;
- **engine-admin** (``SGLFLEET_ENGINE_ADMIN_KEY``): sglang's ``--admin-api-key``, the
  controller's alone: the engines' management endpoints answer nothing else.

A rotated gateway-admin keeps its old value as ``gateway-admin-previous``, which the
controller tries where a gateway that has not restarted yet refuses the new one.

The file is ``KEY=value`` lines (mode 0600, outside the repository); a key the
controller made carries when, as a comment on its line. Every change takes the
file's lock, keeps the lines it does not touch, and replaces the file with one
rename, so a reader sees the old file or the new one.

**Example:**

.. code:: python

    store = KeyStore("~/.config/sglfleet/secrets.env")
    key = store.issue("billing")        # a new client key, written before it is returned
    store.revoke("billing")
    store.ensure_admin_keys()           # gateway-admin and engine-admin, made where absent
"""

from __future__ import annotations

import datetime
import fcntl
import os
import re
import secrets
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CLIENT = "client"
GATEWAY_ADMIN = "gateway-admin"
ENGINE_ADMIN = "engine-admin"
ADMIN_VARIABLES = {GATEWAY_ADMIN: "SGLFLEET_GATEWAY_ADMIN_KEY", ENGINE_ADMIN: "SGLFLEET_ENGINE_ADMIN_KEY"}
# gateway-admin's rotated-out value: the gateways take the new one only when they restart, after the
# serving hosts, so the run that rolls a rotation out calls them with the old one until then.
GATEWAY_ADMIN_PREVIOUS = "gateway-admin-previous"
ROTATED_OUT = {GATEWAY_ADMIN: ("SGLFLEET_GATEWAY_ADMIN_KEY_PREVIOUS", GATEWAY_ADMIN_PREVIOUS)}
CLIENT_PREFIX = "SGLFLEET_CLIENT_KEY_"
LEGACY_CLIENT = ("SGLFLEET_API_KEY", "default")  # the one key of earlier releases: a client key
# What a key starts with, so that one found in a log or a paste says what it opens.
PREFIXES = {CLIENT: "sglc-", GATEWAY_ADMIN: "sglg-", ENGINE_ADMIN: "sgle-"}
KEY_BYTES = 32
CLIENT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
MADE = re.compile(r"#\s*made\s+(\S+)")


class KeysError(ValueError):
    """A key operation sglfleet refuses; the message names what and the fix."""


@dataclass(frozen=True)
class Key:
    """
    One key: its name (a client's, or its role for the admin keys), role, value and when it was made.

    + name: ``billing`` for a client key; ``gateway-admin`` or ``engine-admin``
    + role: ``client``, ``gateway-admin`` or ``engine-admin``
    + variable: its line's name in the secrets file (or the environment)
    + value: the secret (never in the repr)
    + made: when sglfleet made it (ISO 8601, UTC), or None for a key an operator wrote
    + source: the secrets file's path, or ``environment``
    """

    name: str
    role: str
    variable: str
    value: str = field(repr=False)
    made: str | None = None
    source: str = ""


def role_of(variable: str) -> tuple[str, str] | None:
    """``(name, role)`` of a secrets-file variable that holds a key, or None for any other variable."""
    for role, admin in ADMIN_VARIABLES.items():
        if variable == admin:
            return role, role
    for variable_out, role in ROTATED_OUT.values():
        if variable == variable_out:
            return role, role
    if variable == LEGACY_CLIENT[0]:
        return LEGACY_CLIENT[1], CLIENT
    if variable.startswith(CLIENT_PREFIX):
        return variable[len(CLIENT_PREFIX):], CLIENT
    return None


def variable_of(name: str) -> str:
    """The variable that holds key ``name`` (a client's name, ``gateway-admin`` or ``engine-admin``)."""
    if name in ADMIN_VARIABLES:
        return ADMIN_VARIABLES[name]
    for variable, role in ROTATED_OUT.values():
        if name == role:
            return variable
    if name == LEGACY_CLIENT[1]:
        return LEGACY_CLIENT[0]
    return CLIENT_PREFIX + name


def new_key(role: str) -> str:
    """A strong random key for ``role``: 32 bytes from the OS, URL-safe, after the role's prefix."""
    return PREFIXES[role] + secrets.token_urlsafe(KEY_BYTES)


def now() -> str:
    """The time a key is made, to the second, in UTC."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_line(line: str) -> tuple[str, str, str | None] | None:
    """
    ``(variable, value, made)`` of one line of a secrets file; None for a blank line or a comment.

    A value ends at the first blank: what follows may only be a comment (``# made <time>``).
    Raises ``ValueError`` for a line that is neither.
    """
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    variable, sep, rest = line.removeprefix("export ").partition("=")
    if not sep:
        raise ValueError("expected VARIABLE=value")
    value, _, comment = rest.strip().partition(" ")
    comment = comment.strip()
    if comment and not comment.startswith("#"):
        raise ValueError("a value may not hold blanks (a comment after it starts with #)")
    made = MADE.match(comment)
    return variable.strip(), value.strip("'\""), made.group(1) if made else None


def check_private(path: Path) -> None:
    """Refuse a secrets file that others than its owner can read or write."""
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeysError(f"{path}: readable by others (mode {stat.S_IMODE(mode):o}); run chmod 600 {path}")


def keys_in(lines: Mapping[str, tuple[str, str | None]], source: str) -> list[Key]:
    """The keys among ``variable -> (value, made)``, in the order given."""
    found = []
    for variable, (value, made) in lines.items():
        named = role_of(variable)
        if named and value:
            found.append(Key(name=named[0], role=named[1], variable=variable, value=value, made=made,
                             source=source))
    return found


class KeyStore:
    """
    The keys of one secrets file: read, issued, revoked, rotated, each change one atomic rename.

    + path: the controller's ``secrets_file`` (``~`` expanded); a missing file reads as empty
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser()

    def entries(self) -> dict[str, tuple[str, str | None]]:
        """Every ``variable -> (value, made)`` of the file, in its order."""
        if not self.path.is_file():
            return {}
        check_private(self.path)
        found = {}
        for number, line in enumerate(self.path.read_text().splitlines(), 1):
            try:
                parsed = parse_line(line)
            except ValueError as error:
                raise KeysError(f"{self.path}:{number}: {error}; fix the line") from None
            if parsed:
                found[parsed[0]] = parsed[1:]
        return found

    def keys(self) -> list[Key]:
        """The file's keys, in its order."""
        return keys_in(self.entries(), str(self.path))

    def find(self, name: str) -> Key | None:
        """Key ``name``: a client's name, ``gateway-admin`` or ``engine-admin``; None where absent."""
        return next((key for key in self.keys() if key.name == name), None)

    def issue(self, name: str, value: str | None = None) -> Key:
        """
        A new client key ``name`` (``value``, or a new one), written to the file before it is returned.

        Refuses a name already issued (``rotate`` gives it a new secret) or one that is not
        a client name.
        """
        if not CLIENT_NAME.match(name) or name in ADMIN_VARIABLES:
            raise KeysError(f"{name!r}: a client key's name is 1-40 of a-z, 0-9, _ and -, starting with a "
                            f"letter or digit, and not {' or '.join(ADMIN_VARIABLES)}")
        with self._changing() as lines:
            if variable_of(name) in lines:
                raise KeysError(f"client key {name!r} is already issued; `sglfleet keys rotate` gives it a "
                                f"new secret, `sglfleet keys revoke` removes it")
            lines[variable_of(name)] = (value or new_key(CLIENT), now())
        return self.find(name)

    def revoke(self, name: str) -> Key:
        """
        Remove client key ``name`` (or ``gateway-admin-previous``, once every gateway runs the new one);
        returns what was removed. The admin keys are rotated, never revoked.
        """
        if name in ADMIN_VARIABLES:
            raise KeysError(f"{name} cannot be revoked: the controller needs it; `sglfleet keys rotate "
                            f"INVENTORY {name}` replaces it")
        with self._changing() as lines:
            gone = lines.pop(variable_of(name), None)
        if gone is None:
            raise KeysError(f"no client key {name!r} in {self.path}; `sglfleet keys list` shows them")
        return Key(name=name, role=role_of(variable_of(name))[1], variable=variable_of(name), value=gone[0],
                   made=gone[1], source=str(self.path))

    def rotate(self, name: str, value: str | None = None) -> Key:
        """A new secret (``value``, or a new one) for ``name``: ``gateway-admin``, ``engine-admin``, or a client's."""
        with self._changing() as lines:
            variable = variable_of(name)
            if name not in ADMIN_VARIABLES and variable not in lines:
                raise KeysError(f"no client key {name!r} in {self.path}; `sglfleet keys issue` makes one")
            if name in ROTATED_OUT and lines.get(variable):
                lines[ROTATED_OUT[name][0]] = lines[variable]
            lines[variable] = (value or new_key(role_of(variable)[1]), now())
        return self.find(name)

    def ensure_admin_keys(self) -> list[Key]:
        """Make each admin key the file lacks; returns those made (none when the file has both)."""
        with self._changing() as lines:
            missing = [role for role, variable in ADMIN_VARIABLES.items() if not (lines.get(variable) or ("",))[0]]
            for role in missing:
                lines[ADMIN_VARIABLES[role]] = (new_key(role), now())
        return [self.find(role) for role in missing]

    @contextmanager
    def _changing(self) -> Iterator[dict[str, tuple[str, str | None]]]:
        """The file's lines to change, under its lock; written back with one rename where they changed."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = self.path.with_name(f".{self.path.name}.lock")
        with open(os.open(lock, os.O_RDWR | os.O_CREAT, 0o600), "r+") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            before = self.entries()
            lines = dict(before)
            yield lines
            if lines != before:
                self._write(lines)

    def _write(self, lines: dict[str, tuple[str, str | None]]) -> None:
        # The operator's own lines (comments, blank lines, other variables) stay where they were.
        kept, seen = [], set()
        old = self.path.read_text().splitlines() if self.path.is_file() else []
        for line in old:
            parsed = parse_line(line)
            if parsed is None:
                kept.append(line)
            elif parsed[0] in lines:
                kept.append(_line(parsed[0], *lines[parsed[0]]))
                seen.add(parsed[0])
        kept += [_line(variable, *entry) for variable, entry in lines.items() if variable not in seen]
        temporary = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with open(descriptor, "w") as out:
                out.write("".join(f"{line}\n" for line in kept))
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise


def _line(variable: str, value: str, made: str | None) -> str:
    return f"{variable}={value}" + (f"  # made {made}" if made else "")
