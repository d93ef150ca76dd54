"""
What preflight measured of each host's GPUs and OS, kept on the controller, so
the lint (which never connects) can judge launch flags by the GPUs a host really
has and its stack by the ``python3`` and glibc it really has, and say whether a
fact was measured or only declared.

**Example:**

.. code:: python

    record("gpu-rtx-02", gpus, os)      # in preflight, from nvidia-smi and HostOs
    measured_caps("gpu-rtx-02")         # (["12.0"] * 8, "measured by preflight on 2026-12-01")
    measured_os("gpu-rtx-02")           # (OsInfo(id="ubuntu", python="3.12.3", ...), "measured by ...")
"""

from __future__ import annotations

import json
import os as os_module
import time
from pathlib import Path

from sglfleet import cache_dir
from sglfleet.facts.os import OsInfo


def _folder() -> Path:
    return cache_dir() / "measured"


def _path(host_name: str) -> Path:
    return _folder() / f"{host_name.replace('/', '_')}.json"


def record(host_name: str, gpus, os=None) -> None:
    """
    Keep what nvidia-smi reported for ``host_name`` and what its OS is.

    + host_name: the inventory name
    + gpus: the ``NvidiaGpus`` fact
    + os: ``HostOs``'s answer (``OsInfo``), or None
    """
    if not gpus and os is None:
        return
    data = {"at": time.strftime("%Y-%m-%d")}
    if gpus:
        data.update(compute_caps=[gpu.compute_cap for gpu in gpus], names=sorted({gpu.name for gpu in gpus}))
    if os is not None:
        data["os"] = {field: getattr(os, field) for field in ("id", "version_id", "pretty", "glibc", "python")}
    path, text = _path(host_name), json.dumps(data) + "\n"
    try:
        if path.read_text() == text:
            return  # measured the same today: a converge of an unchanged fleet writes nothing
    except OSError:
        path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os_module.getpid()}")
    temporary.write_text(text)
    temporary.replace(path)


def measured_caps(host_name: str) -> tuple[list[str], str] | None:
    """The compute capability of each GPU preflight last measured on the host, and when; None if never."""
    try:
        data = json.loads(_path(host_name).read_text())
    except (OSError, ValueError):
        return None
    if "compute_caps" not in data:
        return None
    return list(data["compute_caps"]), f"measured by preflight on {data['at']}"


def measured_os(host_name: str) -> tuple[OsInfo, str] | None:
    """The host's OS, glibc and ``python3`` as preflight last measured them, and when; None if never."""
    try:
        data = json.loads(_path(host_name).read_text())
        return OsInfo(**data["os"]), f"measured by preflight on {data['at']}"
    except (OSError, ValueError, KeyError, TypeError):
        return None
