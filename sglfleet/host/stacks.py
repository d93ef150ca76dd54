"""
A stack's venv, checked cheaply on every converge: a snapshot of every entry's
path, type, size and modification time, taken when the stack is built and
verified, compared with the venv as it is now.

A file added (a stray ``.pth`` or ``sitecustomize.py`` runs at every start),
removed, grown or rewritten changes the listing. Reading it costs one ``find``
over the venv, not a hash of gigabytes; ``verify_stack.py --records`` checks
every file's content against the wheels' RECORD when asked.

**Example:**

.. code:: python

    snapshot_command("/opt/sglfleet/stacks/dev-0a24/venv", "3.11")  # "find ... | LC_ALL=C sort"
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess

SNAPSHOT = "venv.snapshot"  # beside the marker, in the stack's folder
# When the build began and finished (seconds since the epoch), beside the marker: the build writes it.
BUILD = "build.json"
# The file of the first patch set (the KimiK25 EAGLE-3 methods), in site-packages: the host
# read brings it on every converge, and the patch step checks it against the digests the
# patch sets give. The other sets' files the patch step reads itself.
PATCHED = "sglang/srt/models/kimi_k25.py"


def site_packages(python: str) -> str:
    """The ``site-packages`` folder of a venv of python ``python`` (e.g. "3.11"), relative to the venv."""
    return f"lib/python{python}/site-packages"


def patched(python: str, member: str = PATCHED) -> str:
    """A patched file's path in a venv of python ``python`` (e.g. "3.11"), relative to the venv."""
    return f"{site_packages(python)}/{member}"


def build_record_command(folder: str) -> str:
    """A shell command that writes ``BUILD`` into ``folder``: the build script's ``$started`` and the time now."""
    return (f"printf '{{\"started\": %s, \"finished\": %s}}\\n' \"$started\" \"$(date +%s.%N)\" "
            f"> {shlex.quote(f'{folder}/{BUILD}')}")


def builds(stacks: str) -> list[tuple[str, float, float]]:
    """
    ``(stack_id, seconds the build took, when it finished)`` of each stack under ``stacks``
    that recorded its build (those built before sglfleet recorded builds did not).

    + stacks: the stacks folder, e.g. ``/opt/sglfleet/stacks``
    """
    found = []
    for name in sorted(os.listdir(stacks)) if os.path.isdir(stacks) else []:
        if name.startswith("."):  # builds in progress, old stacks on their way out
            continue
        try:
            with open(os.path.join(stacks, name, BUILD)) as handle:
                record = json.load(handle)
            started, finished = float(record["started"]), float(record["finished"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        found.append((name, max(finished - started, 0.0), finished))
    return found


def snapshot_command(venv: str, python: str) -> str:
    """A shell command that prints the snapshot of ``venv``, one sorted line per entry, the patched file left out."""
    skip = shlex.quote(f"{venv.rstrip('/')}/{patched(python)}")
    # Folders without their time: adding and removing a file leaves no change behind.
    return (f"find {shlex.quote(venv)} -path {skip} -prune -o \\( -type d -printf '%P\\td\\n' \\) "
            f"-o -printf '%P\\t%y\\t%s\\t%T@\\n' | LC_ALL=C sort")


def snapshot_check_command(venv: str, python: str, recorded: str, members=(PATCHED,)) -> str:
    """
    A shell command that prints how ``venv`` differs from its snapshot file ``recorded``, as
    ``diff``'s ``<`` and ``>`` lines; the files the patch sets change (``members``, as the
    wheel names them) left out, whatever snapshot recorded them. A file no set changes any
    more counts again: a patched one is drift, and the stack is built again without it.
    """
    skip = " ".join(f"-e {shlex.quote(f'{side} {patched(python, member)}' + chr(9))}"
                    for side in "<>" for member in members)
    return (f"{snapshot_command(venv, python)} | diff {shlex.quote(recorded)} - | grep '^[<>]'"
            + (f" | grep -v -F {skip}" if skip else ""))


def differences(venv: str, python: str, recorded: str, limit: int = 10) -> list[str]:
    """
    What differs between ``venv`` now and its snapshot file ``recorded`` (see ``describe``); [] when none.
    """
    now = subprocess.run(snapshot_command(venv, python), shell=True, capture_output=True, text=True).stdout
    try:
        with open(recorded) as handle:
            before = handle.read()
    except OSError:
        return [f"no snapshot {recorded}"]
    return describe(before.splitlines(), now.splitlines(), limit)


def describe(before: list[str], now: list[str], limit: int = 10) -> list[str]:
    """
    The entries that differ between two snapshots, one line each: ``added <path>``,
    ``removed <path>`` or ``changed <path>`` (size or time), at most ``limit``. Pure.
    """
    old = dict(line.split("\t", 1) for line in before if "\t" in line)
    new = dict(line.split("\t", 1) for line in now if "\t" in line)
    lines = sorted([f"added {path or '.'}" for path in new.keys() - old.keys()]
                   + [f"removed {path or '.'}" for path in old.keys() - new.keys()]
                   + [f"changed {path or '.'}" for path in old.keys() & new.keys() if old[path] != new[path]],
                   key=lambda line: line.split(" ", 1)[1])
    return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])
