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
from io import StringIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, FunctionCommand, operation

from sglfleet.artifacts.temporaries import RUN_TOKEN, temporary_beside
from sglfleet.facts.files import FileBytes
from sglfleet.facts.host import READ
from sglfleet.facts.release import ReleaseHostState, ReleaseState
from sglfleet.host.layout import LAYOUT, STALE_MINUTES, Layout
from sglfleet.host.textfile import DEFAULT_DIR as TEXTFILE_DIR
from sglfleet.operations.drift import found as found_drift, marked
from sglfleet.operations.remote import HostFunctionCommand
from sglfleet.plan.release import Release
from sglfleet.plan.rollout_plan import ACTIONS, decide  # noqa: F401 (ACTIONS: decide's answers, as before)
from sglfleet.plan.rollout_steps import BatchStep
from sglfleet.controller.outcomes import fail
from sglfleet.controller.rollout import bake, relink, retire, roll_back, switch, update
from sglfleet.plan.weights import weights_change
from sglfleet.operations.output import say, show_diff, wants_diff


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@operation()
def staged(release: Release, diff_against: str = "launch.args", found=READ, layout: Layout = LAYOUT,
           textfile_dir: str = TEXTFILE_DIR):
    """
    Stage a release: its files into a temporary folder, renamed into
    ``releases/<release_id>``; or, when it is staged, put back any file that
    no longer matches the release's id, and refresh its gate settings.

    + release: the rendered release (``sglfleet.plan.release.render_release``)
    + diff_against: the file whose change from the serving release ``--diff`` shows
    + found: ``ReleaseState``'s answer with this release's files, already read; by default the operation reads it
    + layout: the service's layout (``Layout.for_service``): where its releases live
    + textfile_dir: node_exporter's textfile folder, where a drift found is marked (``sglfleet_drift``)

    **Example:**

    .. code:: python

        staged(name="Stage the release", release=render_release(config, stack_id, patch))
    """
    if found is READ:
        found = host.get_fact(ReleaseState, release_id=release.release_id, service=layout.service_name)
    if found is None:
        return  # the fact failed, and with it the host
    current = found.current
    if wants_diff() and current != release.release_id:
        old, stack = b"", ""
        if current:
            old = host.get_fact(FileBytes, path=layout.release(current, diff_against)) or b""
            stack = _stack_change(current, release.stack_id, layout)
        of = "" if layout.legacy else f" of {layout.unit}"
        show_diff(f"Release {release.release_id}{of} differs from the serving {current or 'none'}{stack}:",
                  old.decode(errors="replace"), release.files[diff_against][0])

    final = layout.release(release.release_id)
    if found.files is None:
        yield from _stage(release, final, layout)
        return

    drifted = sorted(name for name, (text, _) in release.files.items() if found.files.get(name) != _sha256(text))
    settings = sorted(name for name, (text, _) in release.settings.items()
                      if found.files.get(name) != _sha256(text))
    if not drifted and not settings:
        host.noop(f"release {release.release_id} is staged and matches its id")
        return
    if drifted:
        serving = found.serving == release.release_id
        yield found_drift("release", f"release {release.release_id}",
                          [f"{name} no longer matches the release's id" for name in drifted],
                          "will put back the controller's rendering"
                          + (" (the running process loaded it at start: no restart)" if serving else ""))
        yield marked("release", textfile_dir)
    for name in drifted + settings:
        text, mode = {**release.files, **release.settings}[name]
        yield from _write(f"{final}/{name}", text, mode)


def _stack_change(current: str, stack_id: str, layout: Layout) -> str:
    """`` (stack A -> B)`` when the serving release runs another stack than ``stack_id``, else "".
    An upgrade changes no launch flag by itself: the diff of the flags would not show it."""
    try:
        old = json.loads(host.get_fact(FileBytes, path=layout.release(current, "release.json")) or b"{}").get("stack")
    except ValueError:
        return ""
    return f" (stack {old} -> {stack_id})" if old and old != stack_id else ""


