"""The ``sglfleet`` command: each subcommand lives beside the code it drives."""

import importlib

import click

# name -> "module:attribute"; imported only when used, so `sglfleet patch` never
# pays for pyinfra or the fleet code.
SUBCOMMANDS = {
    "patch": "sglfleet.commands.patch:patch",
    "devfleet": "sglfleet.commands.devfleet:devfleet",
    "events": "sglfleet.commands.events:events",
    "keys": "sglfleet.commands.keys:keys",
    "lint": "sglfleet.commands.lint:lint",
    "lock": "sglfleet.commands.stacks:lock",
    "model": "sglfleet.commands.models:model",
    "status": "sglfleet.commands.status:status",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS:
            return None
        module_name, attribute = SUBCOMMANDS[name].split(":")
        return getattr(importlib.import_module(module_name), attribute)


@click.group(cls=LazyGroup)
def main():
    """Provision SGLang + EAGLE-3 fleets: patch, local fleet, keys, lint, lock, model, status, events."""
