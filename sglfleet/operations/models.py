"""Model operations: stage a host's pinned models (checked, resumable, atomic), fanned out through peer hosts, and collect unused revisions.

The host tool does the staging (``sglfleet.host.models``); these operations
decide from its one-command ``check`` whether anything is needed, check the
free space against what is missing, send the controller's files when the
source is the controller, and yield the tool's commands. A converge whose
models are staged and unchanged costs one remote command per host here (the
check, a ``stat`` per file) and one for the collection, and reads no file.

Model files fan out as wheels do (``sglfleet.artifacts.fanout``): hosts stage in
doubling rounds; round 0 from the source, later rounds from the hosts of
earlier rounds first (the host tool's ``--peer``), then from the source for
what peers did not give; a host that staged serves its store read-only to the
later rounds (``share.py --nested``) until every round has staged.

**Example:**

.. code:: python

    models.staged(name="Models", models=[(model, manifest)], source="hub", python=LAYOUT.python(stack.id))
"""

from __future__ import annotations

import json
import posixpath
import shlex
import threading
from functools import cache
from pathlib import Path

import gevent
from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, OperationError, StringCommand, operation

from sglfleet.artifacts.fanout import Progress, Share, human, serve
from sglfleet.artifacts.models import Manifest, ModelError, StagedModel
from sglfleet.facts.host import READ
from sglfleet.facts.models import ModelGarbage, ModelState
from sglfleet.host.layout import LAYOUT
from sglfleet.host.models import NEEDS, digest_of, partial_of, store_of
from sglfleet.host.textfile import DEFAULT_DIR as TEXTFILE_DIR
from sglfleet.operations.drift import found as found_drift, marked
from sglfleet.operations.remote import HostFunctionCommand
from sglfleet.operations.output import wants_diff

GIB = 1 << 30
# Room left beside the model: the store's filesystem also holds releases, logs
# and the next revision's partial folder. 2 % of the model, at least 256 MiB.
MARGIN_SHARE, MARGIN_MIN = 0.02, 256 << 20
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
        with _checked_lock:  # hosts are planned concurrently: one hash per file
            got = (_digest(str(local), st.st_size, st.st_mtime_ns, entry.sha256, entry.git_sha1)
                   if st.st_size == entry.size else "size")
        if got not in (entry.sha256, entry.git_sha1):
            raise ModelError(f"{manifest.repo}@{manifest.revision[:12]}: the controller's {local} does not match "
                             f"the manifest: fetch it again")
        found[path] = local
    return found


@cache
def _digest(path: str, size: int, mtime_ns: int, sha256: str | None, git_sha1: str | None) -> str:
    """
    The digest of the controller's file ``path``, sha256 (else git blob sha1): once per
    ``size`` and ``mtime_ns``, which name the file's content (a changed file is hashed again).
    """
    return digest_of(path, {"sha256": sha256, "git_sha1": git_sha1})[1]


def space_problem(free: int, needed: int, store: str, what: str) -> str | None:
    """One line when ``needed`` bytes (plus the margin) do not fit in ``free``; None when they do."""
    if needed and free < needed + margin(needed):
        return (f"{host.name}: {free / GIB:.1f} GiB free under {store} is too little to stage {what} "
                f"(needs {(needed + margin(needed)) / GIB:.1f} GiB: {needed / GIB:.1f} GiB missing plus a margin): "
                f"free space, grow the filesystem or set models_dir to a bigger one")
    return None


def peer_urls(model: StagedModel, sources: tuple[str, ...]) -> list[str]:
    """The revision's folder on each peer's file server (which serves its model store)."""
    return [f"{source}/{model.repo}/{model.revision}" for source in sources]


