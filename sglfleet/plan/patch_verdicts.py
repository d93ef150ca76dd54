"""Whether a patch set can be placed in an sglang release's own file, kept in the controller's cache.

Every lint and every pyinfra run asks this of each set its hosts' stacks get
(``sglfleet.artifacts.kept`` says why it is kept, and under what).

**Example:**

.. code:: python

    refusal("0.5.9", patch_set)   # None: it applies (or upstream has it); else the one-line refusal
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from sglfleet.artifacts import patcher, patchsets, replacer
from sglfleet.artifacts.kept import kept
from sglfleet.artifacts.patchsets import PatchSet
from sglfleet.artifacts.upstream import sglang_file
from sglfleet.plan import patch_plan



@cache
def patch_engine() -> bytes:
    """The patch engine's source, hashed: what it computed holds only for the engine that computed it."""
    sources = (patcher, replacer, patchsets, patch_plan)
    return hashlib.sha256(b"".join(Path(module.__file__).read_bytes() for module in sources)).digest()


@cache
def refusal(version: str, patch_set: PatchSet) -> str | None:
    """
    Why ``patch_set`` cannot be placed in sglang ``version``'s own file (its wheel, cached), or None.

    + version: the sglang release, e.g. "0.5.9"
    + patch_set: from ``load_sets``, for ``version``
    """
    def read(member: str) -> bytes:
        return sglang_file(version, member).read_bytes()

    def verdict() -> dict:
        (planned,) = patch_plan.plan([patch_set], version, read)
        return {"set": patch_set.name, "version": version,
                "refusal": planned.reason if planned.status == patch_plan.REFUSED else None}

    try:
        source = read(patch_set.file)
    except KeyError:
        source = b""  # no such file in the wheel: the plan refuses it, and the key says so
    inputs = (patch_engine(), repr(patch_set).encode(), version.encode(), source)
    return kept("patch-verdicts", inputs, verdict)["refusal"]