def _write(path: str, text: str, mode: int):
    temporary = temporary_beside(path)
    yield FileUploadCommand(StringIO(text), temporary)
    yield f"chmod {mode:o} {shlex.quote(temporary)} && mv -f {shlex.quote(temporary)} {shlex.quote(path)}"


def _stage(release: Release, final: str, layout: Layout):
    # One folder per run: two runs staging the same release at once never share it.
    temporary = f"{layout.releases}/.{release.release_id}.partial-{RUN_TOKEN}"
    # Runs killed while staging leave their folders; clear those over an hour old.
    yield (f"find {shlex.quote(layout.releases)} -maxdepth 1 -name '.*.partial-*' -mmin +{STALE_MINUTES} "
           f"-exec rm -rf {{}} + 2>/dev/null; mkdir -p {shlex.quote(temporary)}")
    for name, (text, mode) in sorted({**release.files, **release.settings}.items()):
        yield FileUploadCommand(StringIO(text), f"{temporary}/{name}")
        yield f"chmod {mode:o} {shlex.quote(f'{temporary}/{name}')}"
    # A release is immutable: when another run renamed it into place first, keep that one.
    yield (f"mv -T {shlex.quote(temporary)} {shlex.quote(final)} 2>/dev/null || "
           f"{{ rm -rf {shlex.quote(temporary)} && test -f {shlex.quote(f'{final}/release.json')}; }}")


