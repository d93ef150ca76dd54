"""Facts about a host's releases: which one serves, which came before, the unit, the files."""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from sglfleet.host.drift import FILE as DRIFT_FILE
from sglfleet.host.layout import GATEWAY, LAYOUT
from sglfleet.host.weights import served_in_place


@dataclass
class ReleaseHostState:
    """
    What a host holds and serves of its releases.

    + current, previous: the releases the links point at
    + serving: the release the running process serves: the one it was started from (its environment),
      or the current one where its weights were updated to it in place since (``sglfleet.host.weights``); or None
    + releases: every staged release
    + active_state, active_since, n_restarts: the unit's
    + busy: another run holds the host lock (a switch, gate or bake in progress)
    + holders: the processes that hold it, each ``"<pid> <command line>"`` (from ``/proc/locks``)
    + verdict: the current release's ``verdict.json`` (start-up gate and bake)
    + files: ``{name: sha256}`` of the asked release's files, None when it is not staged
    + drifted: the kinds of drift an earlier converge marked and none cleared (``sglfleet.host.drift``)
    + current_release: the current release's ``release.json``, what a weights-only change is told by
      (``sglfleet.plan.weights``); {} where there is none
    """

    current: str | None = None
    previous: str | None = None
    serving: str | None = None
    releases: list[str] = field(default_factory=list)
    active_state: str | None = None
    active_since: str | None = None
    n_restarts: int = 0
    busy: bool = False
    holders: list[str] = field(default_factory=list)
    verdict: dict = field(default_factory=dict)
    files: dict[str, str] | None = None
    drifted: list[str] = field(default_factory=list)
    current_release: dict = field(default_factory=dict)


class ReleaseState(FactBase["ReleaseHostState | None"]):
    """
    Returns a host's releases, the unit's state, the release its process serves,
    the current release's verdict and (with ``release_id``) the sha256 of that
    release's files, in one round trip. With ``wait_lock_s``, first waits up to
    that long for another run holding the host lock.

    .. code:: python

        ReleaseHostState(current="3f2a...", previous="9c1d...", serving="3f2a...",
                         releases=["3f2a...", "9c1d..."], active_state="active",
                         files={"launch": "b5e1...", "release.json": "07aa..."}, ...)

    **Example:**

    .. code:: python

        state = host.get_fact(ReleaseState, release_id="3f2a9c1d0b7e6a55")
        state = host.get_fact(ReleaseState, service="small")   # one of the host's services
    """

    @staticmethod
    def default() -> None:
        """None when the fact failed (the host is failed with it, unless errors are ignored)."""
        return None

    def command(self, release_id: str | None = None, wait_lock_s: float = 0, service: str = LAYOUT.service_name) -> str:
        """+ service: which of the host's services (``Layout.for_service``); ``sglang`` for its one service"""
        layout = LAYOUT.for_service(service)
        lock = shlex.quote(layout.lock)
        # Another run's switch holds the lock through its gate: wait that long at most.
        wait = f"[ ! -e {lock} ] || flock -w {wait_lock_s:g} {lock} true; " if wait_lock_s else ""
        files = ""
        if release_id:
            folder = shlex.quote(layout.release(release_id))
            files = (f"if [ -d {folder} ]; then echo staged=1; "
                     f"(cd {folder} && sha256sum -- * 2>/dev/null | sed 's/^/file /'); fi; ")
        # Few processes: this runs on every host at every converge.
        return wait + files + (
            f"echo current=$(readlink {shlex.quote(layout.current)} 2>/dev/null); "
            f"echo previous=$(readlink {shlex.quote(layout.previous)} 2>/dev/null); "
            f"echo releases=$(ls {shlex.quote(layout.releases)} 2>/dev/null); "  # no staging dot-folders
            f"if [ -e {lock} ] && ! flock -n {lock} true; then echo busy=1; "
            # Who holds it, for the message: /proc/locks names each lock's pid and device:inode.
            f"i=$(stat -c %i {lock}); for p in $(awk -v i=\":$i\" 'substr($6, length($6) - length(i) + 1) == i "
            "{print $5}' /proc/locks); do echo \"holder=$p $(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null)\"; done; fi; "
            f"echo verdict=$(tr -d '\\n' < {shlex.quote(layout.current)}/verdict.json 2>/dev/null); "
            f"echo release=$(tr -d '\\n' < {shlex.quote(layout.current)}/release.json 2>/dev/null); "
            # The drift marks are the host's, whichever service reads them.
            f"echo drift=$(tr -d '\\n' < {shlex.quote(posixpath.join(LAYOUT.root, DRIFT_FILE))} 2>/dev/null); "
            f"s=$(systemctl show {shlex.quote(layout.unit)} -p ActiveState -p ActiveEnterTimestamp -p NRestarts "
            "-p MainPID 2>/dev/null); echo \"$s\"; "
            # What the process was started from, read back from its environment (launch.sh exports it).
            "p=$(echo \"$s\" | sed -n 's/^MainPID=//p'); "
            "[ \"${p:-0}\" = 0 ] || tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null "
            "| sed -n 's/^SGLFLEET_RELEASE=/serving=/p'; true"
        )

    def process(self, output) -> ReleaseHostState:
        raw, files, holders = {}, {}, []
        for line in output:
            if line.startswith("holder="):
                holders.append(line[len("holder="):].strip())
            elif line.startswith("file "):
                digest, _, name = line[5:].partition("  ")
                files[name] = digest
            elif "=" in line:
                key, _, value = line.partition("=")
                raw[key] = value
        try:
            verdict = json.loads(raw.get("verdict") or "{}")
        except ValueError:
            verdict = {}
        try:
            drift = json.loads(raw.get("drift") or "{}")
        except ValueError:
            drift = {}
        drifted = drift.get("drifted") if isinstance(drift, dict) else None
        try:
            release = json.loads(raw.get("release") or "{}")
        except ValueError:
            release = {}
        verdict = verdict if isinstance(verdict, dict) else {}
        current = posixpath.basename(raw.get("current", "")) or None
        serving = raw.get("serving") or None
        if current and serving != current and served_in_place(verdict.get("in_place"), raw.get("MainPID"),
                                                               raw.get("ActiveEnterTimestamp")):
            serving = current  # its weights were updated to the current release in place
        return ReleaseHostState(
            current=current,
            previous=posixpath.basename(raw.get("previous", "")) or None,
            serving=serving,
            releases=raw.get("releases", "").split(),
            active_state=raw.get("ActiveState") or None,
            active_since=raw.get("ActiveEnterTimestamp") or None,
            n_restarts=int(raw.get("NRestarts") or 0),
            busy=raw.get("busy") == "1",
            holders=holders,
            verdict=verdict if isinstance(verdict, dict) else {},
            files=files if raw.get("staged") == "1" else None,
            drifted=[str(kind) for kind in drifted] if isinstance(drifted, list) else [],
            current_release=release if isinstance(release, dict) else {},
        )


