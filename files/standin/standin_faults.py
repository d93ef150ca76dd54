"""
Faults the stand-in can be told to show, for the tests of the gate and of rollback.

The fault file (``SGLFLEET_STANDIN_FAULT_FILE``, default
``/etc/sglfleet/standin-fault``) is read once at start (``update-fails``: at each
weight update, ``update_fails``). Its first line is the
fault, optionally followed by a line ``spare <release-id>``: starts of that
release (``current`` under ``SGLFLEET_ROOT``, default ``/opt/sglfleet``) are
spared, so a host fails on its new release and a rollback serves again.

- ``crash``: exit 1 while "loading the model", as a CUDA error would.
- ``hang``: the port accepts connections and never answers.
- ``unready``: the server's own warm-up request never completes, so
  ``/health`` stays 503 (``server_status`` stays ``Starting``).
- ``slow``: loading takes ten times ``SGLFLEET_STANDIN_WARMUP`` (or
  ``SGLFLEET_STANDIN_SLOW_WARMUP`` seconds) and every prefill pass takes
  ``SGLFLEET_STANDIN_SLOW_GENERATE`` seconds more (default 2), so each
  generation and each ``/health`` check is that much slower.
- ``slow-load <seconds>``: loading takes ``<seconds>`` more, as with cold
  compile caches or a slow disk; once up, the server is as fast as ever. It
  gives one host a long start (time to strike during its gate) while the
  others start at their usual pace.
- ``slow-after <seconds> [<factor>]``: from ``<seconds>`` after the server is
  up (its warm-up done), every forward pass takes ``<factor>`` times as long
  (default 20): time to first token and inter-token latency regress after a
  start-up gate has passed. The slow-down added to one generation stops at
  5 s, so requests still end.
- ``corrupt-cache``: the kernels this start compiles are written to the compile
  caches corrupt, as a faulty disk or a broken compiler might leave them; this
  process runs the good ones and serves, and the next start that loads them
  crashes (``standin_compile``).
- ``update-fails``: ``POST /update_weights_from_disk`` of any folder but the one
  this process started with answers 400 and changes nothing, as for a folder
  without weights (``standin_weights``): an update in place that fails, and one back
  to the revision it started with that serves again. The ``spare`` line is for starts.

**Example:**

.. code:: text

    slow-after 30 20
    spare 3f9c2a61d0
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("sglang.standin")

DEFAULT_FAULT_FILE = "/etc/sglfleet/standin-fault"
FAULTS = ("crash", "hang", "unready", "slow", "slow-load", "slow-after", "corrupt-cache", "update-fails")


@dataclass(frozen=True)
class Fault:
    """A fault mode; for ``slow-after``, when it starts and how slow it makes passes;
    for ``slow-load``, the seconds loading takes more."""

    mode: str
    after_s: float = 0.0
    factor: float = 20.0
    load_s: float = 0.0


def serving_release() -> str | None:
    """The release this start belongs to: sglang.service starts through /opt/sglfleet/current."""
    current = Path(os.environ.get("SGLFLEET_ROOT", "/opt/sglfleet")) / "current"
    return current.resolve().name if current.is_symlink() else None


def update_fails() -> bool:
    """Whether the fault file says ``update-fails`` now (read at each update; no start to spare)."""
    try:
        lines = Path(os.environ.get("SGLFLEET_STANDIN_FAULT_FILE", DEFAULT_FAULT_FILE)).read_text().split()
    except OSError:
        return False
    return lines[:1] == ["update-fails"]


def read_fault() -> Fault | None:
    """The fault of this start, or None (no file, spared, or not understood)."""
    path = Path(os.environ.get("SGLFLEET_STANDIN_FAULT_FILE", DEFAULT_FAULT_FILE))
    try:
        lines = [line.split() for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return None
    if not lines:
        return None
    (word, *params), rest = lines[0], [w for line in lines[1:] for w in line]
    if rest[:1] == ["spare"] and rest[1:2] == [serving_release()]:
        return None
    if word not in FAULTS:
        logger.warning(f"stand-in: ignoring unknown fault {word!r} in {path} "
                       f"(one of {', '.join(FAULTS)})")
        return None
    if word == "slow-load":
        try:
            (seconds,) = (float(p) for p in params)
            if seconds < 0:
                raise ValueError
        except ValueError:
            logger.warning(f"stand-in: ignoring {' '.join([word, *params])!r} in {path} (slow-load <seconds>)")
            return None
        return Fault(word, load_s=seconds)
    if word != "slow-after":
        return Fault(word)
    try:
        numbers = [float(p) for p in params]
        if not 1 <= len(numbers) <= 2 or numbers[0] < 0 or numbers[-1] < 1:
            raise ValueError
    except ValueError:
        logger.warning(f"stand-in: ignoring {' '.join([word, *params])!r} in {path} "
                       "(slow-after <seconds> [<factor of at least 1>])")
        return None
    return Fault(word, numbers[0], numbers[1] if len(numbers) == 2 else 20.0)
