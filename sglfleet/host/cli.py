"""
``sglfleet-release``: switch, gate, bake and roll back releases on this host.

Run by the controller over SSH (through sudo), or by hand. The gate runs here,
so it works when the serving port is closed to the controller, and a lost SSH
session cannot leave a half-switched host: the switch, the gate and any
rollback happen under one lock, and the tool ignores SIGHUP.

    sglfleet-release activate RELEASE   switch current to RELEASE, restart, start-up gate;
                                        on a failure switch back and restart
    sglfleet-release bake RELEASE       sample /metrics for the bake, judge, record the verdict
    sglfleet-release revert RELEASE     RELEASE failed its bake: back to what served before it
    sglfleet-release relink RELEASE     point current at RELEASE, which the running process serves (no restart)
    sglfleet-release update RELEASE     serve RELEASE by loading its model revision into the running server, gate;
                                        on a failure load the old one back (``weights.py``); no restart
    sglfleet-release rollback           switch current to previous, restart, start-up gate
    sglfleet-release activate|rollback --together   a group's member: on a failed gate, do not go
                                        back alone (its group goes back together; exit 4)
    sglfleet-release rollback --undo    undo the switch to the current release (a failed unit's or group's
                                        go-back): previous as before that switch, not the release that failed
    sglfleet-release gate               the start-up gate against the current release
    sglfleet-release retire             stop and remove the service: the inventory no longer names it
    sglfleet-release stop               stop the service until its next switch (a group stops together)
    sglfleet-release state              this host's releases, unit, health and verdicts, as JSON
    sglfleet-release models ...         check, stage and collect pinned models (``models.py``)
    sglfleet-release cache ...          pack, fetch and drop shared compile caches (``compile_cache.py``)
    sglfleet-release drift found|clear  what a converge found changed by hand, for sglfleet.prom (``drift.py``)
    sglfleet-release --service NAME ... any of these for the host's service NAME (sglang-NAME.service,
                                        its releases under /opt/sglfleet/services/NAME/)

Thresholds come from the release's ``gate.json``. Exit status: 0 passed;
1 failed, the host serves its earlier release again; 2 usage or layout error;
3 busy (another run held the lock past --wait-lock); 4 failed and nothing
serves; 5 the bake failed (the release still serves: ``revert`` it);
6 the release is no longer current (another run switched the host); 7 a system
command (systemctl) failed, so the host's state is unknown; 8 ``update``: not
weights-only here, nothing changed. The last
line on stdout, ``sglfleet-result {...}``, holds the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys

from . import bake, compile_cache, drift, models, releases, service, textfile, weights
from .gate import GateFailed, GateSettings, speculative, startup
from .client import base_url, request
from .layout import LAYOUT, Layout
from .protocol import BAKE_FAILED, BUSY, DOWN, NOT_IN_PLACE, PASSED, ROLLED_BACK, SWITCHED_AWAY, SYSTEM, USAGE, lock_wait_s, result_line


def report(**result) -> None:
    print(result_line(**result), flush=True)


def fail(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def gate_release(release_id: str, restarts: int, layout: Layout) -> dict:
    return startup(releases.read(release_id, "release.json", layout), GateSettings.load(release_id, layout),
                   restarts, layout)


def switch_and_gate(target: str, previous: str | None, layout: Layout) -> dict:
    """Point current at ``target`` and previous at ``previous`` (None: none), restart, gate; the gate's figures."""
    releases.point(layout.current, target)
    releases.point(layout.previous, previous)
    return gate_release(target, service.restart(layout), layout)


