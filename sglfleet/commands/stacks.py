"""``sglfleet lock STACK``: resolve a stack definition into its PEP 751 lock with uv.

The resolver is ``sglfleet.artifacts.locking``; this command runs it and writes the lock.
Sources this machine cannot reach are left out and named on stderr; the deploy
refuses such a lock until ``sglfleet lock`` is run again where they can be reached.

**Example:**

.. code:: shell

    sglfleet lock dev
    sglfleet lock cu130-sglang-0.5.9
"""

from __future__ import annotations

import click

from sglfleet.artifacts.locking import resolve, write_lock
from sglfleet.artifacts.stacks import StackError, load_stack, stack_id


@click.command()
@click.argument("stack")
def lock(stack):
    """Resolve files/stacks/STACK.toml into files/stacks/locks/STACK/pylock.toml."""
    try:
        text, unresolved = resolve(stack)
    except StackError as e:
        raise click.ClickException(str(e)) from None
    path = write_lock(stack, text)
    try:
        loaded = load_stack(stack, allow_unhashed=True)
    except StackError as e:  # the definition changed while it was being locked
        raise click.ClickException(str(e)) from None
    per_python = ", ".join(f"{len(loaded.for_python(python).files)} for {python}" for python in loaded.pythons)
    click.echo(f"{path}: stack id {stack_id(stack, text.encode())}-cp3XX, "
               f"{text.count('[[packages]]')} files ({per_python})")
    for entry in unresolved:
        click.echo(f"unresolved: {entry['name']} {entry['version']} ({entry['reason']})", err=True)
