"""The ``sglfleet`` command: each subcommand lives beside the code it drives."""

import importlib

import click

# name -> "module:attribute"; imported only when used, so `sglfleet patch` never
# pays for pyinfra or the fleet code.
SUBCOMMANDS = {
    "patch": "sglfleet.patch_cli:patch",
    "devfleet": "sglfleet.devfleet_cli:devfleet",
    "events": "sglfleet.events_cli:events",
    "lint": "sglfleet.lint_cli:lint",
    "lock": "sglfleet.stacks_cli:lock",
    "model": "sglfleet.models_cli:model",
    "status": "sglfleet.status_cli:status",
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
    """Provision SGLang + EAGLE-3 fleets: patch, local fleet, lint, lock, model, status, events."""
