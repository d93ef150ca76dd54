"""Stack operations: sync a host's wheelhouse, build the venv offline with uv, verify, collect.

The planning is split into pure functions of the stack and the host's
``StackState`` (``sync_commands``, ``build_commands``, ``collect_commands``);
the operation asks the fact once and yields what they return, so a converge
that changes nothing costs one remote command per host.

**Example:**

.. code:: python

    stack.installed(name="Install stack", stack=load_stack("dev"), gpu_less=True, keep=1)
"""

from __future__ import annotations

import shlex
from io import StringIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, operation

from sglfleet import FILES, wheelhouse
from sglfleet.diffs import report_drift, wants_diff
from sglfleet.facts.stack import StackHostState, StackState, WheelhouseFiles
from sglfleet.host.layout import LAYOUT
from sglfleet.host.stacks import SNAPSHOT, snapshot_command
from sglfleet.stacks import MARKER, Stack, StackError
from sglfleet.temporaries import RUN_TOKEN

PROBE = FILES / "probe" / "verify_stack.py"
q = shlex.quote


# Hosts whose stack this run builds again because it drifted: the process serving
# from it loaded the changed files at start, so the rollout restarts it behind its gate.
REBUILT: set[str] = set()


def sync_commands(stack: Stack, present: dict[str, str], local: dict[str, wheelhouse.Local]) -> list:
    """
    Commands that give the host every file of ``stack`` it lacks, each checked and renamed into place.

    + present: the host's wheelhouse, ``{filename: sha256}``
    + local: the controller's wheelhouse, ``wheelhouse.ensure(stack)``

    A transfer goes to ``<file>.part`` and is renamed only after its sha256
    matched: an interrupted sync leaves complete files (skipped next time) and
    at most one partial one (replaced).
    """
    missing = [f for f in stack.files if present.get(f.filename) != local[f.filename].sha256]
    if not missing:
        return []
    commands: list = [f"mkdir -p {LAYOUT.wheelhouse}"]
    for f in missing:
        final = f"{LAYOUT.wheelhouse}/{f.filename}"
        part = f"{final}.part"
        commands.append(FileUploadCommand(str(local[f.filename].path), part))
        commands.append(
            f"if echo {local[f.filename].sha256}'  '{q(part)} | sha256sum --check --status; "
            f"then mv -f {q(part)} {q(final)}; else rm -f {q(part)}; "
            f"echo {q(f'{f.filename} arrived corrupted (sha256 mismatch): run the deploy again')} >&2; exit 1; fi"
        )
    return commands


def uv_extract_command(stack: Stack) -> str:
    """Extract the uv binary from its wheel in the host's wheelhouse, with the host's python3."""
    target = LAYOUT.uv(stack.uv.version)
    script = (
        "import os, sys, zipfile\n"
        "wheel, target = sys.argv[1], sys.argv[2]\n"
        "with zipfile.ZipFile(wheel) as z:\n"
        "    member = next(n for n in z.namelist() if n.endswith('.data/scripts/uv'))\n"
        "    os.makedirs(os.path.dirname(target), exist_ok=True)\n"
        "    with open(target + '.part', 'wb') as out:\n"
        "        out.write(z.read(member))\n"
        "os.chmod(target + '.part', 0o755)\n"
        "os.replace(target + '.part', target)\n"
    )
    return f"python3 -c {q(script)} {q(f'{LAYOUT.wheelhouse}/{stack.uv.filename}')} {q(target)}"


