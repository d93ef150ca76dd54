"""
Operations on releases: stage one (and repair it), switch a host to one behind
its gate and bake, and switch back. Old releases are collected by the host tool
after each switch (``--keep``), so a quiet converge needs no round trip for them.

A release is a folder ``releases/<release-id>/`` whose id is a content hash of
its files, so staging an unchanged configuration changes nothing, and a file
that no longer matches its id was changed on the host and is put back.
Switching happens on the host, under its lock, through the host tool
(``sglfleet-release``, ``sglfleet.host``).
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
from dataclasses import dataclass
from io import StringIO

import gevent
from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand, operation

from sglfleet.run import router, recording, summary
from sglfleet.run.diffs import report_drift, show_diff, wants_diff
from sglfleet.facts.files import FileBytes
from sglfleet.facts.host import READ
from sglfleet.facts.release import ReleaseHostState, ReleaseState
from sglfleet.host.bake import describe
from sglfleet.host.layout import LAYOUT, STALE_MINUTES
from sglfleet.host.protocol import BAKE_FAILED, PASSED, ROLLED_BACK, results as tool_results
from sglfleet.host.textfile import DEFAULT_DIR as TEXTFILE_DIR
from sglfleet.operations.remote import HostFunctionCommand
from sglfleet.plan.release import Release
from sglfleet.artifacts.temporaries import RUN_TOKEN, temporary_beside

def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@operation()
def staged(release: Release, diff_against: str = "launch.args", found=READ):
    """
    Stage a release: its files into a temporary folder, renamed into
    ``releases/<release_id>``; or, when it is staged, put back any file that
    no longer matches the release's id, and refresh its gate settings.

    + release: the rendered release (``sglfleet.plan.release.render_release``)
    + diff_against: the file whose change from the serving release ``--diff`` shows
    + found: ``ReleaseState``'s answer with this release's files, already read; by default the operation reads it

    **Example:**

    .. code:: python

        staged(name="Stage the release", release=render_release(config, stack_id, patch))
    """
    if found is READ:
        found = host.get_fact(ReleaseState, release_id=release.release_id)
    if found is None:
        return  # the fact failed, and with it the host
    current = found.current
    if wants_diff() and current != release.release_id:
        old, stack = b"", ""
        if current:
            old = host.get_fact(FileBytes, path=LAYOUT.release(current, diff_against)) or b""
            stack = _stack_change(current, release.stack_id)
        show_diff(f"Release {release.release_id} differs from the serving {current or 'none'}{stack}:",
                  old.decode(errors="replace"), release.files[diff_against][0])

    final = LAYOUT.release(release.release_id)
    if found.files is None:
        yield from _stage(release, final)
        return

    drifted = sorted(name for name, (text, _) in release.files.items() if found.files.get(name) != _sha256(text))
    settings = sorted(name for name, (text, _) in release.settings.items()
                      if found.files.get(name) != _sha256(text))
    if not drifted and not settings:
        host.noop(f"release {release.release_id} is staged and matches its id")
        return
    if drifted:
        serving = found.serving == release.release_id
        report_drift(f"release {release.release_id}", [f"{name} no longer matches the release's id" for name in drifted],
                     "will put back the controller's rendering"
                     + (" (the running process loaded it at start: no restart)" if serving else ""))
    for name in drifted + settings:
        text, mode = {**release.files, **release.settings}[name]
        yield from _write(f"{final}/{name}", text, mode)


def _stack_change(current: str, stack_id: str) -> str:
    """`` (stack A -> B)`` when the serving release runs another stack than ``stack_id``, else "".
    An upgrade changes no launch flag by itself: the diff of the flags would not show it."""
    try:
        old = json.loads(host.get_fact(FileBytes, path=LAYOUT.release(current, "release.json")) or b"{}").get("stack")
    except ValueError:
        return ""
    return f" (stack {old} -> {stack_id})" if old and old != stack_id else ""


def _write(path: str, text: str, mode: int):
    temporary = temporary_beside(path)
    yield FileUploadCommand(StringIO(text), temporary)
    yield f"chmod {mode:o} {shlex.quote(temporary)} && mv -f {shlex.quote(temporary)} {shlex.quote(path)}"


def _stage(release: Release, final: str):
    # One folder per run: two runs staging the same release at once never share it.
    temporary = f"{LAYOUT.releases}/.{release.release_id}.partial-{RUN_TOKEN}"
    # Runs killed while staging leave their folders; clear those over an hour old.
    yield (f"find {shlex.quote(LAYOUT.releases)} -maxdepth 1 -name '.*.partial-*' -mmin +{STALE_MINUTES} "
           f"-exec rm -rf {{}} + 2>/dev/null; mkdir -p {shlex.quote(temporary)}")
    for name, (text, mode) in sorted({**release.files, **release.settings}.items()):
        yield FileUploadCommand(StringIO(text), f"{temporary}/{name}")
        yield f"chmod {mode:o} {shlex.quote(f'{temporary}/{name}')}"
    # A release is immutable: when another run renamed it into place first, keep that one.
    yield (f"mv -T {shlex.quote(temporary)} {shlex.quote(final)} 2>/dev/null || "
           f"{{ rm -rf {shlex.quote(temporary)} && test -f {shlex.quote(f'{final}/release.json')}; }}")


@dataclass(frozen=True)
class WaveStep:
    """
    Where one host stands in one batch of a rollout.

    + label: the batch's name in messages: its wave (``"wave1"``), or with
      ``rollout_serial``, ``"wave1 batch 3"``
    + hosts: the hosts of this batch
    + earlier: ``(label, hosts)`` of each earlier batch of this run, in order
    + max_fail_percentage: an earlier batch with more failed hosts (in %) stops this one
    + bake_s: how long the batch bakes once its hosts pass their start-up gates (0: no bake)
    + router_url: the sglang-router in front of the fleet, if any
    + worker_url: this host's URL as the router knows it
    + timeout_s: how long the controller waits for the host's answer to a switch
      before it reports the host lost (a link that never comes back); None waits forever
    + lock_wait_s: how long to wait for another run that holds the host's lock
    + releases_keep: once switched, old releases kept besides the current and the previous
    + textfile_dir: where the host tool writes ``sglfleet.prom`` for node_exporter
    """

    label: str
    hosts: tuple[str, ...] = ()
    earlier: tuple[tuple[str, tuple[str, ...]], ...] = ()
    max_fail_percentage: float = 0.0
    bake_s: float = 0.0
    router_url: str | None = None
    worker_url: str | None = None
    timeout_s: float | None = None
    lock_wait_s: float = 300
    releases_keep: int = 3
    textfile_dir: str = TEXTFILE_DIR


def _baked(verdict: dict) -> bool:
    return bool((verdict.get("bake") or {}).get("passed"))


@operation(is_idempotent=False)
def activated(release_id: str, step: WaveStep, found=READ, rebuilt: bool = False):
    """
    Make the host serve ``release_id`` behind its start-up gate and bake, unless it does.

    The switch, the restart, the gate and any rollback run on the host under its
    lock. The wave starts only when every host of the earlier waves passed. With
    a router, the host leaves it before the switch and rejoins once it serves
    again (the new release, or the old one after a rollback), before the bake,
    which judges the traffic the router sends.

    + release_id: the staged release to serve
    + step: the host's place in this wave
    + found: ``ReleaseState``'s answer, already read; by default the operation reads it. A host
      another run holds is read again, after waiting for its lock
    + rebuilt: this run builds the host's stack again (it drifted): the process loaded the drifted
      files at start, so it restarts behind its gate even where it serves ``release_id``

    **Example:**

    .. code:: python

        activated(
            name="Switch to the new release",
            release_id="3f2a9c1d0b7e6a55",
            step=WaveStep("wave1", (("canary", ("node1",)),), bake_s=600),
        )
    """
    if found is READ:
        found = host.get_fact(ReleaseState)
    if found is None:
        return  # the fact failed, and with it the host
    restart = rebuilt
    if found.busy and state.is_executing:
        # Another run (or one whose controller died) is switching, gating or baking
        # this host: what it serves is not known until that ends. Wait for it,
        # then decide on what it left.
        host.log(f"{step.label}: another sglfleet run holds this host's lock; waiting for it", logger.warning)
        timeout = math.ceil(step.timeout_s) if step.timeout_s else None  # a link that never comes back
        found = host.get_fact(ReleaseState, wait_lock_s=step.lock_wait_s, _timeout=timeout, _ignore_errors=True)
        if found is None:
            yield FunctionCommand(_log_error, (f"{step.label}: no answer within {timeout} s while waiting for "
                                               f"another run's lock; check {host.name}, then run again",), {})
            return
    action = decide(found, release_id, restart, step.bake_s)
    if action == "relink":
        # A hand moved current; the process still serves what was declared: put the link back.
        report_drift(f"{LAYOUT.current}", [f"points at {found.current or 'nothing'}, the process serves "
                                           f"{release_id}"], "will point it back (no restart)")
        yield HostFunctionCommand(_relink, (step, release_id), {})
        return
    if action == "noop":
        host.noop(f"{step.label}: already serving release {release_id}")
        return
    if action == "bake":
        # A run ended (or was cut) between the gate and the end of the bake.
        host.log(f"{step.label}: serves {release_id}, which has not passed its bake yet: will bake it",
                 logger.info)
        yield HostFunctionCommand(_bake_in_wave, (step, release_id), {})
        return
    bake = f" and bake {step.bake_s:g} s" if step.bake_s else ""
    if action == "wait":
        # Only planning, or the lock is still held: the host tool waits for it
        # in turn, then switches only if still needed.
        host.log(f"{step.label}: another sglfleet run holds this host's lock; will wait for it, "
                 f"then serve {release_id}", logger.warning)
    elif action == "restart":
        host.log(f"{step.label}: serves {release_id} from a stack this run rebuilt: will restart it behind "
                 f"its gate{bake}", logger.warning)
    else:
        if found.current == release_id and found.serving != release_id:
            report_drift("the service", [f"current is {release_id}, the process serves "
                                          f"{found.serving or 'nothing'}"], "will switch it behind the gate")
        host.log(f"{step.label}: will switch {found.serving or found.current or 'nothing'} -> {release_id}, "
                 f"gate{bake}", logger.info)
    yield HostFunctionCommand(_switch_in_wave, (step, release_id, restart, found.serving or found.current), {})


ACTIONS = ("relink", "wait", "restart", "noop", "bake", "switch")


def decide(found: ReleaseHostState, release_id: str, rebuilt: bool, bake_s: float) -> str:
    """
    What a host's rollout step does, one of ``ACTIONS``, from what the host holds and serves.

    + found: the host's ``ReleaseState``
    + release_id: the release it should serve
    + rebuilt: its stack was built again this run (it drifted): the process loaded the old files
    + bake_s: the batch's bake (0: none)

    **Example:**

    .. code:: python

        decide(ReleaseHostState(current="3f2a", serving="3f2a", active_state="active"), "3f2a", False, 0)  # "noop"
    """
    active = found.active_state == "active"
    serves = found.current == release_id and found.serving == release_id and active
    if found.serving == release_id and active and found.current != release_id and not found.busy and not rebuilt:
        return "relink"  # a hand moved current; the process serves what was declared
    if found.busy:
        return "wait"  # another run holds the lock: the host tool waits, then switches if still needed
    if serves and rebuilt:
        return "restart"
    if serves and (not bake_s or _baked(found.verdict)):
        return "noop"
    if serves:
        return "bake"  # an earlier run ended between the gate and the end of the bake
    return "switch"


@operation(is_idempotent=False)
def rolled_back(step: WaveStep):
    """
    Switch the host back to its previous release behind the start-up gate.

    + step: the host's place in this wave

    **Example:**

    .. code:: python

        rolled_back(name="Back to the previous release", step=WaveStep("canary"))
    """
    found = host.get_fact(ReleaseState)
    if found is None:
        return  # the fact failed, and with it the host
    if not found.previous:
        yield FunctionCommand(_log_error, (f"{step.label}: no previous release to roll back to",), {})
        return
    host.log(f"{step.label}: will switch {found.current} -> {found.previous} and gate", logger.info)
    yield HostFunctionCommand(_rollback_in_wave, (step,), {})


class _Lost(Exception):
    """The host did not answer: the link died, or never came back."""


def _tool(host, connector_arguments, step: WaveStep, *args: str, extra_timeout_s: float = 0):
    """
    Run the host tool; return ``(status, results, messages)``: its exit status
    (``sglfleet.host.protocol``; None when unknown), its result records and its error lines.
    """
    # The tool's exit status tells a rolled-back host (1, serving) from a down one.
    command = StringCommand(shlex.join([LAYOUT.tool, "--wait-lock", f"{step.lock_wait_s:g}",
                                        "--keep", str(step.releases_keep), "--textfile-dir", step.textfile_dir,
                                        *args]) + "; echo sglfleet-exit=$? >&2")
    timeout = step.timeout_s + extra_timeout_s if step.timeout_s else None
    try:
        # Around the whole call: a link cut before the channel opens blocks in paramiko too.
        with gevent.Timeout(timeout, TimeoutError):
            connected, output = host.run_shell_command(command, **connector_arguments)
    except TimeoutError:  # a link that never came back
        raise _Lost(f"no answer within {timeout:g} s") from None
    except Exception as error:  # the session died under paramiko (power cut, reset link)
        raise _Lost(f"{type(error).__name__}: {error}") from None
    lines = output.stderr_lines
    said = lines.pop().partition("=")[2] if lines and lines[-1].startswith("sglfleet-exit=") else ""
    status = int(said) if said.isdigit() else None
    if not connected and status is None:
        raise _Lost("the session ended without the tool's answer")
    return status, tool_results(output.stdout_lines), lines


def _lost(host, why: str) -> str:
    return (f"lost the connection during the switch ({why}); if {host.name} is up it finishes the "
            f"switch, gate and any rollback on its own: check it, then run again")


def _router(step: WaveStep, action) -> str | None:
    """Drain or join the host at the router; an error message, or None."""
    if not step.router_url:
        return None
    try:
        action(step.router_url, step.worker_url)
    except router.RouterError as error:
        return f"{step.label}: {error}"
    return None


BAKE_REASONS = {"pass": "BakePassed", "fail": "BakeFailed", "inconclusive": "BakeInconclusive"}


def _verdicts(host, step: WaveStep, results: list[dict], from_release: str | None = None) -> None:
    """Log each gate and bake verdict with its figures, keep it for the run's summary, record it as an event."""
    for result in results:
        figures = result.get("figures") or {}
        if result.get("stage") == "startup" and result.get("passed") and not result.get("already"):
            accept = (f"accept length {figures['spec_accept_length']:g}, "
                      if "spec_accept_length" in figures else "")
            line = (f"gate passed on {result['release']} ({accept}{figures.get('tokens', 0)} "
                    f"tokens in {figures.get('requests', 0)} generations, {figures.get('seconds', 0):g} s)")
            reason = "GatePassed"
        elif result.get("stage") == "startup" and result.get("passed") is False:
            recording.emit("GateFailed", host=host.name, from_release=from_release, to_release=result["release"],
                            message=f"gate failed on release {result['release']}: {result.get('failure')}")
            continue
        elif result.get("stage") == "bake":
            line = f"bake {result['verdict']} on {result['release']} ({describe(figures)})"
            reason = BAKE_REASONS[result["verdict"]]
            figures = {**figures, "baseline": result.get("baseline")} if result.get("baseline") else figures
        else:
            continue
        host.log(f"{step.label}: {line}", logger.info)
        summary.verdict(host.name, line)
        recording.emit(reason, host=host.name, from_release=from_release, to_release=result["release"],
                        figures=figures, message=line)


