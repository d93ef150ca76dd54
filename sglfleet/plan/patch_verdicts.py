"""Whether a patch set can be placed in an sglang release's own file, kept in the controller's cache.

Placing a set parses the release's file (``server_args.py`` is 5,000 lines) and takes
most of a second; every lint and every pyinfra run asks again for the same sets and
wheels. A verdict is a pure function of the set, the file's bytes and the engine's
own source, so it is kept under a hash of all three: a changed set, a changed wheel
or a changed engine asks afresh.

**Example:**

.. code:: python

    refusal("0.5.9", patch_set)   # None: it applies (or upstream has it); else the one-line refusal
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

from sglfleet import cache_dir
from sglfleet.artifacts import patcher, patchsets, replacer
from sglfleet.artifacts.upstream import sglang_file
from sglfleet.plan import patch_plan


@cache
def _engine() -> bytes:
    """The patch engine's source, hashed: a verdict holds only for the engine that gave it."""
    sources = (patcher, replacer, patchsets, patch_plan)
    return hashlib.sha256(b"".join(Path(module.__file__).read_bytes() for module in sources)).digest()


@cache
def refusal(version: str, patch_set: patchsets.PatchSet) -> str | None:
    """
    Why ``patch_set`` cannot be placed in sglang ``version``'s own file (its wheel, cached), or None.

    + version: the sglang release, e.g. "0.5.9"
    + patch_set: from ``load_sets``, for ``version``
    """
    try:
        source = sglang_file(version, patch_set.file).read_bytes()
    except KeyError:
        source = b""  # no such file in the wheel: the plan refuses it, and the key says so
    key = hashlib.sha256(b"\0".join((_engine(), repr(patch_set).encode(), version.encode(), source)))
    kept = cache_dir() / "patch-verdicts" / f"{key.hexdigest()}.json"
    if kept.exists():
        return json.loads(kept.read_text())["refusal"]
    (planned,) = patch_plan.plan([patch_set], version, lambda member: sglang_file(version, member).read_bytes())
    verdict = planned.reason if planned.status == patch_plan.REFUSED else None
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_name(f".{kept.name}.{os.getpid()}")  # two processes may ask at once
    partial.write_text(json.dumps({"set": patch_set.name, "version": version, "refusal": verdict}))
    partial.replace(kept)
    return verdict
