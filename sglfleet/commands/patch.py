"""``sglfleet patch diff|apply|verify|revert FILE``: the patch engine on a local file.

A refusal prints one line on stderr, exits 1 and leaves the file as it was.

**Example:**

.. code:: console

    $ sglfleet patch diff .venv/lib/python3.11/site-packages/sglang/srt/models/kimi_k25.py
    $ sglfleet patch apply .venv/lib/python3.11/site-packages/sglang/srt/models/kimi_k25.py
"""

from __future__ import annotations

import os
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
    """Put the KimiK25 EAGLE-3 methods inside the class body of kimi_k25.py."""


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
def revert(file: Path, patch_path: Path | None):
    """Remove the inserted block, restoring the original bytes, atomically."""
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
