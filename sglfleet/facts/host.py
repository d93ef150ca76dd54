"""Everything a converge decides from, read from a host in one command.

Each concern keeps its own fact (``NvidiaGpus``, ``StackState``, ``ReleaseState``
...), and each fact keeps its own command and parser. ``HostRead`` runs all of
their commands in one shell, each in a subshell after a marker line, and hands
each fact the lines under its marker: a host that needs nothing costs one round
trip, and every answer is the same typed value its own fact gives.

With ``sudo_check``, the read runs as the SSH user, asks ``sudo -n`` first (the
answer ``SudoAccess`` gives), and runs the rest under ``sudo -H -n``.

A stack serves several Pythons, and what the read asks of the stack (its id,
the patch target, the release) depends on which one the host has. With
``variants``, the host's own ``python3`` picks the arguments of its Python in
the same shell (a ``case``), after ``HostOs`` has read the OS: still one round
trip.

**Example:**

.. code:: python

    found = host.get_fact(HostRead, stack_id=stack.id, python="3.11", uv_version="0.9.2",
                          user="sglang", paths=[LAYOUT.unit_file], patch_path=kimi, patch_known=[digest],
                          release_id="3f2a9c1d0b7e6a55")
    found.stack.verified, found.release.current, found.files["files"][LAYOUT.unit_file]

A host with several ``services`` (``service_releases``) reads each one's releases in
the same command: ``found.services["small"].current``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from functools import cache

from pyinfra.api import FactBase, FactProcessError

from sglfleet.facts import sections as cut_sections
from sglfleet.facts.files import FileBytesUnlessKnown, FileDigests
from sglfleet.facts.firewall import FirewallHostState, FirewallState
from sglfleet.facts.gateway import GatewayService
from sglfleet.facts.gpu import Gpu, NvidiaGpus
from sglfleet.facts.models import ModelState
from sglfleet.facts.os import HostOs, OsInfo
from sglfleet.facts.rdma import RdmaDevices
from sglfleet.facts.release import Installed, InstalledServices, ReleaseHostState, ReleaseState
from sglfleet.facts.stack import StackHostState, StackState
from sglfleet.facts.sudo import SudoAccess
from sglfleet.facts.users import PasswdEntry
from sglfleet.host.layout import LAYOUT
from sglfleet.host.stacks import PATCHED

MARK = "#sglfleet-read "
END = f"{MARK}end"
# The parts that depend on the host's Python: the stack's id and venv, the patch target in it, the release
# (and each service's, ``release:<name>``).
PER_PYTHON = ("stack", "patch", "release")
SERVICE_PART = "release:"
USER_PART = "user:"  # each service's own user
PATCH_PART = "patch:"  # each other file the patch sets change, by its path on the host


def _per_python(name: str) -> bool:
    return name in PER_PYTHON or name.startswith((SERVICE_PART, PATCH_PART))


@dataclass
class HostState:
    """
    One host as a converge finds it, each part as its own fact answers.

    + sudo: ``SudoAccess``'s answer, or None when the read did not ask (no sudo, or a sudo password)
    + os: ``HostOs``'s: the distribution, glibc and python3
    + gpus: ``NvidiaGpus``'s
    + rdma: ``RdmaDevices``'s: the RDMA devices a PD service's transfer backend moves the KV cache over
    + stack: ``StackState``'s (wheels not hashed)
    + user: ``PasswdEntry``'s for the service user
    + files: ``FileDigests``'s for the service's files (the unit, the env file, the host tool)
    + patch: ``FileBytesUnlessKnown``'s for the patch target: its digest when known, else its bytes
    + patches: ``FileBytesUnlessKnown``'s for each other file the patch sets change, by its path
    + release: ``ReleaseState``'s, with the staged files of the release this run serves
    + models: ``ModelState``'s answers, or None when the host pins no model
    + gateway: ``GatewayService``'s, on a gateway host (which reads no GPU, patch, release or model)
    + services: ``ReleaseState``'s for each service, by name: ``{"sglang": release}`` on a host of one service
    + users: ``PasswdEntry``'s for each service's user, by service name: ``{"sglang": user}`` likewise
    + installed: ``InstalledServices``'s: the services and gateway whose units sglfleet installed
    + firewall: ``FirewallState``'s: the policy sglfleet confirmed, and sglfleet's table now
    + firewall_rules: ``FileBytesUnlessKnown``'s for the confirmed policy's file: its digest where it is
      the planned one, else its bytes (for the diff); None where the firewall is off
    """

    sudo: dict | None = None
    os: OsInfo = field(default_factory=OsInfo)
    gpus: list[Gpu] = field(default_factory=list)
    rdma: list[str] = field(default_factory=list)
    stack: StackHostState = field(default_factory=lambda: StackHostState(stack_id=""))
    user: dict | None = None
    files: dict = field(default_factory=lambda: {"files": {}, "leftovers": []})
    patch: str | bytes | None = None
    patches: dict = field(default_factory=dict)
    release: ReleaseHostState | None = None
    models: list | None = None
    gateway: dict | None = None
    services: dict = field(default_factory=dict)
    users: dict = field(default_factory=dict)
    installed: Installed = field(default_factory=Installed)
    firewall: FirewallHostState = field(default_factory=FirewallHostState)
    firewall_rules: str | bytes | None = None


class HostRead(FactBase[HostState]):
    """
    Returns a ``HostState``: the answers of every fact a converge decides from, in one round trip.
    """

    @staticmethod
    def default() -> HostState:
        return HostState()

    def _parts(self, stack_id, python, uv_version, user, paths, patch_path, patch_known, release_id,
               model_spec, full, gateway_unit=None, gateway_runtime_dir=None, service_releases=None,
               patched=(PATCHED,), patch_more=None, firewall_known=None):
        # Each part's command is made only where the read runs it (a Python's variant runs its own parts alone).
        network = {"firewall": lambda: FirewallState().command()}
        if firewall_known is not None:
            network["firewall_rules"] = lambda: FileBytesUnlessKnown().command(LAYOUT.firewall_rules, firewall_known)
        if gateway_unit:  # a gateway host: its stack, its files and its gateway, nothing of sglang
            return {
                "stack": lambda: StackState().command(stack_id, python, uv_version, hash_wheels=False, full=full),
                "files": lambda: FileDigests().command(paths),
                "gateway": lambda: GatewayService().command(gateway_unit, gateway_runtime_dir),
                "installed": lambda: InstalledServices().command(),
                **network,
            }
        parts = {
            "gpus": lambda: f"if command -v nvidia-smi >/dev/null 2>&1; then {NvidiaGpus().command()}; fi",
            "rdma": lambda: RdmaDevices().command(),
            "stack": lambda: StackState().command(stack_id, python, uv_version, hash_wheels=False, full=full,
                                                  patched=patched),
            "user": lambda: PasswdEntry().command(user),
            "files": lambda: FileDigests().command(paths),
            "patch": lambda: FileBytesUnlessKnown().command(patch_path, patch_known),
            "installed": lambda: InstalledServices().command(),
            **network,
        }
        parts.update({f"{PATCH_PART}{path}": (lambda path=path, known=known: FileBytesUnlessKnown().command(path, known))
                      for path, known in (patch_more or {}).items()})
        if service_releases:  # several services: each one's releases, none at the host's root
            parts.update({f"{SERVICE_PART}{name}": (lambda one=one, name=name: ReleaseState().command(one, service=name))
                          for name, one in service_releases.items()})
            parts.update({f"{USER_PART}{name}": (lambda name=name: PasswdEntry().command(
                LAYOUT.for_service(name).service_user)) for name in service_releases})
        else:
            parts["release"] = lambda: ReleaseState().command(release_id)
        if model_spec:
            parts["models"] = lambda: ModelState().command(model_spec)
        return parts

    @staticmethod
    def _joined(parts: dict, names) -> str:
        # A subshell each: a part's own `exit` or `cd` ends or moves only that part.
        return "; ".join(f"echo {shlex.quote(MARK + name)}; ( {parts[name]()}\n)"
                         for name in names if name in parts)

    def command(self, stack_id: str, python: str, uv_version: str, user: str, paths: list[str],
                patch_path: str | None, patch_known: list[str], release_id: str | None,
                model_spec: list | None = None, full: bool = False, sudo_check: bool = False,
                variants: dict[str, dict] | None = None, gateway_unit: str | None = None,
                gateway_runtime_dir: str | None = None, service_releases: dict[str, str] | None = None,
                patched: list[str] | tuple = (PATCHED,), patch_more: dict[str, list[str]] | None = None,
                firewall_known: list[str] | None = None) -> str:
        """
        + variants: ``{python: {"stack_id": ..., "patch_path": ..., "patch_known": ..., "release_id": ...}}``
          for each Python the stack serves; the host's ``python3`` picks one. The arguments
          given besides are read on a host of any other Python (one preflight refuses). A variant may
          give ``service_releases`` too
        + patched: the files of the stack's sglang the patch step changes, left out of its drift check
        + patch_more: ``{path: known digests}`` of the other files the patch step visits (``patch_path``
          is the first); a variant gives its own
        + gateway_unit, gateway_runtime_dir: on a gateway host, its unit and runtime folder: the read
          then holds its stack, its files and its gateway, nothing of sglang
        + firewall_known: the planned policy's digest, as a list: its file is read where it differs;
          None where the firewall is off
        """
        arguments = {name: value for name, value in locals().items() if name != "self"}
        # Made once for each set of arguments: a fleet's hosts mostly share theirs.
        return _read_command(json.dumps({**arguments, "patched": list(patched)}, sort_keys=True))

    def _built_command(self, variants: dict[str, dict] | None, sudo_check: bool, **common) -> str:
        common["patched"] = tuple(common["patched"])
        parts = self._parts(**common)
        body = (f"echo {shlex.quote(MARK + 'os')}; ( {HostOs().command()}\n); "
                + self._joined(parts, [name for name in parts if not _per_python(name)]))
        if variants:
            # "Python 3.13.5": the trailing dot keeps 3.1 from matching 3.13. Each pattern opens with "(",
            # as POSIX allows, so that the case parses inside the $( ) below.
            branches = "".join(
                f"({shlex.quote(f'Python {version}.')}*) "
                f"{self._joined(branch, [name for name in branch if _per_python(name)])};; "
                for version, given in variants.items()
                for branch in [self._parts(**{**common, 'python': version, **given})])
            body += (f'; case "$(python3 -V 2>&1)" in {branches}(*) '
                     f'{self._joined(parts, [name for name in parts if _per_python(name)])};; esac')
        else:
            body += "; " + self._joined(parts, [name for name in parts if _per_python(name)])
        body += f"; echo {shlex.quote(END)}"
        # Written in one go: each part's lines sent as they come cost the controller an SSH
        # message apiece (about 50 a host), more than all the bytes.
        body = f'r=$({body}\n); printf \'%s\\n\' "$r"'
        if not sudo_check:
            return body
        return (f"echo {shlex.quote(MARK + 'sudo')}; ( {SudoAccess().command()} ); "
                f"sudo -H -n sh -c {shlex.quote(body)} 2>/dev/null || true")

    def process(self, output: list[str]) -> HostState:
        sections = cut_sections(output, MARK)
        found = HostState()
        if "sudo" in sections:
            found.sudo = SudoAccess().process(sections["sudo"])
            if found.sudo["status"] != "ok":
                return found  # nothing else was read: the access check says why
        if "end" not in sections:
            raise FactProcessError(f"the host read ended early, after {', '.join(sections) or 'nothing'}")
        readers = {"os": HostOs(), "gpus": NvidiaGpus(), "rdma": RdmaDevices(), "stack": StackState(), "user": PasswdEntry(),
                   "files": FileDigests(), "patch": FileBytesUnlessKnown(), "release": ReleaseState(),
                   "models": ModelState(), "gateway": GatewayService(), "installed": InstalledServices(),
                   "firewall": FirewallState(), "firewall_rules": FileBytesUnlessKnown()}
        for name, fact in readers.items():
            if name in sections:
                setattr(found, name, fact.process(sections[name]) if sections[name] else fact.default())
        found.services = {name[len(SERVICE_PART):]: ReleaseState().process(lines) if lines else None
                          for name, lines in sections.items() if name.startswith(SERVICE_PART)}
        found.users = {name[len(USER_PART):]: PasswdEntry().process(lines) if lines else None
                       for name, lines in sections.items() if name.startswith(USER_PART)}
        found.patches = {name[len(PATCH_PART):]: FileBytesUnlessKnown().process(lines) if lines else None
                         for name, lines in sections.items() if name.startswith(PATCH_PART)}
        if "user" in sections and not found.users:
            found.users = {LAYOUT.service_name: found.user}
        if "release" in sections:
            found.services = {LAYOUT.service_name: found.release}
        elif found.services:  # "the release" of a host of services: its first, for checks that a read answered
            found.release = next(iter(found.services.values()))
        return found


class _Read:
    """The marker of an answer an operation was not given: it reads its own fact."""

    def __repr__(self) -> str:
        return "READ"


READ = _Read()


@cache
def _read_command(arguments: str) -> str:
    # A pure function of the arguments' JSON.
    return HostRead()._built_command(**json.loads(arguments))

