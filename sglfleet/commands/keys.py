"""``sglfleet keys``: the fleet's keys, one for each role (``sglfleet.artifacts.keys``), for the operator.

Each command works on the ``secrets_file`` of every host of the inventory (one file
for most fleets); what it changes, the next converge applies. Only ``issue`` and
``show`` print a secret, alone on the last line, for the operator and for scripts.

**Example:**

.. code:: shell

    sglfleet keys list inventory/prod.py
    KEY=$(sglfleet keys issue inventory/prod.py billing | tail -1)
    sglfleet keys show inventory/prod.py gateway-admin
    sglfleet keys revoke inventory/prod.py billing
    sglfleet keys rotate inventory/prod.py engine-admin
"""

from __future__ import annotations

import datetime
import sys

import click

from sglfleet.artifacts.keys import ADMIN_VARIABLES, KeysError, KeyStore
from sglfleet.errors import ConfigError
from sglfleet.plan.secrets import SecretsError, fingerprint, load_secrets

INVENTORY = click.argument("inventory", type=click.Path(exists=True, dir_okay=False))


def _stores(inventory: str) -> list[KeyStore]:
    """The key stores of the inventory's hosts, each file once, in inventory order."""
    from sglfleet.plan.validation import load_inventory, validate_inventory

    try:
        configs = validate_inventory(load_inventory(inventory, {}))
    except ConfigError as error:
        _fail(*error.problems)
    paths = list(dict.fromkeys(config.secrets_file for config in configs.values() if config.secrets_file))
    if not paths:
        _fail(f"{inventory}: no host has a secrets_file to keep keys in; set secrets_file "
              f"(e.g. ~/.config/sglfleet/secrets.env) in its group data")
    return [KeyStore(path) for path in paths]


def _fail(*lines: str):
    for line in lines:
        click.echo(f"sglfleet keys: {line}", err=True)
    sys.exit(1)


def _age(made: str | None) -> str:
    if not made:
        return "-"
    seconds = (datetime.datetime.now(datetime.timezone.utc)
               - datetime.datetime.strptime(made, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
               ).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


@click.group()
def keys():
    """The fleet's keys: client keys, gateway-admin, engine-admin."""


@keys.command("list")
@INVENTORY
def list_keys(inventory):
    """Each key's name, role, fingerprint, age and source; never a secret."""
    rows = []
    for store in _stores(inventory):
        try:
            found = load_secrets(store.path).keys
        except SecretsError as error:
            _fail(str(error))
        rows += [(key.name, key.role, fingerprint(key.value), _age(key.made), key.source) for key in found]
    names = {role for role in ADMIN_VARIABLES} - {row[0] for row in rows}
    rows += [(role, role, "-", "-", "made by the next converge") for role in sorted(names)]
    widths = [max(len(str(row[column])) for row in [("NAME", "ROLE", "FINGERPRINT", "AGE", "SOURCE"), *rows])
              for column in range(5)]
    for row in [("NAME", "ROLE", "FINGERPRINT", "AGE", "SOURCE"), *rows]:
        click.echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


def _each(inventory: str, change):
    """``change(store, value)`` on every secrets file, the first's new value given to the others: one key
    for the fleet, whichever host's file a gateway or engine reads. Returns the first's key."""
    stores = _stores(inventory)
    try:
        first = change(stores[0], None)
        for store in stores[1:]:
            change(store, first.value)
    except KeysError as error:
        _fail(str(error))
    return first


@keys.command()
@INVENTORY
@click.argument("name")
def issue(inventory, name):
    """A new client key NAME: printed once, alone on the last line."""
    key = _each(inventory, lambda store, value: store.issue(name, value))
    click.echo(f"issued client key {name!r} (fingerprint {fingerprint(key.value)}) in {key.source}; "
               f"the next converge gives it to the gateways", err=True)
    click.echo(key.value)


@keys.command()
@INVENTORY
@click.argument("name")
def show(inventory, name):
    """Print key NAME (a client key's name, gateway-admin or engine-admin)."""
    try:
        found = next((key for store in _stores(inventory) for key in load_secrets(store.path).keys
                      if key.name == name), None)
    except SecretsError as error:
        _fail(str(error))
    if found is None:
        _fail(f"no key {name!r}; `sglfleet keys list {inventory}` shows them")
    click.echo(found.value)


@keys.command()
@INVENTORY
@click.argument("name")
def revoke(inventory, name):
    """Remove client key NAME; the next converge stops the gateways accepting it."""
    key = _each(inventory, lambda store, _: store.revoke(name))
    click.echo(f"revoked client key {name!r} (fingerprint {fingerprint(key.value)}); "
               f"the next converge applies it", err=True)


@keys.command()
@INVENTORY
@click.argument("role")
def rotate(inventory, role):
    """A new secret for ROLE: gateway-admin, engine-admin, or a client key's name."""
    key = _each(inventory, lambda store, value: store.rotate(role, value))
    click.echo(f"rotated {role} (fingerprint now {fingerprint(key.value)}); the next converge rolls it out", err=True)
