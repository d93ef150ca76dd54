"""The plan of the patch sets on one sglang release: each set's status on its own files, and its diff.

Pure: the release's files come from a reader (the wheel, in ``sglfleet patch plan`` and the lint).

**Example:**

.. code:: python

    for line in plan(load_sets(), "0.5.23", lambda f: sglang_file("0.5.23", f).read_bytes()):
        print(line)    # kimi_k25_eagle3: upstream: sglang/srt/models/kimi_k25.py (...)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sglfleet.artifacts import patcher
from sglfleet.artifacts.patcher import PatchRefused
from sglfleet.artifacts.patchsets import APPLIES, NOT_FOR, UPSTREAM, PatchSet, strip

REFUSED = "refused"


@dataclass(frozen=True)
class Planned:
    """One set's line of a plan: its status on a version's file, why it is refused, and its diff."""

    patch_set: PatchSet
    status: str       # APPLIES, UPSTREAM, NOT_FOR or REFUSED
    reason: str = ""  # the refusal, one line
    diff: str = ""    # what this set changes, after the sets before it on the same file

    def __str__(self) -> str:
        s = self.patch_set
        detail = self.reason if self.status == REFUSED else f"{s.file} ({s.anchor}); {s.upstream}"
        return f"{s.name}: {self.status}: {detail}"


def plan(sets: list[PatchSet], version: str, read: Callable[[str], bytes]) -> list[Planned]:
    """
    Each set's status on sglang ``version``'s own files, in order, with its diff.

    + sets: from ``load_sets``
    + version: the sglang release, e.g. "0.5.9"
    + read: gives a file of that release's wheel by its path in the wheel (KeyError: no such file)

    **Example:**

    .. code:: python

        for line in plan(load_sets(), "0.5.9", lambda f: sglang_file("0.5.9", f).read_bytes()):
            print(line)    # kimi_k25_eagle3: applies: sglang/srt/models/kimi_k25.py (...)
    """
    planned, current = [], {}
    for patch_set in sets:
        if version not in patch_set.versions:
            planned.append(Planned(patch_set, NOT_FOR))
            continue
        try:
            if patch_set.file not in current:
                current[patch_set.file] = strip(read(patch_set.file))
            before = current[patch_set.file]
            if patch_set.has_upstream(before):
                planned.append(Planned(patch_set, UPSTREAM))
                continue
            after = current[patch_set.file] = patch_set.apply(before)
        except KeyError:
            planned.append(Planned(patch_set, REFUSED, f"patch set {patch_set.name}: sglang {version} has no {patch_set.file}"))
            continue
        except PatchRefused as refusal:
            planned.append(Planned(patch_set, REFUSED, str(refusal)))
            continue
        planned.append(Planned(patch_set, APPLIES, diff=patcher.unified_diff(before, after, patch_set.file)))
    return planned
