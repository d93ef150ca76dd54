"""Values computed from content, kept in the controller's cache under a hash of all they depend on.

Placing patch sets parses sglang's files (``server_args.py`` is 5,000 lines) and takes
most of a second; every lint and every pyinfra run asks again for the same sets and
wheels. What they give is a pure function of the sets, the wheel's bytes and the patch
engine's own source, so it is kept under a hash of all three: a changed set, wheel or
engine asks afresh, and nothing kept is ever stale.

**Example:**

.. code:: python

    digests = kept("patched", (patch_engine(), wheel_sha256.encode(), member.encode()), lambda: [...])

(``patch_engine`` is ``sglfleet.plan.patch_verdicts``'s.)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from typing import Any

from sglfleet import cache_dir


def kept(kind: str, inputs: Iterable[bytes], compute: Callable[[], Any]) -> Any:
    """
    ``compute()``, a JSON value, kept under ``kind`` and a hash of ``inputs``: computed once, then read.

    + kind: the folder of the cache it is kept in, e.g. "patch-verdicts"
    + inputs: everything the value depends on, as bytes
    + compute: gives the value where none is kept
    """
    key = hashlib.sha256(b"\0".join(hashlib.sha256(part).digest() for part in inputs)).hexdigest()
    path = cache_dir() / kind / f"{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")  # two processes may ask at once
    partial.write_text(json.dumps(value))
    partial.replace(path)
    return value