@dataclass
class Installed:
    """
    What sglfleet installed on a host, as units.

    + services: each sglang service by name, with the port its current release serves on
      (None when it has none)
    + gateway: whether the host has sglfleet's ``sglang-gateway.service``
    """

    services: dict[str, int | None] = field(default_factory=dict)
    gateway: bool = False


class InstalledServices(FactBase[Installed]):
    """
    Returns an ``Installed``: the sglang services and the gateway sglfleet installed on
    a host, what a converge retires when the inventory no longer names them.

    A service is installed where its unit is, and the unit is sglfleet's (its first
    line says so): a hand-written ``sglang-*.service`` is not sglfleet's to remove.

    .. code:: python

        Installed(services={"sglang": 30000, "b": 30002}, gateway=False)

    **Example:**

    .. code:: python

        retired = set(host.get_fact(InstalledServices).services) - {"a"}
    """

    @staticmethod
    def default() -> Installed:
        return Installed()

    def command(self) -> str:
        named = LAYOUT.for_service("NAME")
        units = posixpath.dirname(LAYOUT.unit_file)
        prefix = named.unit[:-len("NAME.service")]  # sglang-
        # Each service's port, from its current release's launch.args (one flag per line).
        return (
            f"for f in {shlex.quote(LAYOUT.unit_file)} {shlex.quote(units)}/{prefix}*.service; do "
            f"[ -f \"$f\" ] && head -n 1 \"$f\" | grep -q '^# Managed by sglfleet' || continue; "
            f"u=${{f##*/}}; u=${{u%.service}}; "
            f"case $u in {shlex.quote(GATEWAY.service)}) echo gateway; continue;; "
            f"{shlex.quote(LAYOUT.service)}) n={shlex.quote(LAYOUT.service_name)}; r={shlex.quote(LAYOUT.current)};; "
            f"*) n=${{u#{prefix}}}; r={shlex.quote(LAYOUT.services)}/$n/current;; esac; "
            "echo \"service $n $(sed -n 's/^--port //p' \"$r/launch.args\" 2>/dev/null | head -n 1)\"; done; true"
        )

    def process(self, output) -> Installed:
        installed = Installed()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            name, _, port = rest.partition(" ")
            if kind == "gateway":
                installed.gateway = True
            elif kind == "service" and name:
                installed.services[name] = int(port) if port.isdigit() else None
        return installed