@operation()
def staged(models: list[tuple[StagedModel, Manifest]], source: str = "hub", python: str | None = None,
           endpoint: str | None = None, controller_dir: str | None = None, share: Share | None = None,
           answers=READ, textfile_dir: str = TEXTFILE_DIR):
    """
    Ensure each pinned model is staged and verified in its folder; repair one that
    drifted. With ``share``, fetch from the peers of earlier rounds first, then
    from the source, and serve the store to later rounds (``sharing.serving_stopped`` stops it).

    + models: ``(StagedModel, Manifest)`` pairs (``sglfleet.artifacts.models``)
    + source: "hub" (the Hub, or ``endpoint``) or "controller" (``controller_dir``)
    + python: a python with huggingface_hub on the host (the stack's), for "hub"
    + endpoint: an HF-compatible mirror's URL, or None for the Hub
    + controller_dir: the controller's folder of ``<org>/<name>/<revision>/`` copies
    + share: the host's turn in the fan-out (``sglfleet.artifacts.fanout.turns``); None: the source alone
    + answers: ``ModelState``'s answers for these models, already read; by default the operation reads them
    + textfile_dir: node_exporter's textfile folder, where a drift found is marked (``sglfleet_drift``)

    **Example:**

    .. code:: python

        staged(name="Stage models, round 1", models=[(model, manifest)], source="hub",
               python="/opt/sglfleet/stacks/dev-5867/venv/bin/python", endpoint="http://mirror:8090",
               share=Share(1, ("http://node1:30090",), 30090, "sglfleet-models-share-x"))
    """
    spec = [{"dir": model.dir, "digest": manifest.digest} for model, manifest in models]
    if answers is READ:
        answers = host.get_fact(ModelState, spec=spec)
    answers = answers or [None] * len(models)
    todo = []
    for (model, manifest), answer in zip(models, answers):
        paths = wanted_paths(manifest, answer)
        if paths:
            todo.append((model, manifest, answer, paths))
    if not todo:
        host.noop(f"{', '.join(f'{m.repo}@{m.revision[:12]}' for m, _ in models)} staged and unchanged")
        return

    needed = sum(manifest.file(p).size for _, manifest, _, paths in todo for p in paths)
    # What an interrupted staging left unchecked is replaced, not added to: a resumed run fits where it did.
    free = min((answer or {}).get("free", needed + margin(needed)) + (answer or {}).get("unchecked", 0)
               for _, _, answer, _ in todo)
    what = ", ".join(f"{m.repo}@{m.revision[:12]}" for m, *_ in todo)
    problem = space_problem(free, needed, posixpath.dirname(posixpath.dirname(posixpath.dirname(todo[0][0].dir))), what)
    if problem:
        # Before a byte moves; the serving release is untouched.
        yield f"echo {shlex.quote(problem)} >&2; exit 1"
        return

    sources = share.sources if share else ()
    stages, drifts = [], []
    for model, manifest, answer, paths in todo:
        state = (answer or {}).get("state", "absent")
        size = sum(manifest.file(p).size for p in paths)
        origin = endpoint or "the Hub" if source == "hub" else "the controller"
        line = (f"Model {model.repo}@{model.revision[:12]} ({state}): "
                + (f"check and repair {len(paths)} changed files" if state == "drifted"
                   else f"stage {len(paths)} of {len(manifest.files)} files ({size / 1e6:.1f} MB)")
                + (f" from {len(sources)} peer hosts, then {origin}" if sources else f" from {origin}")
                + f" into {model.dir}")
        if state == "drifted":
            changed = answer.get("changed")
            drifts.append(found_drift(
                "model", f"model {model.repo}@{model.revision[:12]}",
                [f"{path}: size or time differs from when it was verified" for path in changed[:5]]
                + ([f"and {len(changed) - 5} more"] if len(changed) > 5 else [])
                if changed else ["its marker does not match the manifest"],
                "will check those files against the manifest and fetch again what fails, before any switch"))
        host.log(line, logger.warning if state == "drifted" else logger.info)
        if wants_diff():
            host.log_styled(line, fg="yellow")
        command = [LAYOUT.tool, "models", "stage", "--dir", model.dir, "--source", source]
        command += [f"--peer={url}" for url in peer_urls(model, sources)]
        if source == "hub":
            command += ["--python", python] if python else []
            command += ["--endpoint", endpoint] if endpoint else []
        elif not controller_dir:
            raise OperationError(f"{host.name}: model_source is controller but models_controller_dir is not set")
        elif not sources:  # with peers, only what they did not give is sent (``_stage_and_serve``)
            try:
                local = controller_copy(controller_dir, manifest, paths)
            except ModelError as error:
                raise OperationError(str(error)) from None
            partial = partial_of(model.dir)
            folders = sorted({posixpath.dirname(posixpath.join(partial, p)) for p in paths})
            yield shlex.join(["mkdir", "-p", *folders])
            for path in paths:
                yield FileUploadCommand(str(local[path]), posixpath.join(partial, path))
        stages.append((model, manifest, answer, size, command))
    if drifts:
        yield from drifts
        yield marked("model", textfile_dir)  # before the repair: one that fails leaves the mark
    yield HostFunctionCommand(_stage_and_serve, (stages, share, controller_dir), {})


