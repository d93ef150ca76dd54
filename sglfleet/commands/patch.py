"""``sglfleet patch plan``: the patch sets on an sglang release; ``diff|apply|verify|revert FILE``: one patch on a local file.

``plan --sglang VERSION`` (or ``--stack NAME``) reads that release's own files
from its wheel (downloaded once into the upstream cache, as the lint does) and
says of each patch set: applies, upstream (the release has the fix), not for
this version, or refused (with the reason); ``--diff`` shows each set's change.

A refusal prints one line on stderr, exits 1 and leaves the file as it was.

**Example:**

.. code:: console

    $ sglfleet patch plan --sglang 0.5.9 --diff
    $ sglfleet patch plan --stack cu130-sglang-0.5.23 --sets-dir inventory/patches
    $ sglfleet patch diff .venv/lib/python3.11/site-packages/sglang/srt/models/kimi_k25.py
    $ sglfleet patch apply .venv/lib/python3.11/site-packages/sglang/srt/models/kimi_k25.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click

from sglfleet.artifacts import patcher

_file = click.argument("file", type=click.Path(path_type=Path))
_patch = click.option(
    "--patch", "patch_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Patch file (default: files/patches/kimi_k25_eagle3.py).",
)


@click.group()
def patch():
    """Patch sets on sglang releases (plan); the KimiK25 EAGLE-3 methods on one file (diff, apply, verify, revert)."""


@patch.command("plan")
@click.option("--sglang", "version", metavar="VERSION", help="An sglang release, e.g. 0.5.9.")
@click.option("--stack", "stack_name", metavar="NAME", help="A stack of files/stacks: its sglang release.")
@click.option("--sets-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="An operator's folder of patch sets (an inventory's patch_sets_dir), after the shipped ones.")
@click.option("--diff", "show_diff", is_flag=True, help="Print each applying set's change as a unified diff.")
def plan_(version: str | None, stack_name: str | None, sets_dir: Path | None, show_diff: bool):
    """List each patch set as applies, upstream, not for this version, or refused, on that release's own files."""
    from sglfleet.artifacts import patchsets
    from sglfleet.artifacts.upstream import sglang_file
    from sglfleet.plan.patch_plan import REFUSED, plan

    if (version is None) == (stack_name is None):
        raise click.UsageError("give --sglang VERSION or --stack NAME")
    if stack_name is not None:
        from sglfleet.artifacts.stacks import StackError, load_stack
        try:
            version = load_stack(stack_name, allow_unhashed=True).sglang_version
        except StackError as error:
            raise click.ClickException(str(error))
        if version is None:
            raise click.ClickException(f"stack {stack_name} names no sglang version")
    try:
        sets = patchsets.load_sets(sets_dir)
    except patchsets.PatchSetError as error:
        raise click.ClickException(str(error))
    planned = plan(sets, version, lambda member: sglang_file(version, member).read_bytes())
    click.echo(f"sglang {version}" + (f" (stack {stack_name})" if stack_name else "") + ":")
    for line in planned:
        click.echo(f"  {line}")
    if show_diff:
        for line in planned:
            if line.diff:
                click.echo(f"# patch set {line.patch_set.name}: {line.patch_set.upstream}")
                click.echo(line.diff, nl=False)
    if any(line.status == REFUSED for line in planned):
        sys.exit(1)


@patch.command()
@_file
@_patch
def diff(file: Path, patch_path: Path | None):
    """Print the unified diff that `apply` would make; nothing when nothing is needed."""
    old, new = _compute(file, patch_path, patcher.apply)
    click.echo(patcher.unified_diff(old, new, str(file)), nl=False)


@patch.command()
@_file
@_patch
def apply(file: Path, patch_path: Path | None):
    """Insert the missing methods into the class, atomically."""
    old, new = _compute(file, patch_path, patcher.apply)
    if new == old:
        click.echo(f"{file}: unchanged, the class has the methods")
        return
    _write(file, new)
    click.echo(f"{file}: patched")


@patch.command()
@_file
@_patch
def verify(file: Path, patch_path: Path | None):
    """Exit 0 only when the class has all the methods."""
    the_patch = _load(patch_path)
    source = _read(file)
    try:
        missing = patcher.missing_methods(source, the_patch)
    except patcher.PatchRefused as refusal:
        _refuse(file, refusal)
    if missing:
        _refuse(file, f"class {the_patch.target} lacks {', '.join(missing)} (run `sglfleet patch apply`)")
    click.echo(f"{file}: class {the_patch.target} has {', '.join(the_patch.method_names)}")


@patch.command()
@_file
@_patch
@click.option("--all", "every", is_flag=True, help="Remove every sglfleet block, whichever patch set wrote it.")
def revert(file: Path, patch_path: Path | None, every: bool):
    """Remove the inserted block, restoring the original bytes, atomically."""
    if every:
        from sglfleet.artifacts.patchsets import strip
        old, new = _compute(file, patch_path, lambda source, _: strip(source))
    else:
        old, new = _compute(file, patch_path, patcher.revert)
    if new == old:
        click.echo(f"{file}: unchanged, no sglfleet block")
        return
    _write(file, new)
    click.echo(f"{file}: reverted")


def _compute(file, patch_path, function):
    the_patch = _load(patch_path)
    old = _read(file)
    try:
        return old, function(old, the_patch)
    except patcher.PatchRefused as refusal:
        _refuse(file, refusal)


def _load(patch_path):
    try:
        return patcher.load_patch(patch_path)
    except (OSError, SyntaxError, ValueError) as error:
        raise click.ClickException(f"cannot load the patch: {error}")


def _read(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as error:
        _refuse(file, f"cannot read it: {error.strerror or error}")


def _refuse(file, reason):
    click.echo(f"sglfleet patch: {file}: {reason}", err=True)
    raise SystemExit(1)


def _write(file: Path, data: bytes) -> None:
    """Replace ``file`` with ``data`` by rename, keeping its mode and owner."""
    real = Path(os.path.realpath(file))  # write through a symlink, not over it
    info = real.stat()
    fd, temp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".sglfleet")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if (info.st_uid, info.st_gid) != (os.getuid(), os.getgid()):
            os.chown(temp, info.st_uid, info.st_gid)
        os.chmod(temp, info.st_mode & 0o7777)  # after chown, which may clear setuid bits
        os.replace(temp, real)
    except OSError as error:
        if os.path.exists(temp):
            os.unlink(temp)
        _refuse(file, f"cannot write it atomically: {error}")
