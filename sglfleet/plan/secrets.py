"""Secrets for sglang.service: from the controller's environment or a file outside the repo.

Two secrets exist: the Hugging Face token and the SGLang API key. The controller
takes ``SGLFLEET_HF_TOKEN`` and ``SGLFLEET_API_KEY`` from its environment, or
else from the ``secrets_file`` (``KEY=value`` lines, mode 0600, outside the
repository). Inventory data never holds them (``sglfleet.plan.schema`` refuses).
On a host they live only in ``/etc/sglfleet/sglang.env`` (root, 0600), as
``HF_TOKEN`` (read by huggingface_hub) and ``SGLANG_API_KEY`` (read by the
launch script and the gate). Everything printed uses ``redacted=True``.

**Example:**

.. code:: python

    secrets = load_secrets(config.secrets_file)
    text = render_env(secrets)                    # uploaded, mode 0600
    shown = render_env(secrets, redacted=True)    # for --diff and logs
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sglfleet import PROJECT_ROOT
from sglfleet.plan.templates import TEMPLATES, render

# controller variable (environment or secrets file) -> variable in sglang.env
NAMES = {"SGLFLEET_HF_TOKEN": "HF_TOKEN", "SGLFLEET_API_KEY": "SGLANG_API_KEY"}
# Secrets the controller alone uses (sglfleet.hooks.webhooks): allowed in the file, never sent to hosts.
CONTROLLER_ONLY = ("SGLFLEET_WEBHOOK_TOKEN",)
# Written unquoted into a systemd EnvironmentFile and a YAML single-quoted scalar.
SAFE_VALUE = re.compile(r"^[A-Za-z0-9._~+/=:@%^,-]+$")


class SecretsError(ValueError):
    """A secret source sglfleet refuses; the message names it and the fix."""


@dataclass(frozen=True)
class Secrets:
    """The secrets for sglang.env; values never show in ``repr``."""

    values: dict[str, str] = field(default_factory=dict, repr=False)  # sglang.env name -> value
    source: str = "none"


def _read_file(path: Path) -> dict[str, str]:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretsError(f"{path}: readable by others (mode {stat.S_IMODE(mode):o}); run chmod 600 {path}")
    found = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.removeprefix("export ").partition("=")
        name = name.strip()
        if not sep or name not in (*NAMES, *CONTROLLER_ONLY):
            raise SecretsError(f"{path}:{number}: expected one of {', '.join((*NAMES, *CONTROLLER_ONLY))}=value; "
                               f"fix the line")
        found[name] = value.strip().strip("'\"")
    return found


def _collect(names, secrets_file, environ) -> tuple[dict[str, str], list[str]]:
    """The ``names`` found, the environment over the secrets file, each checked; and where they came from."""
    found: dict[str, str] = {}
    sources = []
    if secrets_file:
        path = Path(secrets_file).expanduser()
        if path.resolve().is_relative_to(PROJECT_ROOT):
            raise SecretsError(f"{path}: secrets file inside the repository; move it out, "
                               f"e.g. ~/.config/sglfleet/secrets.env (mode 0600)")
        if path.is_file():
            found.update({name: value for name, value in _read_file(path).items() if name in names})
            sources.append(str(path))
    from_env = {name: environ[name] for name in names if environ.get(name)}
    if from_env:
        found.update(from_env)
        sources.append("environment")
    for name, value in found.items():
        if value and not SAFE_VALUE.match(value):
            raise SecretsError(f"{name}: contains spaces, quotes or control characters; "
                               f"use a value of letters, digits and ._~+/=:@%^,-")
    return {name: value for name, value in found.items() if value}, sources


def load_secrets(secrets_file: str | os.PathLike | None, environ: Mapping[str, str] = os.environ) -> Secrets:
    """
    Collect the secrets: the environment wins over the secrets file; both may be absent.

    + secrets_file: the controller-side file (``~`` expanded); missing is not an error
    + environ: the controller's environment

    Raises ``SecretsError`` for a file inside the repository, a file others can
    read, a malformed line, or a value that cannot be written safely.
    """
    found, sources = _collect(NAMES, secrets_file, environ)
    return Secrets(values={NAMES[name]: value for name, value in found.items()},
                   source=" and ".join(sources) or "none")


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
            values += [value for value in load_secrets(path).values.values() if value]
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
    return _collect((name,), secrets_file, environ)[0].get(name)


def fingerprint(value: str) -> str:
    """A short digest that shows a secret changed without showing it."""
    return hashlib.sha256(b"sglfleet:" + value.encode()).hexdigest()[:8]


def render_env(secrets: Secrets, redacted: bool = False, templates: Path = TEMPLATES,
               template: str = "sglang.env.j2") -> str:
    """
    The text of ``/etc/sglfleet/sglang.env`` (or of another service's env file).

    + secrets: from ``load_secrets`` (or ``gateway_secrets``)
    + redacted: replace each value by ``<redacted sha256:xxxxxxxx>`` (for diffs and logs)
    + templates: the templates directory
    + template: the env file's template, e.g. ``"sglang-gateway.env.j2"``

    **Example:**

    .. code:: python

        render_env(secrets, redacted=True)  # "HF_TOKEN=<redacted sha256:1f2e3d4c>\\n..."
    """
    entries = [
        (name, f"<redacted sha256:{fingerprint(value)}>" if redacted else value)
        for name, value in sorted(secrets.values.items())
    ]
    return render(template, templates, entries=entries)


def gateway_secrets(secrets: Secrets) -> Secrets:
    """
    What ``sglang-gateway.env`` holds: the API key alone (a gateway fetches no model).

    smg 1.13.0 has one ``--api-key`` (``smg/router_args.py:2254``): its clients and
    its admin API must send it, and it sends it to its workers, so it is the key
    the workers' sglang checks (``SGLANG_API_KEY``), or none when they have none.
    """
    return Secrets(values={name: value for name, value in secrets.values.items() if name == "SGLANG_API_KEY"},
                   source=secrets.source)
