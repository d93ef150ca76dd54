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
import math
import shlex
from dataclasses import dataclass
from io import StringIO

import gevent
from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand, operation

from sglfleet import router
from sglfleet.facts.files import FileBytes
from sglfleet.facts.release import ROOT, ReleaseState
from sglfleet.temporaries import RUN_TOKEN

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
    current = releases["current"]
    # Show what changes for the service, also when the release was staged by an earlier run.
    if state.config.DIFF and not state.is_executing and current != release_id:
        old = b""
        if current:
            old = host.get_fact(FileBytes, path=f"{ROOT}/releases/{current}/{diff_against}") or b""
        host.log(f"Release {release_id} differs from the serving {current or 'none'}:", logger.info)
        for line in difflib.unified_diff(
            old.decode(errors="replace").splitlines(),
            files[diff_against][0].splitlines(),
            f"releases/{current}/{diff_against}" if current else "/dev/null",
            f"releases/{release_id}/{diff_against}",
            lineterm="",
        ):
            logger.info("    %s", line)

    if release_id in releases["releases"]:
        host.noop(f"release {release_id} is already staged")
        return

    # One folder per run: two runs staging the same release at once never share it.
    temporary = f"{ROOT}/releases/.{release_id}.partial-{RUN_TOKEN}"
    final = f"{ROOT}/releases/{release_id}"
    # Runs killed while staging leave their folders; clear those over an hour old.
    yield StringCommand("find", f"{ROOT}/releases", "-maxdepth", "1", "-name", "'.*.partial-*'",
                        "-mmin", "+60", "-exec", "rm", "-rf", "{}", "+", "2>/dev/null", ";",
                        "mkdir", "-p", temporary)
    for name, (text, mode) in sorted(files.items()):
        yield FileUploadCommand(StringIO(text), f"{temporary}/{name}")
        yield StringCommand("chmod", f"{mode:o}", f"{temporary}/{name}")
    # A release is immutable: when another run renamed it into place first, keep that one.
    yield StringCommand(
        "mv", "-T", temporary, final, "2>/dev/null", "||",
        "{", "rm", "-rf", temporary, "&&", "test", "-f", f"{final}/release.json", ";", "}",
    )


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


@dataclass(frozen=True)
class WaveStep:
    """
    Where one host stands in one wave of a rollout.

    + wave: the wave's name, for messages
    + earlier_hosts: hosts of the earlier waves, which must all have passed
    + gate_args: arguments for ``sglfleet-release`` (warm-up budget, prompt, thresholds)
    + router_url: the sglang-router in front of the fleet, if any
    + worker_url: this host's URL as the router knows it
    + timeout_s: how long the controller waits for the host's answer before it
      reports the host lost (a link that never comes back); None waits forever
    + lock_wait_s: how long to wait for another run that holds the host's lock
    """

    wave: str
    earlier_hosts: tuple[str, ...]
    gate_args: tuple[str, ...]
    router_url: str | None = None
    worker_url: str | None = None
    timeout_s: float | None = None
    lock_wait_s: float = 300


@operation(is_idempotent=False)
def activated(release_id: str, step: WaveStep):
    """
    Switch the host to ``release_id`` behind its gate, unless it already serves it.

    The switch, the restart, the gate and any rollback run on the host under its
    lock. The wave starts only when every host of the earlier waves passed. With
    a router, the host leaves it before the switch and rejoins once it serves
    again (the new release, or the old one after a rollback).

    + release_id: the staged release to serve
    + step: the host's place in this wave

    **Example:**

    .. code:: python

        activated(
            name="Switch to the new release",
            release_id="3f2a9c1d0b7e6a55",
            step=WaveStep("wave1", ("node1",), ("--warmup-s", "1800")),
        )
    """
    releases = host.get_fact(ReleaseState)
    if releases["busy"] and state.is_executing:
        # Another run (or one whose controller died) is switching or gating this
        # host: what it serves is not known until that gate ends. Wait for it,
        # then decide on what it left.
        host.log(f"{step.wave}: another sglfleet run holds this host's lock; waiting for it", logger.warning)
        timeout = math.ceil(step.timeout_s) if step.timeout_s else None  # a link that never comes back
        releases = host.get_fact(ReleaseState, wait_lock_s=step.lock_wait_s, _timeout=timeout, _ignore_errors=True)
        if not releases:
            yield FunctionCommand(_log_error, (f"{step.wave}: no answer within {timeout} s while waiting for "
                                               f"another run's lock; check {host.name}, then run again",), {})
            return
    if releases["busy"]:
        # Only planning, or the lock is still held: the host tool waits for it
        # in turn, then switches only if still needed.
        host.log(f"{step.wave}: another sglfleet run holds this host's lock; will wait for it, "
                 f"then serve {release_id}", logger.warning)
    elif releases["current"] == release_id and releases["active_state"] == "active":
        host.noop(f"{step.wave}: already serving release {release_id}")
        return
    else:
        host.log(
            f"{step.wave}: will switch {releases['current'] or 'nothing'} -> {release_id} and gate",
            logger.info,
        )
    yield _switch(step, "activate", release_id)


