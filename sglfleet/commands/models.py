"""``sglfleet model lock REPO@REVISION``: write a pinned model's manifest from the Hub's tree API.

The manifest is written by ``sglfleet.artifacts.model_lock`` from the tree of the Hub or
of an HF-compatible mirror (``--endpoint``). The token, if the repository needs one,
comes from ``SGLFLEET_HF_TOKEN`` (or huggingface_hub's own ``HF_TOKEN``), never
from the command line.

**Example:**

.. code:: shell

    sglfleet model lock moonshotai/Kimi-K2.5@4d01dfe0332d63057c186e0b262165819efb6611
    sglfleet model lock testorg/tiny-model@main --endpoint http://127.0.0.1:8090
"""

from __future__ import annotations

import os

import click

from sglfleet.artifacts.model_lock import write_manifest
from sglfleet.artifacts.models import HUB, parse_manifest


@click.group()
def model():
    """Pinned models: their manifests."""


@model.command()
@click.argument("target", metavar="REPO@REVISION")
@click.option("--endpoint", help="An HF-compatible mirror to read the tree from (default: the Hub).")
def lock(target, endpoint):
    """Write files/models/REPO/COMMIT.json: every file of REPO at REVISION with its size and digest."""
    repo, sep, revision = target.partition("@")
    if not sep or not repo or not revision:
        raise click.ClickException(f"{target}: expected REPO@REVISION, e.g. moonshotai/Kimi-K2.5@main")
    try:
        path = write_manifest(repo, revision, endpoint, token=os.environ.get("SGLFLEET_HF_TOKEN") or None)
    except Exception as error:  # the client's errors are many; each says what went wrong
        raise click.ClickException(f"{repo}@{revision}: cannot read its tree from {endpoint or HUB} "
                                   f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                                   f"check the name, the revision and the network") from None
    manifest = parse_manifest(path.read_text(), str(path))
    click.echo(f"{path}: {manifest.repo}@{manifest.revision}, {len(manifest.files)} files, "
               f"{manifest.size / 1e9:.2f} GB")