def back_to(failed: str, failure: Exception, old_current: str | None, old_previous: str | None,
            layout: Layout) -> int:
    """Put the links as they were, restart, wait until it serves; report ``failure``."""
    log = service.journal_tail(layout)
    if not old_current or old_current == failed:
        fail(f"gate failed on release {failed}: {failure}; no earlier release to roll back to\n"
             f"last log lines of {layout.unit}:\n{log}")
        return DOWN
    releases.point(layout.current, old_current)
    releases.point(layout.previous, old_previous)
    try:
        gate_release(old_current, service.restart(layout), layout)
        after, status = f"rolled back to {old_current}, which serves again", ROLLED_BACK
    except GateFailed as second:
        after, status = f"rolled back to {old_current}, which does not serve either ({second})", DOWN
    fail(f"gate failed on release {failed}: {failure}; {after}\nlast log lines of {layout.unit}:\n{log}")
    return status


def intact(release_id: str, layout: Layout) -> bool:
    """Refuse (saying why) a release whose files no longer make its id: it is not what was gated."""
    if releases.matches_id(release_id, layout):
        return True
    fail(f"release {release_id} no longer matches its id: its files were changed on the host; "
         f"run the deploy to restore it (or stage a new release)")
    return False


def serving(layout: Layout) -> str | None:
    """The release the unit's running process serves: started from, or updated to in place (``weights.serving``)."""
    return weights.serving(layout)


def left_down(target: str, failure: Exception, layout: Layout) -> int:
    """A group's member whose gate failed: it does not go back alone (its group does, together); report it."""
    fail(f"gate failed on release {target}: {failure}; its group rolls back together\n"
         f"last log lines of {layout.unit}:\n{service.journal_tail(layout)}")
    return DOWN


def activate(target: str, layout: Layout, restart: bool = False, together: bool = False) -> int:
    if not releases.staged(target, layout):
        fail(f"release {target} is not staged under {layout.releases}")
        return USAGE
    if not intact(target, layout):
        return USAGE
    old_current = releases.release_id_of(layout.current)
    old_previous = releases.release_id_of(layout.previous)
    active = service.properties(layout).get("ActiveState") == "active"
    if old_current == target and active and serving(layout) == target and not restart:
        print(f"release {target} already serving")
        report(stage="startup", release=target, passed=True, figures={}, already=True)
        return PASSED
    keep = old_current if old_current != target else old_previous
    # What to put back if the bake fails later, when the links have moved on.
    releases.record(target, "switched", {"current": old_current, "previous": old_previous}, layout)
    before_stop = service.journal_cursor(layout)
    try:
        figures = switch_and_gate(target, keep, layout)
    except GateFailed as failure:
        cut = stop_cut(before_stop, layout)
        releases.record(target, "startup", {"passed": False, "failure": str(failure), **cut}, layout)
        report(stage="startup", release=target, passed=False, failure=str(failure), **cut)
        if together:
            return left_down(target, failure, layout)
        return back_to(target, failure, old_current, old_previous, layout)
    cut = stop_cut(before_stop, layout)
    releases.record(target, "startup", {"passed": True, "figures": figures, **cut}, layout)
    print(f"release {target} passed its gate")
    report(stage="startup", release=target, passed=True, figures=figures, **cut)
    return PASSED


def stop_cut(cursor: str | None, layout: Layout) -> dict:
    """``{"cut_at_stop": N}`` where the stop before this start timed out and cut N requests, else ``{}``."""
    cut = service.requests_cut(cursor, layout)
    if cut is None:
        return {}
    print(f"the stop of the release that served before timed out and cut {cut} requests in flight",
          file=sys.stderr, flush=True)
    return {"cut_at_stop": cut}


def baseline(release_id: str | None, layout: Layout) -> dict | None:
    """The figures of a release that passed its bake, to compare the next one with."""
    verdict = (releases.read(release_id, "verdict.json", layout, default={}) or {}) if release_id else {}
    baked = verdict.get("bake") or {}
    return baked.get("figures") if baked.get("verdict") == "pass" else None