@operation(is_idempotent=False)
def rolled_back(step: WaveStep):
    """
    Switch the host back to its previous release behind the same gate.

    + step: the host's place in this wave

    **Example:**

    .. code:: python

        rolled_back(
            name="Back to the previous release",
            step=WaveStep("canary", (), ("--warmup-s", "1800")),
        )
    """
    releases = host.get_fact(ReleaseState)
    if not releases["previous"]:
        yield FunctionCommand(_log_error, (f"{step.wave}: no previous release to roll back to",), {})
        return
    host.log(
        f"{step.wave}: will switch {releases['current']} -> {releases['previous']} and gate",
        logger.info,
    )
    yield _switch(step, "rollback")


class HostFunctionCommand(FunctionCommand):
    """
    A ``FunctionCommand`` whose function also gets the operation's connector
    arguments, so that what it runs on the host goes through pyinfra's sudo
    (``_sudo``, ``_sudo_user``, ...) as the operation's other commands do.
    """

    def execute(self, state, host, connector_arguments):
        return self.function(state, host, connector_arguments, *self.args, **self.kwargs)


def _switch(step: WaveStep, *tool_args: str) -> FunctionCommand:
    # The tool's exit status tells a rolled-back host (1, serving) from a down one.
    command = StringCommand(RELEASE_TOOL, *step.gate_args, *tool_args, "; echo sglfleet-exit=$? >&2")
    return HostFunctionCommand(_switch_in_wave, (step, command), {})


def _switch_in_wave(state, host, connector_arguments, step: WaveStep, command: StringCommand):
    """
    Run ``command`` (the host-side switch and gate) once every earlier wave
    passed, keeping the router in step. Returns False to fail this host.
    """
    failed = sorted(h.name for h in state.failed_hosts if h.name in set(step.earlier_hosts))
    if failed:
        return _log_error(
            state, host, f"{step.wave} not started: {', '.join(failed)} of an earlier wave did not pass"
        )

    if step.router_url:
        try:
            router.drain(step.router_url, step.worker_url)
        except router.RouterError as error:
            return _log_error(state, host, f"{step.wave}: not switched, {error}")

    lost = (f"lost the connection during the switch; if {host.name} is up it finishes the "
            f"switch, gate and any rollback on its own: check it, then run again")
    try:
        # Around the whole call: a link cut before the channel opens blocks in paramiko too.
        with gevent.Timeout(step.timeout_s, TimeoutError):
            connected, output = host.run_shell_command(command, **connector_arguments)
    except TimeoutError:  # a link that never came back
        return _log_error(state, host, f"{lost} (no answer within {step.timeout_s:g} s)")
    except Exception as error:  # the session died under paramiko (power cut, reset link)
        return _log_error(state, host, f"{lost} ({type(error).__name__}: {error})")
    lines = output.stderr_lines
    status = lines.pop().partition("=")[2] if lines and lines[-1].startswith("sglfleet-exit=") else ""
    passed = connected and status == "0"
    for line in () if passed else lines or [lost]:
        _log_error(state, host, line)

    # 1: the gate failed and the host serves its earlier release again; rejoin either way.
    if step.router_url and status in ("0", "1"):
        try:
            router.join(step.router_url, step.worker_url)
        except router.RouterError as error:
            return _log_error(state, host, f"{step.wave}: {error}")
    return passed


def _log_error(state, host, message):
    """Log ``message`` as this host's error; returns False, so it also fails the host."""
    host.log_styled(message, fg="red", log_func=logger.error)
    return False