def _over_budget(state, step: WaveStep) -> str | None:
    """Why this batch must not start: an earlier one lost more hosts than ``max_fail_percentage``; else None."""
    failed_names = {h.name for h in state.failed_hosts}
    for label, hosts in step.earlier:
        failed = [name for name in hosts if name in failed_names]
        if failed and len(failed) * 100 > step.max_fail_percentage * len(hosts):
            why = (f"{step.label} not started: {', '.join(failed)} of {label} did not pass "
                   f"({len(failed)} of {len(hosts)} hosts, above max_fail_percentage {step.max_fail_percentage:g})")
            recording.budget_exceeded(step.label, {"failed": len(failed), "hosts": len(hosts),
                                                    "max_fail_percentage": step.max_fail_percentage}, why)
            return why
    return None


def _switch_in_wave(state, host, connector_arguments, step: WaveStep, release_id: str, restart: bool = False,
                    from_release: str | None = None):
    """
    Switch the host once every earlier wave passed, keeping the router in step;
    then bake. Returns False to fail this host.
    """
    recording.batch_reached(step.label, step.hosts)
    if stop := _over_budget(state, step):
        return _log_error(state, host, stop)
    recording.batch_started(step.label)
    if error := _router(step, router.drain):
        return _log_error(state, host, f"{error}; not switched")
    try:
        status, results, messages = _tool(host, connector_arguments, step, "activate", release_id,
                                          *(["--restart"] if restart else []))
    except _Lost as lost:
        return _log_error(state, host, _lost(host, str(lost)))
    passed = status == PASSED
    if any(result.get("stage") == "startup" and not result.get("already") for result in results):
        recording.emit("HostSwitched", host=host.name, from_release=from_release, to_release=release_id,
                        message=f"{step.label}: switched {from_release or 'nothing'} -> {release_id}, restarted")
    _verdicts(host, step, results, from_release)
    if status == ROLLED_BACK:  # the gate failed, and the host serves its earlier release again
        recording.emit("HostRolledBack", host=host.name, from_release=release_id, to_release=from_release,
                        message=f"{step.label}: back to {from_release or 'its earlier release'} after its gate failed")
    for line in () if passed else messages or [_lost(host, f"exit status {'unknown' if status is None else status}")]:
        _log_error(state, host, line)
    # 1: the gate failed and the host serves its earlier release again; rejoin either way.
    if status in (PASSED, ROLLED_BACK) and (error := _router(step, router.join)):
        return _log_error(state, host, error)
    if not passed:
        return False
    if step.bake_s:
        return _bake_in_wave(state, host, connector_arguments, step, release_id)
    summary.passed(host.name, f"serves {release_id}")
    return True