def run_bake(target: str, layout: Layout) -> int:
    if releases.release_id_of(layout.current) != target:
        fail(f"release {target} no longer serves here: another run switched the host")
        return SWITCHED_AWAY
    settings = GateSettings.load(target, layout)
    release = releases.read(target, "release.json", layout)
    previous = releases.release_id_of(layout.previous)
    before = baseline(previous, layout)
    try:
        samples = bake.sample(base_url(release), settings, service.restarts(layout), layout)
        figures = bake.measure(samples, speculative(release))
        verdict, reasons = bake.judge(figures, before, settings)
    except GateFailed as failure:
        figures, verdict, reasons = {}, "fail", [str(failure)]
    passed = verdict == "pass" or (verdict == "inconclusive" and settings.on_inconclusive == "pass")
    result = {"verdict": verdict, "passed": passed, "figures": figures, "baseline": before,
              "baseline_release": previous if before else None, "reasons": reasons,
              "bake_s": settings.bake_s}
    releases.record(target, "bake", result, layout)
    report(stage="bake", release=target, **result)
    if passed:
        print(f"release {target}: bake {verdict} ({bake.describe(figures)})")
        return PASSED
    policy = f"; gate_on_inconclusive is {settings.on_inconclusive}" if verdict == "inconclusive" else ""
    fail(f"bake {verdict} on release {target}: {'; '.join(reasons)}{policy} ({bake.describe(figures)})")
    return BAKE_FAILED


def revert(target: str, layout: Layout) -> int:
    if releases.release_id_of(layout.current) != target:
        print(f"release {target} does not serve here: nothing to revert")
        return PASSED
    switched = (releases.read(target, "verdict.json", layout, default={}) or {}).get("switched") or {}
    old_current = switched.get("current") or releases.release_id_of(layout.previous)
    old_previous = switched.get("previous")
    if old_current and not intact(old_current, layout):
        return DOWN
    if switched.get("in_place") and old_current and serving(layout) == target:  # loaded in place: back in place
        return weights.back(target, GateFailed("bake", "the bake failed"), old_current, old_previous, layout)
    return back_to(target, GateFailed("bake", "the bake failed"), old_current, old_previous, layout)


def relink(target: str, layout: Layout) -> int:
    """Point current back at the release the process serves, when a hand moved it: no restart."""
    if serving(layout) != target or not intact(target, layout):
        fail(f"the running process does not serve release {target}: switch to it instead")
        return USAGE
    if releases.release_id_of(layout.current) != target:
        releases.point(layout.current, target)
        print(f"current points at {target} again, which the running process serves")
    return PASSED


def rollback(layout: Layout, together: bool = False, undo: bool = False) -> int:
    current, previous = releases.release_id_of(layout.current), releases.release_id_of(layout.previous)
    if not previous:
        fail("no previous release to roll back to")
        return USAGE
    if not intact(previous, layout):
        return USAGE
    keep = undone(current, previous, layout) if undo else current
    try:
        figures = switch_and_gate(previous, keep, layout)
    except GateFailed as failure:
        if together:
            return left_down(previous, failure, layout)
        return back_to(previous, failure, current, previous, layout)
    print(f"rolled back to {previous}, which passed its gate")
    report(stage="startup", release=previous, passed=True, figures=figures)
    return PASSED


def undone(current: str | None, previous: str, layout: Layout) -> str | None:
    """
    What previous points at once ``current`` goes back to ``previous``, where that undoes the switch that
    made ``current`` (its ``switched`` record): what previous was before it, as a host that went back alone
    has (``back_to``); else ``current``, as a rollback swaps the two.
    """
    switched = (releases.read(current, "verdict.json", layout, default={}) or {}).get("switched") or {} \
        if current else {}
    return switched.get("previous") if switched.get("current") == previous else current


def stop(layout: Layout) -> int:
    """Stop the unit, which its next switch starts again: a group's hosts all stop before any starts, so
    that no rank of the old release joins the new head's rendezvous."""
    if service.properties(layout).get("ActiveState") in ("active", "activating", "reloading"):
        service.systemctl("stop", layout.unit)
        print(f"{layout.unit} stopped")
    return PASSED


