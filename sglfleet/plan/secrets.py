"""Secrets: the controller's (its environment over its ``secrets_file``), and what each host gets of them.

The controller takes ``SGLFLEET_HF_TOKEN`` and the fleet's keys (``sglfleet.artifacts.keys``:
client keys, ``gateway-admin``, ``engine-admin``) from its environment, or else from the
``secrets_file`` (``KEY=value`` lines, mode 0600, outside the repository). Inventory data
never holds them (``sglfleet.plan.schema`` refuses). Each host gets only what its role needs,
in a root-only env file:

- an engine (``/etc/sglfleet/sglang.env``): ``HF_TOKEN``, ``SGLANG_ADMIN_API_KEY`` (engine-admin),
  and ``SGLANG_API_KEY`` (the one client key) only where no gateway of the fleet stands in
  front of it: behind smg the client's own key reaches it (``gateway_env``);
- a gateway (``sglang-gateway.env``): the client keys and gateway-admin.

Everything printed uses ``redacted=True``.

**Example:**

.. code:: python

    secrets = load_secrets(config.secrets_file)
    text = render_env(engine_env(secrets, behind_gateways=True))                 # uploaded, mode 0600
    shown = render_env(engine_env(secrets, behind_gateways=True), redacted=True)  # for --diff and logs
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sglfleet import PROJECT_ROOT
from sglfleet.artifacts.keys import (CLIENT, CLIENT_PREFIX, ENGINE_ADMIN, GATEWAY_ADMIN, GATEWAY_ADMIN_PREVIOUS, Key,
                                     KeysError, KeyStore, keys_in, role_of)
from sglfleet.plan.templates import TEMPLATES, render

HF_TOKEN = "SGLFLEET_HF_TOKEN"
# Secrets the controller alone uses (sglfleet.hooks.webhooks): allowed in the file, never sent to hosts.
CONTROLLER_ONLY = ("SGLFLEET_WEBHOOK_TOKEN",)
# Written unquoted into a systemd EnvironmentFile and a YAML single-quoted scalar.
SAFE_VALUE = re.compile(r"^[A-Za-z0-9._~+/=:@%^,-]+$")


class SecretsError(ValueError):
    """A secret source sglfleet refuses; the message names it and the fix."""


@dataclass(frozen=True)
class Secrets:
    """
    The controller's secrets for one ``secrets_file``; values never show in ``repr``.

    + hf_token: the Hugging Face token, or None
    + keys: the fleet's keys (``sglfleet.artifacts.keys.Key``), the environment's over the file's
    + source: where they came from, for messages
    """

    hf_token: str | None = field(default=None, repr=False)
    keys: tuple[Key, ...] = field(default=(), repr=False)
    source: str = "none"

    @property
    def client_keys(self) -> dict[str, str]:
        """Client name -> key."""
        return {key.name: key.value for key in self.keys if key.role == CLIENT}

    def admin(self, role: str) -> str | None:
        """The key of ``gateway-admin`` or ``engine-admin``, or None."""
        return next((key.value for key in self.keys if key.role == role), None)

    @property
    def gateway_admin_keys(self) -> tuple[str, ...] | None:
        """gateway-admin, then the value it replaced where one was rotated out; None without one."""
        keys = tuple(key for key in (self.admin(GATEWAY_ADMIN), self.admin(GATEWAY_ADMIN_PREVIOUS)) if key)
        return keys or None

    @property
    def values(self) -> tuple[str, ...]:
        """Every secret value: what no line of a log may show."""
        return tuple(value for value in (self.hf_token, *(key.value for key in self.keys)) if value)


def _is_secret(name: str) -> bool:
    return name == HF_TOKEN or role_of(name) is not None


def _collect(wanted, secrets_file, environ) -> tuple[dict[str, tuple[str, str | None]], list[str]]:
    """The variables ``wanted(name)`` accepts, the environment over the secrets file, each checked; and their sources."""
    found: dict[str, tuple[str, str | None]] = {}
    sources = []
    if secrets_file:
        path = Path(secrets_file).expanduser()
        if path.resolve().is_relative_to(PROJECT_ROOT):
            raise SecretsError(f"{path}: secrets file inside the repository; move it out, "
                               f"e.g. ~/.config/sglfleet/secrets.env (mode 0600)")
        try:
            entries = KeyStore(path).entries()
        except KeysError as error:
            raise SecretsError(str(error)) from None
        for name in entries:
            if not (_is_secret(name) or name in CONTROLLER_ONLY):
                raise SecretsError(f"{path}: {name} is not a secret sglfleet knows; expected {HF_TOKEN}, "
                                   f"{CLIENT_PREFIX}<name>, SGLFLEET_GATEWAY_ADMIN_KEY, SGLFLEET_ENGINE_ADMIN_KEY, "
                                   f"SGLFLEET_API_KEY or {', '.join(CONTROLLER_ONLY)}; fix the line")
        found.update({name: entry for name, entry in entries.items() if wanted(name)})
        if entries:
            sources.append(str(path))
    from_env = {name: (value, None) for name, value in environ.items() if wanted(name) and value}
    if from_env:
        found.update(from_env)
        sources.append("environment")
    for name, (value, _) in found.items():
        if value and not SAFE_VALUE.match(value):
            raise SecretsError(f"{name}: contains spaces, quotes or control characters; "
                               f"use a value of letters, digits and ._~+/=:@%^,-")
    return {name: entry for name, entry in found.items() if entry[0]}, sources


def load_secrets(secrets_file: str | os.PathLike | None, environ: Mapping[str, str] = os.environ) -> Secrets:
    """
    Collect the secrets: the environment wins over the secrets file; both may be absent.

    + secrets_file: the controller-side file (``~`` expanded); missing is not an error
    + environ: the controller's environment

    Raises ``SecretsError`` for a file inside the repository, a file others can read, a
    malformed line, a value that cannot be written safely, or one key given for two roles.
    """
    found, sources = _collect(_is_secret, secrets_file, environ)
    source = " and ".join(sources) or "none"
    keys = keys_in({name: entry for name, entry in found.items() if name != HF_TOKEN}, source)
    holders: dict[str, str] = {}
    for key in keys:
        if key.value in holders:
            raise SecretsError(f"the same key is given for {holders[key.value]} and {_said(key)}; each role needs its "
                               f"own (`sglfleet keys rotate INVENTORY {key.name}` makes a new one)")
        holders[key.value] = _said(key)
    return Secrets(hf_token=found.get(HF_TOKEN, (None,))[0], keys=tuple(keys), source=source)


def _said(key: Key) -> str:
    return f"client key {key.name!r}" if key.role == CLIENT else key.role


def secret_values(secrets_files: Iterable[str | os.PathLike | None]) -> tuple[str, ...]:
    """
    Every secret the controller holds for these secrets files (and in its environment): what no
    line of a log may show. A file that does not load adds nothing here; the service step says why.

    + secrets_files: each targeted host's ``secrets_file``; hosts may each have their own

    **Example:**

    .. code:: python

        secret_values(["~/.config/sglfleet/prod.env", "~/.config/sglfleet/canary.env"])
    """
    values: list[str] = []
    for path in dict.fromkeys(secrets_files):
        try:
            values += load_secrets(path).values
        except SecretsError:
            continue
    return tuple(dict.fromkeys(values))


def controller_secret(name: str, secrets_file: str | os.PathLike | None,
                      environ: Mapping[str, str] = os.environ) -> str | None:
    """
    One of ``CONTROLLER_ONLY``, found and checked as ``load_secrets`` finds the others; None when absent.

    **Example:**

    .. code:: python

        controller_secret("SGLFLEET_WEBHOOK_TOKEN", "~/.config/sglfleet/secrets.env")
    """
    return _collect(lambda variable: variable == name, secrets_file, environ)[0].get(name, (None,))[0]


def engine_env(secrets: Secrets, behind_gateways: bool) -> dict[str, str]:
    """
    What an engine's env file holds: ``HF_TOKEN``, ``SGLANG_ADMIN_API_KEY``, and ``SGLANG_API_KEY`` where
    no gateway of the fleet stands in front of it.

    smg 1.13.0 passes the client's own ``Authorization`` to the worker it picks and sends a
    worker's ``api_key`` only where the client sent none (``header_utils.rs``): an engine behind
    it cannot ask for one key of many, and asks for none; the network policy lets only its
    gateways reach it. An engine that clients reach directly (or through ``router_url``) asks
    for the client key; sglang takes one, so such a fleet has one client key.

    + secrets: from ``load_secrets``
    + behind_gateways: whether the fleet's own gateways stand in front of the engine

    Raises ``SecretsError`` for several client keys and no gateway to tell them apart.
    """
    env = {"HF_TOKEN": secrets.hf_token, "SGLANG_ADMIN_API_KEY": secrets.admin(ENGINE_ADMIN)}
    clients = secrets.client_keys
    if not behind_gateways and clients:
        if len(clients) > 1:
            raise SecretsError(f"{len(clients)} client keys ({', '.join(sorted(clients))}) and no gateway: sglang "
                               f"asks for one API key; put the fleet behind its gateways (the group gateways), "
                               f"or revoke all but one (`sglfleet keys revoke`)")
        env["SGLANG_API_KEY"] = next(iter(clients.values()))
    return {name: value for name, value in env.items() if value}


def gateway_env(secrets: Secrets) -> dict[str, str]:
    """
    What a gateway's env file holds: each client key (as ``SGLFLEET_CLIENT_KEY_<name>``, smg's tenant
    key of that name) and gateway-admin (``SGLFLEET_GATEWAY_ADMIN_KEY``, smg's control-plane admin).

    A gateway fetches no model and manages no engine: no Hugging Face token, no engine-admin.
    """
    env = {f"{CLIENT_PREFIX}{name}": value for name, value in secrets.client_keys.items()}
    if admin := secrets.admin(GATEWAY_ADMIN):
        env["SGLFLEET_GATEWAY_ADMIN_KEY"] = admin
    return env


def fingerprint(value: str) -> str:
    """A short digest that shows a secret changed without showing it."""
    return hashlib.sha256(b"sglfleet:" + value.encode()).hexdigest()[:8]


def render_env(values: Mapping[str, str], redacted: bool = False, templates: Path = TEMPLATES,
               template: str = "sglang.env.j2") -> str:
    """
    The text of ``/etc/sglfleet/sglang.env`` (or of another service's env file).

    + values: env name -> value (``engine_env`` or ``gateway_env``)
    + redacted: replace each value by ``<redacted sha256:xxxxxxxx>`` (for diffs and logs)
    + templates: the templates directory
    + template: the env file's template, e.g. ``"sglang-gateway.env.j2"``

    **Example:**

    .. code:: python

        render_env(engine_env(secrets, True), redacted=True)  # "HF_TOKEN=<redacted sha256:1f2e3d4c>\\n..."
    """
    entries = [
        (name, f"<redacted sha256:{fingerprint(value)}>" if redacted else value)
        for name, value in sorted(values.items())
    ]
    return render(template, templates, entries=entries)
