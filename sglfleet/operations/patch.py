"""
Patch a Python file on a host: the patch sets of its stack, or the KimiK25 methods alone.

The host's exact bytes come over through a fact; the engines run here, on the
controller; the new bytes go back to a temporary file beside the target and
replace it with one rename.
"""

from __future__ import annotations

import hashlib
import shlex
from io import BytesIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, FunctionCommand, operation

from sglfleet.artifacts.patcher import PatchRefused, apply, load_patch
from sglfleet.artifacts.patchsets import PatchSet, apply_sets
from sglfleet.artifacts.temporaries import temporary_beside
from sglfleet.facts.files import FileBytesUnlessKnown
from sglfleet.facts.host import READ
from sglfleet.operations.output import show_diff, wants_diff
from sglfleet.controller.outcomes import fail



@operation()
def eagle3_methods(path: str, patch_path: str | None = None, done_digests: list[str] | tuple = (), source=READ):
    """
    Ensure the KimiK25 class in ``path`` has the EAGLE-3 delegation methods.

    Methods already in the class are left alone (sglang 0.5.10 and later has
    all three: no change). A file the engine refuses (missing, unparsable, no
    class or two, a conflicting definition) fails this host alone, with the
    reason, and is left as it was. Under ``--diff`` the change is printed as a
    unified diff, in a dry run too.

    + path: the host's ``sglang/srt/models/kimi_k25.py``
    + patch_path: the patch file on the controller (default
      ``files/patches/kimi_k25_eagle3.py``)
    + done_digests: sha256 of files known to need nothing (the stack's
      upstream file, patched); a host whose file has one of them is not read
    + source: ``FileBytesUnlessKnown``'s answer for ``path`` and ``done_digests``, already
      read; by default the operation reads it

    **Example:**

    .. code:: python

        patch.eagle3_methods(
            name="KimiK25 EAGLE-3 methods in the stack's sglang",
            path=f"{stack_dir}/venv/lib/python3.11/site-packages/sglang/srt/models/kimi_k25.py",
        )
    """
    the_patch = load_patch(patch_path)
    if source is READ:
        source = host.get_fact(FileBytesUnlessKnown, path=path, known=sorted(done_digests))
    if isinstance(source, str):
        host.noop(f"class {the_patch.target} in {path} has the methods (sha256 {source[:12]})")
        return
    try:
        if source is None:
            raise PatchRefused("the file does not exist; is the stack's sglang installed?")
        new = apply(source, the_patch)
    except PatchRefused as refusal:
        message = f"cannot patch {path}: {refusal}"
        if not state.is_executing:
            host.log_styled(f"will fail: {message}", fg="yellow", log_func=logger.warning)
        yield FunctionCommand(fail, (message,), {})
        return

    if new == source:
        host.noop(f"class {the_patch.target} in {path} has the methods")
        return

    if wants_diff():
        show_diff(f"Will patch {path} (class {the_patch.target})",
                  source.decode(errors="replace"), new.decode(errors="replace"))

    yield from _replace(path, source, new)


@operation()
def patch_sets(path: str, sets: list[PatchSet] | tuple = (), done_digests: list[str] | tuple = (), source=READ):
    """
    Ensure ``path`` is the package's file with the patch sets, in order, and no other sglfleet block.

    A set whose fix the file already has (upstream) leaves it alone; a set that
    was removed leaves nothing behind; no sets and no blocks: no change. A set
    the engine refuses (anchor missing or ambiguous, a conflict) fails this host
    alone, with one line that names the set and the reason, and the file is
    left as it was. Under ``--diff`` the change is printed as a unified diff
    titled with each set, in a dry run too.

    + path: the file on the host, e.g. the stack's ``sglang/srt/server_args.py``
    + sets: the sets for this file and the stack's sglang version
      (``sglfleet.artifacts.patchsets.for_file``), in order
    + done_digests: sha256 of files known to need nothing (the stack's
      upstream file, patched); a host whose file has one of them is not read
    + source: ``FileBytesUnlessKnown``'s answer for ``path`` and ``done_digests``, already
      read; by default the operation reads it

    **Example:**

    .. code:: python

        patch.patch_sets(
            name="Patch sets in server_args.py",
            path=f"{venv}/lib/python3.11/site-packages/sglang/srt/server_args.py",
            sets=for_file(load_sets(), "0.5.9", "sglang/srt/server_args.py"),
        )
    """
    names = ", ".join(s.name for s in sets) or "none"
    if source is READ:
        source = host.get_fact(FileBytesUnlessKnown, path=path, known=sorted(done_digests))
    if isinstance(source, str):
        host.noop(f"{path} has its patch sets ({names}; sha256 {source[:12]})")
        return
    if source is None and not sets:
        host.noop(f"{path} does not exist and no patch set is for it")
        return
    try:
        if source is None:
            raise PatchRefused("the file does not exist; is the stack's sglang installed?")
        new, outcomes = apply_sets(source, list(sets))
    except PatchRefused as refusal:
        message = f"cannot patch {path}: {refusal}"
        if not state.is_executing:
            host.log_styled(f"will fail: {message}", fg="yellow", log_func=logger.warning)
        yield FunctionCommand(fail, (message,), {})
        return

    done = ", ".join(f"{patch_set.name} ({outcome})" for patch_set, outcome in outcomes) or "none"
    if new == source:
        host.noop(f"{path} has its patch sets: {done}")
        return
    if wants_diff():
        show_diff(f"Will patch {path} with patch sets: {done}",
                  source.decode(errors="replace"), new.decode(errors="replace"))
    yield from _replace(path, source, new)


@operation()
def files_patched(files: list[dict]):
    """
    Ensure each file of the stack's sglang has its patch sets, in order, as ``patch_sets``
    one file after another would: one operation a host, not one a file (pyinfra walks the
    call stack for each). A set the engine refuses fails the host at that file; the files
    before it are patched, the file and those after it are left as they were.

    + files: each file's ``patch_sets`` arguments (``path``, ``sets``, ``done_digests``, ``source``)

    **Example:**

    .. code:: python

        patch.files_patched(name="Patch sets", files=[
            dict(path=f"{venv}/lib/python3.11/site-packages/sglang/srt/server_args.py",
                 sets=for_file(load_sets(), "0.5.9", "sglang/srt/server_args.py")),
        ])
    """
    for one in files:
        yield from patch_sets._inner(**one)


def _replace(path: str, source: bytes, new: bytes):
    """The commands that put ``new`` in place of ``source`` at ``path``, by one rename."""
    # This run's own temporary file: a concurrent run never renames a half-written one.
    temporary = temporary_beside(path)
    yield FileUploadCommand(BytesIO(new), temporary)
    check = f"{hashlib.sha256(source).hexdigest()}  {path}"
    done = f"{hashlib.sha256(new).hexdigest()}  {path}"
    q_path, q_temp = shlex.quote(path), shlex.quote(temporary)
    # Rename only over the bytes the patch was computed from, keeping owner and mode;
    # bytes another run already patched the same way are left as they are.
    yield (
        f"if printf %s {shlex.quote(check)} | sha256sum --check --status -; then "
        f"chown --reference={q_path} {q_temp} && chmod --reference={q_path} {q_temp} "
        f"&& mv -f {q_temp} {q_path}; "
        f"elif printf %s {shlex.quote(done)} | sha256sum --check --status -; then rm -f {q_temp}; "
        f"else rm -f {q_temp}; echo {shlex.quote(f'{path} changed while patching; re-run')} >&2; "
        "exit 1; fi"
    )