def gate(layout: Layout) -> int:
    current = releases.release_id_of(layout.current)
    if not current:
        fail("no current release")
        return USAGE
    try:
        figures = gate_release(current, service.restarts(layout), layout)
    except GateFailed as failure:
        fail(f"gate failed on release {current}: {failure}")
        return ROLLED_BACK
    print(f"release {current} passes its gate")
    report(stage="startup", release=current, passed=True, figures=figures)
    return PASSED


def retire(layout: Layout, textfile_dir: str) -> int:
    """
    Stop the service for good and remove its unit, env file, releases and links, and
    its series in node_exporter's textfile folder. Its user, state and compile caches
    stay: a service named again starts warm.
    """
    service.systemctl("disable", "--now", layout.unit, check=False)  # a unit removed by hand: nothing runs
    stopped = service.properties(layout).get("ActiveState") in (None, "inactive", "failed")
    if not stopped:
        fail(f"{layout.unit} is still {service.properties(layout).get('ActiveState')} after its stop; "
             f"nothing of it was removed")
        return SYSTEM
    for path in (layout.unit_file, layout.env_file, layout.current, layout.previous):
        if os.path.lexists(path):
            os.unlink(path)
    shutil.rmtree(layout.own_root, ignore_errors=True)
    service.systemctl("daemon-reload")
    service.systemctl("reset-failed", layout.unit, check=False)
    textfile.retired(layout, textfile_dir)
    print(f"{layout.unit} stopped and removed")
    report(stage="retire", service=layout.service_name, passed=True)
    return PASSED


def state(layout: Layout) -> int:
    """This host's releases, unit state, health and verdicts, as one JSON object."""
    unit = service.properties(layout)
    current = releases.release_id_of(layout.current)
    release = releases.read(current, "release.json", layout) if current else None
    health = None
    if release:
        status, _ = request(f"{base_url(release)}/health", timeout=25.0)
        health = status or None
    verdict = (releases.read(current, "verdict.json", layout, default={}) or {}) if current else {}
    previous = releases.release_id_of(layout.previous)
    served = serving(layout)
    print(json.dumps({
        "current": current,
        "previous": previous,
        "serving": served,
        # The model revision it serves, and whether it was loaded in place (not what the process started with).
        "revision": weights.served_revision(served, layout),
        "in_place": bool(served) and served != service.main_pid_environ(layout).get("SGLFLEET_RELEASE"),
        # Releases whose files no longer make their id: edited on the host.
        "drifted": [r for r in (current, previous) if r and not releases.matches_id(r, layout)],
        "stack": (release or {}).get("stack"),
        "active_state": unit.get("ActiveState"),
        "active_since": unit.get("ActiveEnterTimestamp"),
        "health": health,
        "startup": verdict.get("startup"),
        "bake": verdict.get("bake"),
        "releases": sorted(r for r in os.listdir(layout.releases) if not r.startswith("."))
        if os.path.isdir(layout.releases) else [],
        **models.inventory(layout),
    }))
    return PASSED