@operation(is_idempotent=False)
def activated(release_id: str, step: BatchStep, found=READ, rebuilt: bool = False, then: tuple = (),
              retired: tuple = ()):
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
    + then: ``(release_id, step, found)`` of each further service of the host, switched in turn in this
      same operation (its batch's), each behind its own gate, once the one before passed
    + retired: the steps of services the host runs and the inventory no longer names: each leaves
      the router, stops, and is removed first (it may hold the GPUs or the port of a new one)

    **Example:**

    .. code:: python

        activated(
            name="Switch to the new release",
            release_id="3f2a9c1d0b7e6a55",
            step=BatchStep("wave1", (("canary", ("node1",)),), bake_s=600),
        )
    """
    # One operation a batch for all of a host's services: pyinfra runs a host's operations in
    # step with the other hosts' by position, so a second one would run beside a later batch.
    for gone in retired:
        say(f"{gone.label}: will stop and remove {gone.unit}: the inventory no longer names it", logger.warning)
        yield HostFunctionCommand(retire, (gone,), {})
    for one_release, one_step, one_found in ((release_id, step, found), *then):
        yield from _activate(one_release, one_step, one_found, rebuilt)


def _activate(release_id: str, step: BatchStep, found, rebuilt: bool):
    """``activated``'s decision for one service, as commands."""
    layout = LAYOUT.for_service(step.service)
    label = layout.labelled(step.label)  # in messages only
    if found is READ:
        found = host.get_fact(ReleaseState, service=step.service)
    if found is None:
        return  # the fact failed, and with it the host
    restart = rebuilt
    if found.busy and state.is_executing:
        # Another run (or one whose controller died) is switching, gating or baking
        # this host: what it serves is not known until that ends. Wait for it,
        # then decide on what it left.
        host.log(f"{label}: another sglfleet run holds this host's lock; waiting for it{_held_by(found)}",
                 logger.warning)
        timeout = math.ceil(step.timeout_s) if step.timeout_s else None  # a link that never comes back
        found = host.get_fact(ReleaseState, wait_lock_s=step.lock_wait_s, service=step.service, _timeout=timeout,
                              _ignore_errors=True)
        if found is None:
            yield FunctionCommand(fail, (f"{label}: no answer within {timeout} s while waiting for "
                                               f"another run's lock; check {host.name}, then run again",), {})
            return
    # A new revision of the model alone is loaded into the running server, where it may be (sglfleet.plan.weights).
    change = weights_change(found.current_release, step.weights) if step.weights else None
    action = decide(found, release_id, restart, step.bake_s, bool(change and change.in_place))
    if action == "relink":
        # A hand moved current; the process still serves what was declared: put the link back.
        yield found_drift("current", f"{layout.current}", [f"points at {found.current or 'nothing'}, the process "
                                                            f"serves {release_id}"], "will point it back (no restart)")
        yield marked("current", step.textfile_dir)
        yield HostFunctionCommand(relink, (step, release_id), {})
        return
    if action == "noop":
        host.noop(f"{label}: already serving release {release_id}")
        return
    if action == "bake":
        # A run ended (or was cut) between the gate and the end of the bake.
        say(f"{label}: serves {release_id}, which has not passed its bake yet: will bake it")
        yield HostFunctionCommand(bake, (step, release_id), {})
        return
    baking = f" and bake {step.bake_s:g} s" if step.bake_s else ""
    if action == "update":
        say(f"{label}: {change.says()}: will load {release_id} into the running {found.serving} "
            f"(no restart, no drain), gate{baking}")
        yield HostFunctionCommand(update, (step, release_id, found.serving), {})
        return
    if action == "wait":
        # Only planning, or the lock is still held: the host tool waits for it
        # in turn, then switches only if still needed.
        say(f"{label}: another sglfleet run holds this host's lock; will wait for it{_held_by(found)}, "
            f"then serve {release_id}", logger.warning)
    elif action == "restart":
        say(f"{label}: serves {release_id} from a stack this run rebuilt: will restart it behind "
            f"its gate{baking}", logger.warning)
    else:
        drifted = found.current == release_id and found.serving != release_id
        kept = found_drift("service", "the service" if layout.legacy else layout.unit,
                           [f"current is {release_id}, the process serves {found.serving or 'nothing'}"],
                           "will switch it behind the gate") if drifted else None
        # What changes, where the serving release is known: "restart: speculative_num_steps changes".
        why = f" ({change.says()})" if change and not change.in_place else ""
        group = f" with its group ({', '.join(step.pd_unit)}), as one unit," if step.together else ","
        say(f"{label}: will switch {found.serving or found.current or 'nothing'} -> {release_id}{group} gate{baking}{why}")
        if kept:  # everything said first: planning stops at a command
            yield kept
            yield marked("service", step.textfile_dir)
    yield HostFunctionCommand(switch, (step, release_id, restart, found.serving or found.current), {})


def _held_by(found: ReleaseHostState) -> str:
    """`` (held by pid 4242: sglfleet-release activate 3f2a...)``, where the read saw who holds the lock."""
    return f" (held by pid {'; pid '.join(found.holders)})" if found.holders else ""


@operation(is_idempotent=False)
def rolled_back(step: BatchStep, then: tuple = ()):
    """
    Switch the host back to its previous release behind the start-up gate.

    + step: the host's place in this wave
    + then: the steps of the host's further services, rolled back in turn in this same operation;
      a named service that has no previous release (it never changed) serves on as it is

    **Example:**

    .. code:: python

        rolled_back(name="Back to the previous release", step=BatchStep("canary"))
    """
    for one in (step, *then):
        yield from _roll_back(one)


def _roll_back(step: BatchStep):
    """``rolled_back`` for one service, as commands."""
    label = step.layout.labelled(step.label)
    found = host.get_fact(ReleaseState, service=step.service)
    if found is None:
        return  # the fact failed, and with it the host
    if not found.previous and not step.layout.legacy and found.current:
        # One of several services that never changed: the others roll back; it serves on as it is.
        host.noop(f"{label}: no previous release; serves {found.current} as it is")
        return
    if not found.previous:
        yield FunctionCommand(fail, (f"{label}: no previous release to roll back to",), {})
        return
    say(f"{label}: will switch {found.current} -> {found.previous} and gate")
    yield HostFunctionCommand(roll_back, (step,), {})
