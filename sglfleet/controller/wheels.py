"""
The stacks' wheels in the controller's wheelhouse, during a run: each stack's fetched and
checked against its lock once a run, however many hosts take it; and what sglang's files
hash to once patched, computed from the stack's own sglang wheel.

**Example:**

.. code:: python

    wheels = host_wheels(run, stack)                 # {filename: Local(path, sha256, size)}
    patched_digests(run, stack, PATCHED, sets)       # ("4ccbc2d7...",): kimi_k25.py with its sets placed
"""

from __future__ import annotations

import hashlib
import zipfile
from functools import cache

from pyinfra.api.exceptions import PyinfraError

from sglfleet.artifacts import wheelhouse
from sglfleet.artifacts.kept import kept
from sglfleet.artifacts.patcher import PatchRefused
from sglfleet.artifacts.patchsets import PatchSet, apply_sets
from sglfleet.artifacts.stacks import Stack, StackError
from sglfleet.host.stacks import PATCHED
from sglfleet.plan.patch_verdicts import patch_engine
from sglfleet.record.run import RunRecord

SGLANG = frozenset({"sglang"})


def host_wheels(run: RunRecord, stack: Stack) -> dict[str, wheelhouse.Local]:
    """
    The files of a host's stack (one of its Pythons) in the controller's wheelhouse, ``{filename: Local}``,
    fetched and checked against the lock once this run; else a ``PyinfraError`` that stops the run before
    any host changes.

    + run: this run's record, where what was fetched is kept
    + stack: the host's stack for its ``python3`` (``HostPlan.build``)

    **Example:**

    .. code:: python

        host_wheels(run, stack)[stack.uv.filename].sha256   # what the host's copy must hash to
    """
    try:
        # Only the Pythons the fleet has: a lock for three fetches no wheel a host will not take.
        return _fetched(run, stack)
    except StackError as e:
        raise PyinfraError(str(e)) from None


def _fetched(run: RunRecord, stack: Stack, names: frozenset[str] | None = None) -> dict[str, wheelhouse.Local]:
    """``wheelhouse.ensure``'s answer, once a run for each stack and names."""
    known = run.wheels
    if (stack.id, names) not in known:
        known[stack.id, names] = wheelhouse.ensure(stack, names=names)
    return known[stack.id, names]


@cache
def _patched_digests(wheel: str, sha256: str, member: str, sets: tuple[PatchSet, ...]) -> tuple[str, ...]:
    # A pure function of its arguments: ``sha256`` names the wheel's bytes (an unhashed lock's too,
    # hashed as the wheelhouse keeps it), and a PatchSet compares by what it changes. Kept across
    # runs (``sglfleet.artifacts.kept``): placing the sets parses each file, most of a second a run.
    def digests() -> list[str]:
        try:
            with zipfile.ZipFile(wheel) as archive:
                return [hashlib.sha256(apply_sets(archive.read(member), list(sets))[0]).hexdigest()]
        except (KeyError, PatchRefused):
            return []  # no such file, or one the engine refuses: each host reads and reports its own

    inputs = (patch_engine(), sha256.encode(), member.encode(), repr(sets).encode())
    return tuple(kept("patched-digests", inputs, digests))


def patched_digests(run: RunRecord, stack: Stack, member: str = PATCHED,
                    sets: list[PatchSet] | tuple = ()) -> tuple[str, ...]:
    """
    The sha256 of the stack's ``member`` (a file of the sglang wheel) once patched with
    ``sets``, from the stack's own sglang wheel: a host file with it need not be read or parsed.

    + run: this run's record, where the stack's sglang wheel, once fetched, is kept
    + stack: the host's stack
    + member: the file, as the wheel names it (default ``kimi_k25.py``)
    + sets: its patch sets, in order (``for_file``)
    """
    # The sglang wheel alone: the read asks this of every Python the stack serves.
    wheels = list(_fetched(run, stack, SGLANG).values())
    return _patched_digests(str(wheels[0].path), wheels[0].sha256, member, tuple(sets)) if wheels else ()
