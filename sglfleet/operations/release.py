"""
Operations on releases: stage one, collect old ones, switch a host to one
behind its gate, and switch back.

A release is a directory ``/opt/sglfleet/releases/<release-id>/`` whose id is a
content hash, so a staged release is never changed: staging is a no-op when the
directory exists. Switching happens on the host, under its lock, through
``/opt/sglfleet/bin/sglfleet-release`` (files/host/sglfleet_release.py).
"""

from __future__ import annotations

import difflib
import shlex
from io import StringIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, FunctionCommand, OperationError, StringCommand, operation

from sglfleet.facts.files import FileBytes
from sglfleet.facts.release import ROOT, ReleaseState

RELEASE_TOOL = f"{ROOT}/bin/sglfleet-release"


@operation()
def staged(release_id: str, files: dict[str, tuple[str, int]], diff_against: str = "launch"):
    """
    Stage a release: write its files into a temporary directory, then rename it
    into ``/opt/sglfleet/releases/<release_id>``.

    + release_id: the content hash that names the release
    + files: file name -> (text, mode) for each file of the release
    + diff_against: the file whose change from the current release ``--diff`` shows

    **Example:**

    .. code:: python

        staged(
            name="Stage the release",
            release_id="3f2a9c1d0b7e6a55",
            files={"launch": (script, 0o755), "release.json": (meta, 0o644)},
        )
    """
    releases = host.get_fact(ReleaseState)
    if release_id in releases["releases"]:
        host.noop(f"release {release_id} is already staged")
        return

    if state.config.DIFF:
        current = releases["current"]
        old = b""
        if current:
            old = host.get_fact(FileBytes, path=f"{ROOT}/releases/{current}/{diff_against}") or b""
        new = files[diff_against][0]
        host.log(f"Will stage release {release_id} (serving now: {current or 'none'})", logger.info)
        for line in difflib.unified_diff(
            old.decode(errors="replace").splitlines(),
            new.splitlines(),
            f"releases/{current}/{diff_against}" if current else "/dev/null",
            f"releases/{release_id}/{diff_against}",
            lineterm="",
        ):
            logger.info("    %s", line)

    temporary = f"{ROOT}/releases/.{release_id}.partial"
    yield StringCommand("rm", "-rf", temporary, "&&", "mkdir", "-p", temporary)
    for name, (text, mode) in sorted(files.items()):
        yield FileUploadCommand(StringIO(text), f"{temporary}/{name}")
        yield StringCommand("chmod", f"{mode:o}", f"{temporary}/{name}")
    yield StringCommand("mv", "-T", temporary, f"{ROOT}/releases/{release_id}")


@operation()
def collected(keep: int):
    """
    Remove old releases, keeping the current, the previous and ``keep`` more,
    newest first.

    + keep: how many releases to keep besides the current and the previous

    **Example:**

    .. code:: python

        collected(name="Collect old releases", keep=3)
    """
    releases = host.get_fact(ReleaseState)
    pinned = {releases["current"], releases["previous"]}
    # Release ids are hashes, so age comes from the directories' mtimes on the host.
    candidates = [r for r in releases["releases"] if r not in pinned]
    if len(candidates) <= keep:
        host.noop(f"{len(candidates)} old releases, keeping up to {keep}")
        return
    paths = " ".join(shlex.quote(f"{ROOT}/releases/{r}") for r in candidates)
    yield f"ls -1dt {paths} | tail -n +{keep + 1} | xargs -r rm -rf --"


@operation(is_idempotent=False)
def activated(
    release_id: str,
    wave_name: str,
    earlier_wave_hosts: list[str],
    gate_args: list[str],
):
    """
    Switch the host to ``release_id`` behind its gate, unless it already serves it.

    The switch, the restart, the gate and any rollback run on the host under its
    lock. The wave starts only when every host of the earlier waves passed.

    + release_id: the staged release to serve
    + wave_name: the wave this host belongs to, for messages
    + earlier_wave_hosts: hosts that must have passed before this one may switch
    + gate_args: arguments for ``sglfleet-release`` (warm-up budget, prompt, thresholds)

    **Example:**

    .. code:: python

        activated(
            name="Switch to the new release",
            release_id="3f2a9c1d0b7e6a55",
            wave_name="wave1",
            earlier_wave_hosts=["node1"],
            gate_args=["--warmup-s", "1800"],
        )
    """
    releases = host.get_fact(ReleaseState)
    serving = releases["current"] == release_id and releases["active_state"] == "active"
    if serving:
        host.noop(f"{wave_name}: already serving release {release_id}")
        return

    host.log(
        f"{wave_name}: will switch {releases['current'] or 'nothing'} -> {release_id} and gate",
        logger.info,
    )
    yield FunctionCommand(_wave_may_start, (wave_name, earlier_wave_hosts), {})
    yield StringCommand(RELEASE_TOOL, *gate_args, "activate", release_id)


@operation(is_idempotent=False)
def rolled_back(gate_args: list[str]):
    """
    Switch the host back to its previous release behind the same gate.

    + gate_args: arguments for ``sglfleet-release`` (warm-up budget, prompt, thresholds)

    **Example:**

    .. code:: python

        rolled_back(name="Back to the previous release", gate_args=["--warmup-s", "1800"])
    """
    releases = host.get_fact(ReleaseState)
    if not releases["previous"]:
        raise OperationError(f"{host.name}: no previous release to roll back to")
    host.log(f"will switch {releases['current']} -> {releases['previous']} and gate", logger.info)
    yield StringCommand(RELEASE_TOOL, *gate_args, "rollback")


def _wave_may_start(state, host, wave_name, earlier_wave_hosts):
    """Fail this host, changing nothing, when a host of an earlier wave did not pass."""
    failed = sorted(h.name for h in state.failed_hosts if h.name in set(earlier_wave_hosts))
    if failed:
        host.log_styled(
            f"{wave_name} not started: {', '.join(failed)} of an earlier wave did not pass",
            fg="red",
            log_func=logger.error,
        )
        return False
    return True
