"""Model operations: stage a host's pinned models (checked, resumable, atomic) and collect unused revisions.

The host tool does the staging (``sglfleet.host.models``); these operations
decide from its one-command ``check`` whether anything is needed, check the
free space against what is missing, send the controller's files when the
source is the controller, and yield the tool's commands. A converge whose
models are staged and unchanged costs one remote command per host here (the
check, a ``stat`` per file) and one for the collection, and reads no file.

**Example:**

.. code:: python

    models.staged(name="Models", models=[(model, manifest)], source="hub", python=LAYOUT.python(stack.id))
"""

from __future__ import annotations

import posixpath
import shlex
import threading
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, OperationError, StringCommand, operation

from sglfleet.diffs import wants_diff
from sglfleet.facts.models import ModelGarbage, ModelState
from sglfleet.host.layout import LAYOUT
from sglfleet.host.models import digest_of, partial_of
from sglfleet.models import Manifest, ModelError, StagedModel

GIB = 1 << 30
# Room left beside the model: the store's filesystem also holds releases, logs
# and the next revision's partial folder. 2 % of the model, at least 256 MiB.
MARGIN_SHARE, MARGIN_MIN = 0.02, 256 << 20
_checked: dict[tuple[str, int, int], str] = {}
_checked_lock = threading.Lock()


def margin(size: int) -> int:
    return max(int(size * MARGIN_SHARE), MARGIN_MIN)


def wanted_paths(manifest: Manifest, answer: dict | None) -> list[str]:
    """The files a host must fetch (or check again) for one revision, from its ``check`` answer."""
    if answer is None or answer["state"] == "absent":
        return [f.path for f in manifest.files]
    if answer["state"] == "ok":
        return []
    if answer["state"] == "partial":
        return [f.path for f in manifest.files if f.path not in set(answer["verified"])]
    return [f.path for f in manifest.files] if answer["changed"] is None else list(answer["changed"])


def controller_copy(folder: str, manifest: Manifest, paths: list[str]) -> dict[str, Path]:
    """
    The controller's copies of ``paths``, each checked against the manifest once
    per run (and per size and mtime); raise ModelError on a missing or wrong file.
    """
    root = Path(folder).expanduser() / manifest.repo / manifest.revision
    found = {}
    for path in paths:
        local, entry = root / path, manifest.file(path)
        try:
            st = local.stat()
        except OSError:
            raise ModelError(f"{manifest.repo}@{manifest.revision[:12]}: {local} is missing on the controller: "
                             f"copy the revision there (e.g. hf download --revision {manifest.revision} "
                             f"--local-dir {root})") from None
        key = (str(local), st.st_size, st.st_mtime_ns)
        with _checked_lock:  # hosts are planned concurrently: one hash per file
            if key not in _checked:
                want, got = digest_of(str(local), {"sha256": entry.sha256, "git_sha1": entry.git_sha1})
                _checked[key] = got if st.st_size == entry.size else "size"
            if _checked[key] not in (entry.sha256, entry.git_sha1):
                raise ModelError(f"{manifest.repo}@{manifest.revision[:12]}: the controller's {local} does not match "
                                 f"the manifest: fetch it again")
        found[path] = local
    return found


def space_problem(free: int, needed: int, store: str, what: str) -> str | None:
    """One line when ``needed`` bytes (plus the margin) do not fit in ``free``; None when they do."""
    if needed and free < needed + margin(needed):
        return (f"{host.name}: {free / GIB:.1f} GiB free under {store} is too little to stage {what} "
                f"(needs {(needed + margin(needed)) / GIB:.1f} GiB: {needed / GIB:.1f} GiB missing plus a margin): "
                f"free space, grow the filesystem or set models_dir to a bigger one")
    return None


