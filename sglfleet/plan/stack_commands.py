"""
The commands that build a stack on a host and collect old ones: pure functions of
the stack and what the host's read found (``sglfleet.facts.stack.StackHostState``).
The operations of ``sglfleet.operations.stack`` yield them; ``sglfleet.controller.stack_collection``
runs the collection again once a rollout is over.

**Example:**

.. code:: python

    stack = load_stack("dev").for_python("3.13")
    found = StackHostState(stack_id=stack.id)      # nothing built on the host yet
    build_commands(stack, found, gpu_less=True)    # the inputs' uploads, then the build under the stacks' lock
    collect_commands(stack, found, keep=1)         # []: no old stack to collect
"""

from __future__ import annotations

import shlex
from io import StringIO

from pyinfra.api import FileUploadCommand

from sglfleet import FILES

from sglfleet.artifacts.stacks import MARKER, Stack
from sglfleet.artifacts.temporaries import RUN_TOKEN
from sglfleet.facts.stack import StackHostState
from sglfleet.host.layout import LAYOUT
from sglfleet.host.stacks import PATCHED, SNAPSHOT, build_record_command, snapshot_check_command, snapshot_command

PROBE = FILES / "probe" / "verify_stack.py"


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
    wheel = f"{LAYOUT.wheelhouse}/{stack.uv.filename}"
    return f"python3 -c {shlex.quote(script)} {shlex.quote(wheel)} {shlex.quote(target)}"


def build_commands(stack: Stack, state: StackHostState, gpu_less: bool,
                   hashes: dict[str, str] | None = None, patched: list[str] | tuple = (PATCHED,),
                   backends: list[str] | tuple = ()) -> list:
    """
    Commands that build ``stack`` offline in a temporary folder, verify it, and rename it into place.

    + state: the host's StackState; nothing is built when the stack is verified
    + gpu_less: the probe skips what needs a GPU, and says so in the marker
    + hashes: ``{filename: sha256}`` for files an allowed unhashed lock has no hash for
    + patched: the files the patch step changes (as the wheel names them): another run's
      patches do not make its build look changed
    + backends: the transfer backends of the host's PD services: the probe imports each
    """
    if state.verified:
        return []
    build = f"{LAYOUT.stacks}/.build-{stack.id}"
    # The build's inputs go to a folder of this run's own, taken into the build
    # folder under the lock: a concurrent run never empties a build in progress.
    upload = f"{build}.upload-{RUN_TOKEN}"
    uv = LAYOUT.uv(stack.uv.version)
    commands: list = [f"rm -rf {shlex.quote(upload)} && mkdir -p {shlex.quote(upload)}"]
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
    probe += [f"--backend={backend}" for backend in backends]
    marker = f"{build}/{MARKER}"
    old = f"{LAYOUT.stacks}/.old-{stack.id}"
    # Hard links from uv's cache, which lives in the build folder (same file system) and
    # goes once the venv is built: the venv keeps the only links. A copy would hold the
    # unpacked stack twice at the peak (2 x 10 GB for cu130-sglang-0.5.23).
    install = [uv, "pip", "install", "--quiet", "--python", f"{build}/venv/bin/python",
               "--offline", "--no-index", "--find-links", LAYOUT.wheelhouse, "--require-hashes",
               "--overrides", f"{build}/overrides.txt", "--compile-bytecode", "--link-mode", "hardlink",
               "-r", f"{build}/requirements.txt"]
    if stack.no_deps:
        install.append("--no-deps")  # the lock lists every file; some packages come without their deps
    snapshot = f"{stack.path}/{SNAPSHOT}"
    q_build, q_upload, q_marker, q_old = (shlex.quote(p) for p in (build, upload, marker, old))
    q_path, q_snapshot = shlex.quote(stack.path), shlex.quote(snapshot)
    # Built and verified by another run while this one waited for the lock (and not
    # changed since). Not when this run builds it again because it drifted.
    done_meanwhile = "false" if state.built else (
        f"[ -f {shlex.quote(stack.marker)} ] && [ -f {q_snapshot} ] && "
        f"[ -z \"$({snapshot_check_command(stack.venv, stack.python, snapshot, patched)})\" ]")
    script = "\n".join([
        "set -e",
        f"if {done_meanwhile}; then rm -rf {q_upload}; exit 0; fi",
        # What a killed build left goes; this run's inputs take its place.
        f"rm -rf {q_build}; mv {q_upload} {q_build}",
        "started=$(date +%s.%N)",  # the build's time, for sglfleet_stack_build_duration_seconds
        # Nothing from the network, no user config: the wheelhouse is the only source.
        f"export UV_CACHE_DIR={q_build}/.uv-cache UV_NO_CONFIG=1 UV_PYTHON_DOWNLOADS=never",
        # Relocatable: scripts find their python relative to themselves, so the venv
        # stays valid after the rename from the build folder.
        f"{shlex.quote(uv)} venv --quiet --relocatable --python python{stack.python} {q_build}/venv",
        shlex.join(install),
        f"rm -rf {q_build}/.uv-cache",
        f"if ! {shlex.join(probe)} > {q_marker}.part; then cat {q_marker}.part >&2; "
        f"echo {shlex.quote(f'stack {stack.id} failed its verification probe (see above)')} >&2; exit 1; fi",
        f"mv {q_marker}.part {q_marker}",
        # What the venv holds now, to tell on every converge whether it changed (paths are relative).
        f"{snapshot_command(f'{build}/venv', stack.python)} > {q_build}/{SNAPSHOT}",
        build_record_command(build),
        f"if [ -e {q_path} ]; then rm -rf {q_old}; mv {q_path} {q_old}; fi",
        f"mv -T {q_build} {q_path}",
        f"rm -rf {q_old}",
    ])
    # One build or collection at a time on a host, whichever controller runs it.
    stacks, lock = shlex.quote(LAYOUT.stacks), shlex.quote(LAYOUT.stacks_lock)
    commands.append(f"mkdir -p {stacks} && flock {lock} sh -c {shlex.quote(script)}")
    return commands


def collected(stack: Stack, state: StackHostState, keep: int) -> list[str]:
    """Entries of /opt/sglfleet/stacks to remove (see ``collect_commands``)."""
    in_use = {stack.id, *state.releases.values()}  # every service's current and previous
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
    # A stack's compile caches and their archives go with it (GBs for a real model).
    paths = [path for s in doomed for path in (
        [f"{LAYOUT.stacks}/{s}"] if s.startswith(".") else
        [f"{LAYOUT.stacks}/{s}", LAYOUT.compile_cache(s), f"{LAYOUT.compile_archives}/{s}+"])]
    script = f"rm -rf -- {' '.join(shlex.quote(p) + ('*' if p.endswith('+') else '') for p in paths)}"
    if any(not s.startswith(".") for s in doomed):
        script += (
            f"\ncd {shlex.quote(LAYOUT.wheelhouse)} 2>/dev/null || exit 0; keep=$(mktemp); "
            f"cat {shlex.quote(LAYOUT.stacks)}/*/wheels.txt 2>/dev/null | sort -u > \"$keep\"; "
            f"ls -1 | grep '\\.whl$' | sort | comm -23 - \"$keep\" | xargs -r rm -f --; rm -f \"$keep\""
        )
    # Under the build lock: a build in progress is never collected halfway.
    return [f"flock {shlex.quote(LAYOUT.stacks_lock)} sh -c {shlex.quote(script)}"]
