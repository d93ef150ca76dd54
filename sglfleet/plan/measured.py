"""
What preflight measured of each host's GPUs, kept on the controller, so the
lint (which never connects) can judge launch flags by the GPUs a host really
has, and say whether a capability was measured or only declared.

**Example:**

.. code:: python

    record("gpu-rtx-02", gpus)          # in preflight, from nvidia-smi
    measured_caps("gpu-rtx-02")         # (["12.0"] * 8, "measured by preflight on 2026-12-01")
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from sglfleet import PROJECT_ROOT


def _folder() -> Path:
    return Path(os.environ.get("SGLFLEET_CACHE", PROJECT_ROOT / ".cache")) / "measured"


def _path(host_name: str) -> Path:
    return _folder() / f"{host_name.replace('/', '_')}.json"


def record(host_name: str, gpus) -> None:
    """
    Keep what nvidia-smi reported for ``host_name`` (nothing for a host without GPUs).

    + host_name: the inventory name
    + gpus: the ``NvidiaGpus`` fact
    """
    if not gpus:
        return
    path = _path(host_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps({"compute_caps": [gpu.compute_cap for gpu in gpus],
                                     "names": sorted({gpu.name for gpu in gpus}),
                                     "at": time.strftime("%Y-%m-%d")}) + "\n")
    temporary.replace(path)


def measured_caps(host_name: str) -> tuple[list[str], str] | None:
    """The compute capability of each GPU preflight last measured on the host, and when; None if never."""
    try:
        data = json.loads(_path(host_name).read_text())
    except (OSError, ValueError):
        return None
    return list(data["compute_caps"]), f"measured by preflight on {data['at']}"
