"""What a host holds of a stack, read in one command: a no-op converge is one round trip.

**Example:**

.. code:: python

    state = host.get_fact(StackState, stack_id=stack.id, python=stack.python, uv_version="0.13.9")
    state.verified        # marker present, for this stack, ok, venv in place
    state.wheels          # {filename: sha256} of the host's wheelhouse, or None when not read
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from sglfleet.artifacts.stacks import MARKER
from sglfleet.facts import sections as cut_sections
from sglfleet.host.layout import LAYOUT, STALE_MINUTES
from sglfleet.host.stacks import PATCHED, SNAPSHOT, describe, snapshot_check_command


@dataclass
class StackHostState:
    stack_id: str
    marker: dict | None = None
    venv: bool = False
    python: str | None = None  # version of python<major.minor>, None when absent
    uv: bool = False
    disk_free: int = 0  # bytes free where stacks live
    disk_path: str = "/"
    stacks: list[str] = field(default_factory=list)  # stacks in /opt/sglfleet/stacks, newest first
    stale: list[str] = field(default_factory=list)  # .build-*/.old-* leftovers over an hour old
    releases: dict[str, str | None] = field(default_factory=dict)  # current/previous -> stack id
    wheels: dict[str, str] | None = None  # read only when the stack is not verified
    drift: list[str] = field(default_factory=list)  # what differs from the venv's snapshot, or its RECORDs
    aria2: bool = False  # aria2c is there, to fetch wheels from peer hosts

    @property
    def built(self) -> bool:
        """The stack was built and its probe passed."""
        marker = self.marker or {}
        return self.venv and marker.get("stack_id") == self.stack_id and marker.get("ok") is True

    @property
    def verified(self) -> bool:
        """Built, verified, and unchanged since: nothing to do."""
        return self.built and not self.drift


def parse_wheels(lines: list[str]) -> dict[str, str]:
    """``sha256sum`` lines -> {filename: sha256}."""
    wheels = {}
    for line in lines:
        digest, _, name = line.partition("  ")
        if name:
            wheels[name.strip().removeprefix("./")] = digest.strip()
    return wheels


class StackState(FactBase[StackHostState]):
    """
    A stack's state on a host: marker, venv, python, uv, free disk, stacks,
    the stacks of the current and previous releases, and (when the stack is not
    verified yet) the sha256 of every wheel in the host's wheelhouse.
    """

    def command(self, stack_id: str, python: str, uv_version: str, hash_wheels: bool = True,
                full: bool = False, patched: list[str] | tuple = (PATCHED,)) -> str:
        """
        + patched: the files the patch step changes (as the wheel names them), left out of
          the drift check and the RECORD check
        """
        marker = shlex.quote(LAYOUT.stack(stack_id, MARKER))
        venv_python = shlex.quote(LAYOUT.python(stack_id))
        snapshot = shlex.quote(LAYOUT.stack(stack_id, SNAPSHOT))
        venv = shlex.quote(LAYOUT.venv(stack_id))
        stacks, wheelhouse = shlex.quote(LAYOUT.stacks), shlex.quote(LAYOUT.wheelhouse)
        # The full check reads every installed file against its wheel's RECORD: on request only.
        records = (f"echo '## records'; [ -x {venv_python} ] && {venv_python} "
                   f"{shlex.quote(LAYOUT.stack(stack_id, 'verify_stack.py'))} "
                   f"--records {' '.join(shlex.quote(member) for member in patched)} 2>&1 | head -n 50" if full else "true")
        # The host's one service's, and each named service's (services/<name>/current): a stack any uses stays.
        releases = (f"{shlex.quote(LAYOUT.current)} {shlex.quote(LAYOUT.previous)} "
                    f"{shlex.quote(LAYOUT.services)}/*/current {shlex.quote(LAYOUT.services)}/*/previous")
        return "\n".join([
            f"echo '## id'; echo {shlex.quote(stack_id)}",
            # On one line: a JSON text's newlines are only whitespace between its tokens.
            f"echo '## marker'; tr -d '\\n' 2>/dev/null < {marker}; echo",
            f"echo '## venv'; [ -x {venv_python} ] && echo yes",
            # `-V` answers before the interpreter initialises: 1 ms instead of 12 for `-c`.
            f"echo '## python'; python{python} -V 2>/dev/null",
            f"echo '## uv'; [ -x {shlex.quote(LAYOUT.uv(uv_version))} ] && echo yes",
            "echo '## aria2'; command -v aria2c >/dev/null && echo yes",
            f"echo '## disk'; d={stacks}; while [ ! -d \"$d\" ]; do d=$(dirname \"$d\"); done; "
            "df -Pk \"$d\" | tail -n 1",
            f"echo '## stacks'; ls -1t {stacks} 2>/dev/null",
            # Build leftovers older than STALE_MINUTES: killed builds, never one in progress.
            f"echo '## stale'; find {stacks} -mindepth 1 -maxdepth 1 \\( -name '.build-*' -o -name '.old-*' \\) "
            f"-mmin +{STALE_MINUTES} -printf '%f\\n' 2>/dev/null",
            f"echo '## releases'; for r in {releases}; do printf '%s\\t' \"$r\"; "
            "tr -d '\\n' < \"$r/release.json\" 2>/dev/null; echo; done",
            # Hashing the wheelhouse costs seconds for a CUDA stack: only when it may be needed.
            f"echo '## wheels'; if {'false' if hash_wheels else 'true'} || grep -qs '\"ok\": true' {marker} && [ -x {venv_python} ]; then echo skipped; "
            f"elif [ -d {wheelhouse} ]; then cd {wheelhouse} && find . -maxdepth 1 -name '*.whl' "
            "-type f -exec sha256sum {} +; fi",
            # Milliseconds, not a re-hash of gigabytes: what the venv holds against its build-time snapshot.
            f"echo '## drift'; if [ -d {venv} ] && [ -f {marker} ]; then "
            f"if [ -f {snapshot} ]; then "
            f"{snapshot_check_command(LAYOUT.venv(stack_id), python, LAYOUT.stack(stack_id, SNAPSHOT), patched)} "
            "| head -n 200; else echo 'no-snapshot'; fi; fi",
            records,
            "true",
        ])

    def process(self, output: list[str]) -> StackHostState:
        sections = cut_sections(output)
        state = StackHostState(stack_id="")
        marker_text = "\n".join(sections.get("marker", [])).strip()
        try:
            state.marker = json.loads(marker_text) if marker_text else None
        except ValueError:
            state.marker = {"invalid": marker_text[:200]}
        state.stack_id = "".join(sections.get("id", [])).strip()
        state.venv = sections.get("venv") == ["yes"]
        python = [line.split()[-1] for line in sections.get("python", []) if line.startswith("Python ")]
        state.python = python[0] if python else None
        state.uv = sections.get("uv") == ["yes"]
        state.aria2 = sections.get("aria2") == ["yes"]
        disk = (sections.get("disk") or [""])[-1].split()
        if len(disk) >= 6:
            state.disk_free, state.disk_path = int(disk[3]) * 1024, disk[5]
        state.stacks = [line.strip() for line in sections.get("stacks", []) if line.strip()]
        state.stale = [line.strip() for line in sections.get("stale", []) if line.strip()]
        for line in sections.get("releases", []):
            path, _, text = line.partition("\t")
            if "*" in path:
                continue  # no named service: the glob matched nothing
            if "/services/" in path:  # services/<name>/current
                key = "/".join(path.split("/")[-3:])
                try:
                    state.releases[key] = json.loads(text).get("stack") if text else None
                except ValueError:
                    state.releases[key] = None
                continue
            try:
                state.releases[path.rsplit("/", 1)[-1]] = json.loads(text).get("stack") if text else None
            except ValueError:
                state.releases[path.rsplit("/", 1)[-1]] = None
        wheels = sections.get("wheels", [])
        state.wheels = None if wheels == ["skipped"] else parse_wheels(wheels)
        drift = sections.get("drift", [])
        if drift == ["no-snapshot"]:
            state.drift = ["no snapshot of the venv (built by an earlier sglfleet)"]
        else:
            state.drift = describe([line[2:] for line in drift if line.startswith("< ")],
                                   [line[2:] for line in drift if line.startswith("> ")])
        state.drift += [line for line in sections.get("records", []) if line.strip()]
        return state


class WheelhouseFiles(FactBase[dict[str, str]]):
    """``{filename: sha256}`` of every wheel in the host's wheelhouse."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self) -> str:
        wheelhouse = shlex.quote(LAYOUT.wheelhouse)
        return (f"[ -d {wheelhouse} ] && cd {wheelhouse} && "
                "find . -maxdepth 1 -name '*.whl' -type f -exec sha256sum {} + || true")

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_wheels(output)
