"""``sglfleet model lock REPO@REVISION``: write a pinned model's manifest from the Hub's tree API.

The tree is read with huggingface_hub's ``HfApi.list_repo_tree`` (recursive,
at the commit), against the Hub or an HF-compatible mirror (``--endpoint``);
a branch or tag is first resolved to its commit with ``model_info``. For an
LFS file the tree gives the content's sha256 (``lfs.sha256``); for any other
file its git blob sha1 (``blob_id``), which a host recomputes as
``sha1(b"blob <size>\\0" + data)``. The token, if the repository needs one,
comes from ``SGLFLEET_HF_TOKEN`` (or huggingface_hub's own ``HF_TOKEN``), never
from the command line.

**Example:**

.. code:: shell

    sglfleet model lock moonshotai/Kimi-K2.5@4d01dfe0332d63057c186e0b262165819efb6611
    sglfleet model lock testorg/tiny-model@main --endpoint http://127.0.0.1:8090
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from sglfleet.models import HUB, PINNED, ModelFile, manifest_path, parse_manifest, render_manifest


def read_tree(repo: str, revision: str, endpoint: str | None = None, token: str | None = None) -> tuple[str, list[ModelFile]]:
    """
    The commit ``revision`` names and every file of the repository at it.

    + repo: ``org/name``
    + revision: a 40-hex commit, a branch or a tag
    + endpoint: the Hub (None) or a mirror's URL
    + token: a Hugging Face token, or None for huggingface_hub's default lookup
    """
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    api = HfApi(endpoint=endpoint, token=token)
    # olah answers model_info only with a revision; a commit needs no lookup at all.
    commit = revision if PINNED.match(revision) else api.model_info(repo, revision=revision).sha
    files = []
    for entry in api.list_repo_tree(repo, revision=commit, recursive=True):
        if not isinstance(entry, RepoFile):
            continue
        if entry.lfs is not None:
            files.append(ModelFile(entry.path, int(entry.lfs.size), sha256=entry.lfs.sha256))
        else:
            files.append(ModelFile(entry.path, int(entry.size), git_sha1=entry.blob_id))
    return commit, files


def write_manifest(repo: str, revision: str, endpoint: str | None = None, models_dir: Path | None = None,
                   token: str | None = None) -> Path:
    """Read the tree and write ``files/models/<repo>/<commit>.json`` atomically; return its path."""
    commit, files = read_tree(repo, revision, endpoint, token)
    text = render_manifest(repo, commit, files, endpoint or HUB)
    parse_manifest(text, f"{repo}@{commit}")  # refuses an empty tree or a path outside the model
    path = manifest_path(repo, commit, models_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    partial.write_text(text)
    partial.replace(path)
    return path


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
