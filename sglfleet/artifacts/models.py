"""Pinned models: a Hub repository at a 40-hex commit, and its committed manifest. Pure.

A manifest (``files/models/<org>/<name>/<revision>.json``, written by
``sglfleet model lock``) lists every file of the revision: its path, its size
and its digest, the sha256 for LFS files and the git blob sha1 for the rest,
as the Hub's tree API reports them. It is to a model what a lock is to a
stack: hosts stage exactly these files and check each one against it, since
neither the Hub's client nor a mirror checks content (huggingface_hub checks
sizes only). A revision that is not a commit is not pinned; one without its
manifest is refused before any connection.

**Example:**

.. code:: python

    manifest = load_manifest("moonshotai/Kimi-K2.5", "4d01dfe0332d63057c186e0b262165819efb6611")
    manifest.size                   # bytes of every file
    staged_models(config)           # [StagedModel("model", "moonshotai/Kimi-K2.5", "4d01...", "/opt/...")]
    served_launch(config).model_path  # "/opt/sglfleet/models/moonshotai/Kimi-K2.5/4d01..."
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from sglfleet import FILES, PROJECT_ROOT
from sglfleet.host.layout import LAYOUT

# $SGLFLEET_MODELS points a run at another folder of manifests (a test's).
MANIFESTS_DIR = Path(os.environ.get("SGLFLEET_MODELS", FILES / "models"))
HUB = "https://huggingface.co"
PINNED = re.compile(r"^[0-9a-f]{40}$")
# The two models a launch names, by the keys that name them and pin them.
ROLES = (("model", "model_path", "model_revision"),
         ("draft", "speculative_draft_model_path", "speculative_draft_model_revision"))


class ModelError(ValueError):
    """A model that cannot be staged as asked; the message names it and the fix."""


@dataclass(frozen=True)
class ModelFile:
    """One file of a revision: an LFS file has a sha256, any other its git blob sha1."""

    path: str
    size: int
    sha256: str | None = None
    git_sha1: str | None = None


@dataclass(frozen=True)
class Manifest:
    """Every file of one pinned revision, and the digest a staged copy's marker holds."""

    repo: str
    revision: str
    files: tuple[ModelFile, ...]
    digest: str
    text: str

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def file(self, path: str) -> ModelFile:
        return next(f for f in self.files if f.path == path)


@dataclass(frozen=True)
class StagedModel:
    """A pinned model a host stages: ``role`` is "model" or "draft"; ``dir`` its folder there."""

    role: str
    repo: str
    revision: str
    dir: str


def is_hub_id(path: str) -> bool:
    """``org/name``, as the Hub names repositories (a local path is not one)."""
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", path)) and not path.startswith(".")


def manifest_path(repo: str, revision: str, manifests_dir: Path | None = None) -> Path:
    return (manifests_dir or MANIFESTS_DIR) / repo / f"{revision}.json"


def lock_command(repo: str, revision: str, endpoint: str | None = None) -> str:
    """The command that writes a manifest, for error messages."""
    return f"sglfleet model lock {repo}@{revision}" + (f" --endpoint {endpoint}" if endpoint else "")


def render_manifest(repo: str, revision: str, files: list[ModelFile], source: str) -> str:
    """A manifest's text: stable JSON, files sorted by path, so a re-lock of the same tree is byte-identical."""
    entries = []
    for f in sorted(files, key=lambda f: f.path):
        entry = {"path": f.path, "size": f.size}
        entry.update({"sha256": f.sha256} if f.sha256 else {"git_sha1": f.git_sha1})
        entries.append(entry)
    body = {"repo": repo, "revision": revision, "locked_from": source, "files": entries}
    return json.dumps(body, indent=1) + "\n"


def parse_manifest(text: str, where: str = "manifest") -> Manifest:
    """A manifest from its text; raises ModelError naming what is wrong."""
    try:
        data = json.loads(text)
        files = tuple(ModelFile(e["path"], int(e["size"]), e.get("sha256"), e.get("git_sha1"))
                      for e in data["files"])
        repo, revision = data["repo"], data["revision"]
    except (ValueError, KeyError, TypeError) as error:
        raise ModelError(f"{where}: not a model manifest ({type(error).__name__}: {error}); "
                         f"write it again with `sglfleet model lock`") from None
    bad = [f.path for f in files if not (f.sha256 or f.git_sha1) or f.path.startswith("/") or ".." in f.path.split("/")]
    if bad or not files:
        raise ModelError(f"{where}: {'files without a digest or outside the model: ' + ', '.join(bad[:3]) if bad else 'no files'}; "
                         f"write it again with `sglfleet model lock`")
    return Manifest(repo, revision, files, hashlib.sha256(text.encode()).hexdigest(), text)


def load_manifest(repo: str, revision: str, manifests_dir: Path | None = None, endpoint: str | None = None) -> Manifest:
    """
    The committed manifest of ``repo`` at ``revision``.

    + repo, revision: the pinned model
    + manifests_dir: where manifests live (default files/models, or $SGLFLEET_MODELS)
    + endpoint: the inventory's ``hf_endpoint``, named in the fix when the manifest is missing

    Raises ``ModelError`` naming the command to run and what it must reach.
    """
    path = manifest_path(repo, revision, manifests_dir)
    if not path.is_file():
        shown = path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path
        raise ModelError(f"model {repo}@{revision[:12]} has no manifest ({shown}): run "
                         f"`{lock_command(repo, revision, endpoint)}` where {endpoint or HUB} can be reached, "
                         f"and commit the file")
    manifest = parse_manifest(path.read_text(), str(path))
    if (manifest.repo, manifest.revision) != (repo, revision):
        raise ModelError(f"{path}: holds {manifest.repo}@{manifest.revision}, not {repo}@{revision}; "
                         f"run `{lock_command(repo, revision, endpoint)}`")
    return manifest


def staged_models(config) -> list[StagedModel]:
    """The pinned models of a host's launch, with their folders on the host (unpinned ones are not staged)."""
    models = []
    for role, path_key, revision_key in ROLES:
        repo, revision = getattr(config.launch, path_key), getattr(config, revision_key)
        if repo and revision and is_hub_id(repo) and PINNED.match(revision):
            models.append(StagedModel(role, repo, revision, LAYOUT.model(repo, revision, config.models_dir or "")))
    return models


def served_launch(config):
    """
    The host's launch settings with each pinned model's hub id replaced by its staged folder.

    The target keeps its hub id as the name it serves (``served_model_name``, where the inventory
    gives none): sglang serves its model path by default, and the staged folder names the revision,
    so a new revision would change the name clients ask for, and a rollout that restarts onto it
    answers 404 to the old name once no host serves it (bench/weights_update.py met it).
    """
    keys = {"model": "model_path", "draft": "speculative_draft_model_path"}
    staged = staged_models(config)
    update = {keys[m.role]: m.dir for m in staged}
    if config.launch.served_model_name is None and any(m.role == "model" for m in staged):
        update["served_model_name"] = config.launch.model_path
    return config.launch.model_copy(update=update)


def offline(config) -> bool:
    """Whether the server can start with no network: no model it loads is named by a hub id alone."""
    launch = served_launch(config)
    named = [launch.model_path, launch.speculative_draft_model_path]
    return bool(staged_models(config)) and not any(path and is_hub_id(path) for path in named)
