"""Real upstream sglang files, fetched from the package index once and cached.

The tests and the lint read sglang's own sources (``kimi_k25.py``,
``server_args.py``) from the real wheels rather than from copies in this repo.

**Example:**

.. code:: python

    path = sglang_file("0.5.9", "sglang/srt/models/kimi_k25.py")
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from sglfleet import cache_dir

CACHE = cache_dir() / "upstream"


def sglang_wheel(version: str) -> Path:
    """
    Download ``sglang==version`` (no dependencies) into the cache, once.

    + version: an sglang release on the package index, e.g. ``"0.5.9"``
    """
    return wheel("sglang", version)


def wheel(name: str, version: str) -> Path:
    """
    Download the wheel of ``name==version`` for this machine (no dependencies) into the cache, once.

    + name: a distribution on the package index, e.g. ``"nvidia-cuda-runtime-cu12"``
    + version: its exact version
    """
    wheels = CACHE / "wheels"
    stem = f"{name.replace('-', '_')}-{version}-"
    found = sorted(p for p in wheels.glob("*.whl") if p.name.lower().startswith(stem.lower()))
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    # Into a folder of this process's own, then renamed beside the others: two test
    # processes may ask for the same wheel at once, and neither sees half a file.
    with tempfile.TemporaryDirectory(dir=wheels, prefix=".download-") as folder:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--dest", folder, f"{name}=={version}"],
            check=True,
        )
        for downloaded in Path(folder).glob("*.whl"):
            os.replace(downloaded, wheels / downloaded.name)
    return sorted(p for p in wheels.glob("*.whl") if p.name.lower().startswith(stem.lower()))[0]


def sglang_file(version: str, member: str) -> Path:
    """
    Extract one file of the sglang wheel into the cache and return its path.

    + version: the sglang release
    + member: the path inside the wheel, e.g. ``"sglang/srt/server_args.py"``
    """
    target = CACHE / "files" / version / member
    if not target.exists():
        with zipfile.ZipFile(sglang_wheel(version)) as wheel:
            data = wheel.read(member)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{os.getpid()}.part")
        partial.write_bytes(data)
        partial.replace(target)
    return target