@operation()
def staged(models: list[tuple[StagedModel, Manifest]], source: str = "hub", python: str | None = None,
           endpoint: str | None = None, controller_dir: str | None = None):
    """
    Ensure each pinned model is staged and verified in its folder; repair one that drifted.

    + models: ``(StagedModel, Manifest)`` pairs (``sglfleet.models``)
    + source: "hub" (the Hub, or ``endpoint``) or "controller" (``controller_dir``)
    + python: a python with huggingface_hub on the host (the stack's), for "hub"
    + endpoint: an HF-compatible mirror's URL, or None for the Hub
    + controller_dir: the controller's folder of ``<org>/<name>/<revision>/`` copies

    **Example:**

    .. code:: python

        staged(name="Stage models", models=[(model, manifest)], source="hub",
               python="/opt/sglfleet/stacks/dev-5867/venv/bin/python", endpoint="http://mirror:8090")
    """
    spec = [{"dir": model.dir, "digest": manifest.digest} for model, manifest in models]
    answers = host.get_fact(ModelState, spec=spec) or [None] * len(models)
    todo = []
    for (model, manifest), answer in zip(models, answers):
        paths = wanted_paths(manifest, answer)
        if paths:
            todo.append((model, manifest, answer, paths))
    if not todo:
        host.noop(f"{', '.join(f'{m.repo}@{m.revision[:12]}' for m, _ in models)} staged and unchanged")
        return

    needed = sum(manifest.file(p).size for _, manifest, _, paths in todo for p in paths)
    free = min((answer or {}).get("free", needed + margin(needed)) for _, _, answer, _ in todo)
    what = ", ".join(f"{m.repo}@{m.revision[:12]}" for m, *_ in todo)
    problem = space_problem(free, needed, posixpath.dirname(posixpath.dirname(posixpath.dirname(todo[0][0].dir))), what)
    if problem:
        # Before a byte moves; the serving release is untouched.
        yield f"echo {shlex.quote(problem)} >&2; exit 1"
        return

    for model, manifest, answer, paths in todo:
        state = (answer or {}).get("state", "absent")
        size = sum(manifest.file(p).size for p in paths)
        line = (f"Model {model.repo}@{model.revision[:12]} ({state}): "
                + (f"check and repair {len(paths)} changed files" if state == "drifted"
                   else f"stage {len(paths)} of {len(manifest.files)} files ({size / 1e6:.1f} MB)")
                + f" from {endpoint or 'the Hub' if source == 'hub' else 'the controller'} into {model.dir}")
        host.log(line, logger.warning if state == "drifted" else logger.info)
        if wants_diff():
            host.log_styled(line, fg="yellow")
        command = [LAYOUT.tool, "models", "stage", "--dir", model.dir, "--source", source]
        if source == "hub":
            command += ["--python", python] if python else []
            command += ["--endpoint", endpoint] if endpoint else []
        else:
            if not controller_dir:
                raise OperationError(f"{host.name}: model_source is controller but models_controller_dir is not set")
            try:
                local = controller_copy(controller_dir, manifest, paths)
            except ModelError as error:
                raise OperationError(str(error)) from None
            partial = partial_of(model.dir)
            folders = sorted({posixpath.dirname(posixpath.join(partial, p)) for p in paths})
            yield shlex.join(["mkdir", "-p", *folders])
            for path in paths:
                yield FileUploadCommand(str(local[path]), posixpath.join(partial, path))
        # The manifest travels on stdin: the tool checks every file against it.
        yield StringCommand(shlex.join(command), _stdin=manifest.text)


@operation()
def collected(keep: list[str]):
    """
    Remove model revisions that no staged release loads and this run does not
    stage (the current and previous releases' among the kept), and partial
    folders of unwanted revisions over an hour old.

    + keep: the folders this run stages

    **Example:**

    .. code:: python

        collected(name="Collect unused model revisions", keep=["/opt/sglfleet/models/org/m/4d01..."])
    """
    doomed = host.get_fact(ModelGarbage, keep=sorted(keep))
    if not doomed:
        host.noop("no unused model revisions")
        return
    if wants_diff():
        host.log_styled("\n".join(f"  - remove {path}" for path in doomed), fg="yellow")
    yield shlex.join([LAYOUT.tool, "models", "collect", *(f"--keep={path}" for path in sorted(keep))])