def drift_main(argv: list[str], layout: Layout = LAYOUT) -> int:
    """``sglfleet-release drift found KIND|clear``: record what a converge found, then rewrite sglfleet.prom."""
    parser = argparse.ArgumentParser(prog="sglfleet-release drift", description=drift.__doc__.split("\n\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--textfile-dir", default=textfile.DEFAULT_DIR,
                        help="node_exporter's textfile folder, for sglfleet.prom (skipped where it does not exist)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("found", parents=[common]).add_argument("kind", choices=drift.KINDS)
    sub.add_parser("clear", parents=[common])
    args = parser.parse_args(argv)
    try:
        if args.command == "found":
            drift.mark(args.kind, layout)
        else:
            drift.clear(layout)
        textfile.write(layout, args.textfile_dir)
    except OSError as error:  # the metrics are a view: a full disk must not fail the repair
        print(f"could not record drift for {textfile.FILE}: {error}", file=sys.stderr, flush=True)
    return 0


def main(argv=None, layout: Layout = LAYOUT) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--service"] and len(argv) > 1:  # one of the host's services: its own releases, unit and lock
        layout, argv = layout.for_service(argv[1]), argv[2:]
    if argv[:1] == ["models"]:  # its own subcommands; it takes no host lock (one per revision)
        return models.main(argv[1:], layout)
    if argv[:1] == ["cache"]:  # nor does this: caches are added to, never switched
        return compile_cache.main(argv[1:], layout)
    if argv[:1] == ["drift"]:  # nor does this: it records what a converge found, for sglfleet.prom
        return drift_main(argv[1:], layout)
    parser = argparse.ArgumentParser(prog="sglfleet-release", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("activate").add_argument("release_id")
    sub.choices["activate"].add_argument("--restart", action="store_true",
                                         help="restart and gate even when the release serves (its stack was repaired)")
    for name in ("bake", "revert", "relink", "update"):
        sub.add_parser(name).add_argument("release_id")
    for name in ("rollback", "gate", "state", "retire", "stop"):
        sub.add_parser(name)
    for name in ("activate", "rollback"):
        sub.choices[name].add_argument("--together", action="store_true",
                                       help="a group's member: on a failed gate, do not go back alone (exit 4)")
    sub.choices["rollback"].add_argument("--undo", action="store_true",
                                         help="undo the switch to the current release: previous as before it")
    parser.add_argument("--wait-lock", type=float, default=None,
                        help="seconds to wait for another run's lock (default: long enough for its "
                             "gate, bake and rollback)")
    parser.add_argument("--keep", type=int, default=None,
                        help="after a switch, remove old releases but the current, the previous and KEEP more")
    parser.add_argument("--textfile-dir", default=textfile.DEFAULT_DIR,
                        help="node_exporter's textfile folder, for sglfleet.prom (skipped where it does not exist)")
    args = parser.parse_args(argv)
    if args.command == "state":
        return state(layout)

    # The controller's SSH session may end mid-switch (Ctrl-C, a cut link): finish
    # the switch, the gate and any rollback regardless.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    current = releases.release_id_of(layout.current)
    settings = GateSettings.load(getattr(args, "release_id", None) or current or "", layout)
    wait = args.wait_lock if args.wait_lock is not None else lock_wait_s(settings.warmup_s, settings.bake_s)
    commands = {
        "activate": lambda: activate(args.release_id, layout, restart=args.restart, together=args.together),
        "relink": lambda: relink(args.release_id, layout),
        "update": lambda: weights.update(args.release_id, layout),
        "bake": lambda: run_bake(args.release_id, layout),
        "revert": lambda: revert(args.release_id, layout),
        "rollback": lambda: rollback(layout, together=args.together, undo=args.undo),
        "gate": lambda: gate(layout),
        "retire": lambda: retire(layout, args.textfile_dir),
        "stop": lambda: stop(layout),
    }
    try:
        with releases.locked(wait, layout):
            status = commands[args.command]()
            # After the links moved: what they point at stays. An update that is not one moved
            # nothing, and the switch that follows needs the release it staged.
            if args.keep is not None and args.command in ("activate", "rollback", "revert", "update") \
                    and status != NOT_IN_PLACE:
                releases.collect(args.keep, layout)
            try:
                if args.command != "retire":  # which wrote its own
                    textfile.write(layout, args.textfile_dir)
            except OSError as error:  # the metrics are a view: a full disk must not fail the switch
                fail(f"could not write {textfile.FILE} in {args.textfile_dir}: {error.strerror}")
            return status
    except releases.Busy as busy:
        fail(str(busy))
        return BUSY
    except subprocess.CalledProcessError as error:  # systemd went away, or refused
        said = (error.stderr or "").strip().splitlines()
        fail(f"{shlex.join(error.cmd)} failed (exit {error.returncode})" + (f": {said[-1]}" if said else ""))
        return SYSTEM