def _bake_in_wave(state, host, connector_arguments, step: WaveStep, release_id: str):
    """Bake the release the host serves; revert it (drained) when the bake fails it."""
    try:
        status, results, messages = _tool(host, connector_arguments, step, "bake", release_id,
                                          extra_timeout_s=step.bake_s)
    except _Lost as lost:
        return _log_error(state, host, _lost(host, str(lost)))
    _verdicts(host, step, results)
    if status == PASSED:
        summary.passed(host.name, f"serves {release_id}, baked")
        return True
    for line in messages:
        _log_error(state, host, line)
    if status != BAKE_FAILED:  # 6: another run switched the host meanwhile; else lost
        return False
    # The bake failed the release: back to what served before, out of the router meanwhile.
    if error := _router(step, router.drain):
        return _log_error(state, host, f"{error}; {release_id} still serves")
    try:
        status, _, messages = _tool(host, connector_arguments, step, "revert", release_id)
    except _Lost as lost:
        return _log_error(state, host, _lost(host, str(lost)))
    if status == ROLLED_BACK:
        recording.emit("HostRolledBack", host=host.name, from_release=release_id,
                        message=f"{step.label}: back to its earlier release after its bake failed")
    for line in messages:
        _log_error(state, host, line)
    if status in (PASSED, ROLLED_BACK) and (error := _router(step, router.join)):
        _log_error(state, host, error)
    return False