def build_commands(stack: Stack, state: StackHostState, gpu_less: bool,
                   hashes: dict[str, str] | None = None) -> list:
    """
    Commands that build ``stack`` offline in a temporary folder, verify it, and rename it into place.

    + state: the host's StackState; nothing is built when the stack is verified
    + gpu_less: the probe skips what needs a GPU, and says so in the marker
    + hashes: ``{filename: sha256}`` for files an allowed unhashed lock has no hash for
    """
    if state.verified:
        return []
    build = f"{LAYOUT.stacks}/.build-{stack.id}"
    # The build's inputs go to a folder of this run's own, taken into the build
    # folder under the lock: a concurrent run never empties a build in progress.
    upload = f"{build}.upload-{RUN_TOKEN}"
    uv = LAYOUT.uv(stack.uv.version)
    commands: list = [f"rm -rf {q(upload)} && mkdir -p {q(upload)}"]
    if not state.uv:
        commands.append(uv_extract_command(stack))
    commands += [
        FileUploadCommand(StringIO(stack.requirements(hashes)), f"{upload}/requirements.txt"),
        FileUploadCommand(StringIO("\n".join(stack.overrides) + "\n"), f"{upload}/overrides.txt"),
        FileUploadCommand(StringIO("\n".join(f.filename for f in stack.files) + "\n"), f"{upload}/wheels.txt"),
        FileUploadCommand(str(PROBE), f"{upload}/verify_stack.py"),
    ]
    probe = [f"{build}/venv/bin/python", f"{build}/verify_stack.py", "--stack-id", stack.id,
             "--python", stack.python]
    probe += ["--sglang", stack.sglang_version] if stack.sglang_version else []
    probe += ["--cuda", stack.cuda] if stack.cuda else []
    probe += ["--compute-caps", ",".join(stack.compute_caps)] if stack.compute_caps else []
    # The installed versions are checked against the lock's file names; bootstrap wheels stay out of the venv.
    probe += ["--wheels", f"{build}/wheels.txt", *(f"--not-installed={name}" for name in stack.bootstrap)]
    probe += ["--gpu-less"] if gpu_less else []
    marker = f"{build}/{MARKER}"
    old = f"{LAYOUT.stacks}/.old-{stack.id}"
    install = [uv, "pip", "install", "--quiet", "--python", f"{build}/venv/bin/python",
               "--offline", "--no-index", "--find-links", LAYOUT.wheelhouse, "--require-hashes",
               "--overrides", f"{build}/overrides.txt", "--compile-bytecode", "--link-mode", "copy",
               "-r", f"{build}/requirements.txt"]
    if stack.no_deps:
        install.append("--no-deps")  # the lock lists every file; some packages come without their deps
    snapshot = f"{stack.path}/{SNAPSHOT}"
    script = "\n".join([
        "set -e",
        # Built and verified by another run while this one waited for the lock (and not
        # changed since: a drifted stack is built again).
        f"if [ -f {q(stack.marker)} ] && [ -f {q(snapshot)} ] && "
        f"{snapshot_command(stack.venv)} | cmp -s {q(snapshot)} -; then rm -rf {q(upload)}; exit 0; fi",
        # What a killed build left goes; this run's inputs take its place.
        f"rm -rf {q(build)}; mv {q(upload)} {q(build)}",
        # Nothing from the network, no user config: the wheelhouse is the only source.
        f"export UV_CACHE_DIR={q(build)}/.uv-cache UV_NO_CONFIG=1 UV_PYTHON_DOWNLOADS=never",
        # Relocatable: scripts find their python relative to themselves, so the venv
        # stays valid after the rename from the build folder.
        f"{q(uv)} venv --quiet --relocatable --python python{stack.python} {q(build)}/venv",
        shlex.join(install),
        f"rm -rf {q(build)}/.uv-cache",
        f"if ! {shlex.join(probe)} > {q(marker)}.part; then cat {q(marker)}.part >&2; "
        f"echo {q(f'stack {stack.id} failed its verification probe (see above)')} >&2; exit 1; fi",
        f"mv {q(marker)}.part {q(marker)}",
        # What the venv holds now, to tell on every converge whether it changed (paths are relative).
        f"{snapshot_command(f'{build}/venv')} > {q(build)}/{SNAPSHOT}",
        f"if [ -e {q(stack.path)} ]; then rm -rf {q(old)}; mv {q(stack.path)} {q(old)}; fi",
        f"mv -T {q(build)} {q(stack.path)}",
        f"rm -rf {q(old)}",
    ])
    # One build or collection at a time on a host, whichever controller runs it.
    commands.append(f"mkdir -p {LAYOUT.stacks} && flock {LAYOUT.stacks_lock} sh -c {q(script)}")
    return commands


def collected(stack: Stack, state: StackHostState, keep: int) -> list[str]:
    """Entries of /opt/sglfleet/stacks to remove (see ``collect_commands``)."""
    in_use = {stack.id, state.releases.get("current"), state.releases.get("previous")}
    others = [s for s in state.stacks if not s.startswith(".") and s not in in_use]
    return others[keep:] + [s for s in state.stale if not s.endswith(stack.id)]


