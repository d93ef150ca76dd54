"""
Patch a Python file on a host with the class-body patch engine.

The host's exact bytes come over through a fact; the engine runs here, on the
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
from sglfleet.artifacts.temporaries import temporary_beside
from sglfleet.facts.files import FileBytesUnlessKnown
from sglfleet.facts.host import READ
from sglfleet.run.diffs import show_diff, wants_diff
from sglfleet.run.recording import fail



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