def _relink(state, host, connector_arguments, step: WaveStep, release_id: str):
    try:
        status, _, messages = _tool(host, connector_arguments, step, "relink", release_id)
    except _Lost as lost:
        return _log_error(state, host, _lost(host, str(lost)))
    for line in () if status == PASSED else messages:
        _log_error(state, host, line)
    return status == PASSED


def _rollback_in_wave(state, host, connector_arguments, step: WaveStep):
    recording.batch_reached(step.label, step.hosts)
    if stop := _over_budget(state, step):
        return _log_error(state, host, stop)
    recording.batch_started(step.label)
    if error := _router(step, router.drain):
        return _log_error(state, host, f"{error}; not switched")
    try:
        status, results, messages = _tool(host, connector_arguments, step, "rollback")
    except _Lost as lost:
        return _log_error(state, host, _lost(host, str(lost)))
    for line in () if status == PASSED else messages:
        _log_error(state, host, line)
    if status in (PASSED, ROLLED_BACK) and (error := _router(step, router.join)):
        return _log_error(state, host, error)
    if status == PASSED:
        back = results[-1]["release"] if results else None
        summary.passed(host.name, f"rolled back to {back or 'its previous release'}")
        recording.emit("HostRolledBack", host=host.name, to_release=back,
                        message=f"{step.label}: rolled back to {back or 'its previous release'}")
    return status == PASSED


def _log_error(state, host, message):
    """Log ``message`` as this host's error (the run's summary keeps the first); returns False, so it fails the host."""
    host.log_styled(message, fg="red", log_func=logger.error)
    if host.name not in summary.failed_hosts():  # the first line says why; the rest explain it
        recording.emit("HostFailed", host=host.name, message=message)
    summary.failed(host.name, message)
    return False