def collect_commands(stack: Stack, state: StackHostState, keep: int) -> list:
    """
    Commands that remove old stacks: all but ``stack``, those of the current and
    previous releases, and the ``keep`` newest others; then the wheels no kept
    stack lists, and leftovers of killed builds over an hour old.
    """
    doomed = collected(stack, state, keep)
    if not doomed:
        return []
    script = f"rm -rf -- {' '.join(q(f'{LAYOUT.stacks}/{s}') for s in doomed)}"
    if any(not s.startswith(".") for s in doomed):
        script += (
            f"\ncd {LAYOUT.wheelhouse} 2>/dev/null || exit 0; keep=$(mktemp); "
            f"cat {LAYOUT.stacks}/*/wheels.txt 2>/dev/null | sort -u > \"$keep\"; "
            f"ls -1 | grep '\\.whl$' | sort | comm -23 - \"$keep\" | xargs -r rm -f --; rm -f \"$keep\""
        )
    # Under the build lock: a build in progress is never collected halfway.
    return [f"flock {LAYOUT.stacks_lock} sh -c {q(script)}"]


@operation()
def installed(stack: Stack, gpu_less: bool = False, keep: int = 1, full_check: bool = False):
    """
    Ensure ``stack`` is built, verified, unchanged since, and in place on the host,
    and old stacks are collected. A stack that changed on the host (its venv
    against the snapshot taken at build time; with ``full_check``, every file
    against its wheel's RECORD) is built again from its lock.

    + stack: a loaded, complete stack (``load_stack``)
    + gpu_less: the host has no GPU; the probe skips the GPU checks and records it
    + keep: stacks kept besides this one and those of the current and previous releases
    + full_check: also read every installed file against its RECORD hash (slow: on request)

    **Example:**

    .. code:: python

        stack.installed(name="Stack dev", stack=load_stack("dev"), gpu_less=True)
    """
    state = host.get_fact(StackState, stack_id=stack.id, python=stack.python, uv_version=stack.uv.version,
                          full=full_check)
    commands = []
    hashes = None
    if state.built and state.drift:
        report_drift(f"stack {stack.id}", state.drift, "will build it again from its lock, then restart "
                     "the release that serves from it behind its gate")
        REBUILT.add(host.name)
    if not state.verified:
        present = state.wheels if state.wheels is not None else host.get_fact(WheelhouseFiles)
        try:
            # Fetched once for all hosts; bytes that differ from the lock stop the
            # run here, while planning, before any host is changed.
            local = wheelhouse.ensure(stack)
        except StackError as e:
            raise OperationError(str(e)) from None
        hashes = {name: entry.sha256 for name, entry in local.items()}
        sync = sync_commands(stack, present, local)
        commands += sync + build_commands(stack, state, gpu_less, hashes)
        uploads = [c for c in sync if isinstance(c, FileUploadCommand)]
        size = sum(local[c.dest.rsplit("/", 1)[1].removesuffix(".part")].size for c in uploads)
        summary = [f"  + sync {len(uploads)} wheels ({size / 1e6:.1f} MB)", f"  + build and verify {stack.path}"]
    else:
        summary = []
    commands += collect_commands(stack, state, keep)
    if collected(stack, state, keep):
        summary.append(f"  - collect {', '.join(collected(stack, state, keep))}")
    if summary and wants_diff():
        # No file diff fits a venv; say what would change instead.
        host.log_styled("\n".join([f"Stack {stack.id}:", *summary]), fg="yellow")
    if not commands:
        host.noop(f"stack {stack.id} is built and verified, nothing to collect")
    yield from commands


@operation()
def fits(problems: list[str]):
    """
    Fail the host when preflight found problems, printing each; nothing otherwise.

    + problems: one line each, from ``sglfleet.preflight.check``

    **Example:**

    .. code:: python

        stack.fits(name="Preflight", problems=check(host.name, stack, gpus, ...))
    """
    if not problems:
        host.noop("preflight passed")
        return
    yield " ; ".join([*(f"echo {q(p)} >&2" for p in problems), "exit 1"])
