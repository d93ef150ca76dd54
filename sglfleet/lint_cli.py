"""``sglfleet lint INVENTORY``: check an inventory's launch configuration without connecting.

Loads the inventory as pyinfra does (group data included, ``--data`` applied),
validates it against the schema and the wave plan, loads each host's stack,
renders its unit, env file and release, and lints its launch flags against the
stack's sglang flag set and the host's architecture (``gpu_compute_cap``).
Prints one line per finding; exits 1 when anything is an error.

**Example:**

.. code:: shell

    sglfleet lint inventory/prod.py
    sglfleet lint inventory/dev.py --data speculative_num_steps=4
"""

from __future__ import annotations

import os
import shutil
import sys
import zipfile
from functools import cache
from pathlib import Path

import click

from sglfleet.config import ConfigError, collapse, validate_inventory
from sglfleet.lint import Finding, lint as lint_host
from sglfleet.templates import TEMPLATES, TemplateRenderError


@cache
def flagset_for(version: str):
    """
    The flag set of sglang ``version``, read from its wheel's ``server_args.py``.

    Newer releases (0.5.14 on) declare flags across ``sglang/srt``, so the whole
    ``sglang/srt`` tree is extracted once into the upstream cache.

    + version: an sglang release, e.g. ``"0.5.9"``
    """
    from sglfleet.server_flags import load_flags
    from sglfleet.upstream import CACHE, sglang_wheel

    tree = CACHE / "tree" / version
    server_args = tree / "sglang" / "srt" / "server_args.py"
    if not server_args.exists():
        with zipfile.ZipFile(sglang_wheel(version)) as wheel:
            members = [name for name in wheel.namelist()
                       if name.startswith("sglang/srt/") and name.endswith(".py")]
            partial = CACHE / "tree" / f".{version}.{os.getpid()}"
            wheel.extractall(partial, members)
        try:
            partial.rename(tree)  # atomic; another process may have won the race
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
            if not server_args.exists():
                with zipfile.ZipFile(sglang_wheel(version)) as wheel:
                    wheel.extractall(tree, members)
    return load_flags(server_args, cache_dir=CACHE.parent)


def _parse_data(pairs: tuple[str, ...]) -> dict:
    from pyinfra_cli.util import parse_cli_arg

    data = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r}: expected key=value", param_hint="--data")
        data[key] = parse_cli_arg(value)
    return data


def _compute_caps(config) -> list[str] | None:
    if config.gpu_less or config.gpu_compute_cap is None:
        return None
    # GPU count unknown: assume tp_size GPUs, so only the architecture rules apply.
    return [config.gpu_compute_cap] * (config.gpu_count or config.tp_size)


def load_inventory(inventory_file: str, data: dict | None = None):
    """
    Build a pyinfra inventory from a file as the CLI does, without connecting.

    + inventory_file: a pyinfra inventory file
    + data: ``--data`` overrides, already parsed as pyinfra parses them

    Raises ``ConfigError`` when the file does not load.
    """
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory_from_files

    try:
        # exec'ing inventory and group data files needs a pyinfra state, as in the CLI
        with ctx_state.use(State()):
            return make_inventory_from_files(inventory_file, override_data=data or {})
    except Exception as error:  # the inventory file is user code
        cause = getattr(error, "exception", None) or error.__context__ or error
        raise ConfigError([f"{inventory_file}: does not load: {type(cause).__name__}: {cause}; fix the file"]) from None


def lint_inventory(inventory_file: str, data: dict | None = None, templates: Path = TEMPLATES) -> list[str]:
    """
    Everything ``sglfleet lint`` reports for an inventory file, as lines; errors say ``error``.

    + inventory_file: a pyinfra inventory file (nothing is connected)
    + data: ``--data`` overrides, already parsed as pyinfra parses them
    + templates: the templates directory

    Raises ``ConfigError`` when the inventory does not load or validate.
    """
    return lint_loaded(load_inventory(inventory_file, data), templates)


def lint_loaded(inventory, templates: Path = TEMPLATES) -> list[str]:
    """
    Validate and lint an inventory pyinfra has built; the lines ``sglfleet lint`` prints.

    + inventory: a ``pyinfra.api.Inventory`` (nothing is connected)
    + templates: the templates directory

    Raises ``ConfigError`` when the inventory does not validate.
    """
    from sglfleet.release import render_release
    from sglfleet.secrets import SecretsError, load_secrets, render_env
    from sglfleet.stacks import StackError, load_stack
    from sglfleet.templates import render_unit

    configs = validate_inventory(inventory)

    findings: list[Finding] = []
    for name, config in configs.items():
        try:
            stack = load_stack(config.stack, allow_unhashed=config.allow_unhashed_lock)
        except StackError as error:
            findings.append(Finding("error", name, "stack", str(error)))
            continue
        try:
            secrets = load_secrets(config.secrets_file)
            render_env(secrets, redacted=True, templates=templates)
            render_unit(config, templates)
            render_release(config, stack.id, "", templates)
        except SecretsError as error:
            findings.append(Finding("error", name, "secrets_file", str(error)))
        except TemplateRenderError as error:
            findings.append(Finding("error", name, "templates", str(error)))
        version = stack.sglang_version
        flagset = flagset_for(version) if version else None
        if version is None:
            findings.append(Finding("warning", name, "stack", f"{stack.name} names no sglang version; "
                                    f"flags were not checked"))
        findings += lint_host(name, config, flagset, _compute_caps(config), version or "unknown")
    findings.sort(key=lambda finding: finding.severity != "error")
    return collapse([str(finding) for finding in findings], configs)


@click.command()
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("--data", "data", multiple=True, metavar="KEY=VALUE",
              help="Override host data, as pyinfra's --data does.")
@click.option("--templates", type=click.Path(exists=True, file_okay=False), default=str(TEMPLATES),
              show_default=True, help="The templates directory to render.")
def lint(inventory, data, templates):
    """Check INVENTORY's launch configuration against its stacks' sglang flags and GPUs."""
    try:
        lines = lint_inventory(inventory, _parse_data(data), Path(templates))
    except ConfigError as error:
        for line in error.problems:
            click.echo(line)
        sys.exit(1)
    for line in lines:
        click.echo(line)
    errors = sum(": error: " in line for line in lines)
    click.echo(f"sglfleet lint: {errors} errors, {len(lines) - errors} warnings", err=True)
    sys.exit(1 if errors else 0)
