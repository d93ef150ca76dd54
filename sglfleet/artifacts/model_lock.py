"""Write a pinned model's manifest from the Hub's tree API (what ``sglfleet model lock`` runs).

The tree is read with huggingface_hub's ``HfApi.list_repo_tree`` (recursive,
at the commit), against the Hub or an HF-compatible mirror (``endpoint``);
a branch or tag is first resolved to its commit with ``model_info``. For an
LFS file the tree gives the content's sha256 (``lfs.sha256``); for any other
file its git blob sha1 (``blob_id``), which a host recomputes as
``sha1(b"blob <size>\\0" + data)``. The token, if the repository needs one,
is passed in (the command reads ``SGLFLEET_HF_TOKEN``), or else huggingface_hub's
own lookup (``HF_TOKEN``) finds it.

**Example:**

.. code:: python

    write_manifest("moonshotai/Kimi-K2.5", "4d01dfe0332d63057c186e0b262165819efb6611")
    write_manifest("testorg/tiny-model", "main", "http://127.0.0.1:8090")  # a branch resolves to its commit
"""

from __future__ import annotations

from pathlib import Path

from sglfleet.artifacts.models import HUB, PINNED, ModelFile, manifest_path, parse_manifest, render_manifest


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


def write_manifest(repo: str, revision: str, endpoint: str | None = None, manifests_dir: Path | None = None,
                   token: str | None = None) -> Path:
    """Read the tree and write ``files/models/<repo>/<commit>.json`` atomically; return its path."""
    commit, files = read_tree(repo, revision, endpoint, token)
    text = render_manifest(repo, commit, files, endpoint or HUB)
    parse_manifest(text, f"{repo}@{commit}")  # refuses an empty tree or a path outside the model
    path = manifest_path(repo, commit, manifests_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    partial.write_text(text)
    partial.replace(path)
    return path