def _stage_and_serve(state, host, connector_arguments, stages: list, share: Share | None,
                     controller_dir: str | None):
    """Run each stage command, saying how far it got; send what peers did not give; then serve; False fails."""
    def run(command: str, **extra):
        return host.run_shell_command(StringCommand(command), **{**connector_arguments, **extra})

    for model, manifest, answer, size, command in stages:
        what = f"{model.repo}@{model.revision[:12]}"
        ok, output = _staged_with_progress(host, run, model, manifest, answer, size, command)
        needs = next((json.loads(line[len(NEEDS):]) for line in output.stdout_lines if line.startswith(NEEDS)),
                     None) if output else None
        if not ok and needs is not None:  # the tool exits NEEDS_EXIT with it
            # Source "controller": peers gave the rest; the controller sends what they did not.
            host.log(f"Model {what}: {len(needs)} files ({human(sum(manifest.file(p).size for p in needs))}) "
                     f"came from no peer: the controller sends them", logger.warning)
            if not _uploaded(host, run, connector_arguments, controller_dir, model, manifest, needs):
                return False
            plain = [arg for arg in command if not arg.startswith("--peer=")]
            ok, output = run(shlex.join(plain), _stdin=manifest.text)
        if not ok:
            for line in (output.stderr_lines if output else [])[-10:] or [f"staging {what} failed"]:
                host.log_styled(line, fg="red", log_func=logger.error)
            return False
        for line in output.stdout_lines[-1:]:  # the tool's one line: what came from where
            host.log(line, logger.info)
    if share is None or not share.serves:
        return True
    ok, errors = serve(run, share, store_of(stages[0][0].dir), LAYOUT.lib, nested=True)
    if not ok:  # the run goes on: later rounds fetch from other peers, or the source
        host.log(f"cannot serve model files to peers on port {share.port}: {' '.join(errors)[-300:]}",
                 logger.warning)
    return True


def _staged_with_progress(host, run, model: StagedModel, manifest: Manifest, answer: dict | None, size: int,
                          command: list[str]):
    """The stage command's (ok, output), with a progress line every 15 s while it runs."""
    partial = partial_of(model.dir)
    already = (answer or {}).get("present", 0) if (answer or {}).get("state") == "partial" else 0
    progress = Progress(host, f"{model.repo}@{model.revision[:12]}", size)
    stage = gevent.spawn(run, shlex.join(command), _stdin=manifest.text)  # the tool checks every file against it
    while not stage.ready():
        stage.join(timeout=progress.every_s)
        if not stage.ready():
            sizes = run(f"du -sb {shlex.quote(partial)} 2>/dev/null | cut -f1")[1].stdout_lines
            progress.update(max(0, int(sizes[0]) - already) if sizes and sizes[0].isdigit() else 0)
    return stage.value if stage.successful() else (False, None)


def _uploaded(host, run, connector_arguments, controller_dir, model: StagedModel, manifest: Manifest,
              paths: list[str]) -> bool:
    """Send ``paths`` of the controller's copy into the revision's partial folder; False fails the host."""
    try:
        local = controller_copy(controller_dir, manifest, paths)
    except ModelError as error:
        host.log_styled(str(error), fg="red", log_func=logger.error)
        return False
    partial = partial_of(model.dir)
    run(shlex.join(["mkdir", "-p", *sorted({posixpath.dirname(posixpath.join(partial, p)) for p in paths})]))
    for path in paths:
        if not host.put_file(str(local[path]), posixpath.join(partial, path), **connector_arguments):
            host.log_styled(f"cannot send {local[path]} to {partial}", fg="red", log_func=logger.error)
            return False
    return True


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
