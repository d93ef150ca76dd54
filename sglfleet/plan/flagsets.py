"""The flag set of an sglang release, read from its own wheel, extracted once into the upstream cache.

**Example:**

.. code:: python

    flagset_for("0.5.9").spec("--tp").dest   # "tp_size" (sglang's parser allows abbreviations)
"""

from __future__ import annotations

import os
import shutil
import zipfile
from functools import cache

from sglfleet import cache_dir
from sglfleet.artifacts.upstream import CACHE, sglang_wheel
from sglfleet.shipped.server_flags import FlagSet, load_flags


@cache
def flagset_for(version: str) -> FlagSet:
    """
    The flag set of sglang ``version``, read from its wheel's ``server_args.py``.

    Newer releases (0.5.14 on) declare flags across ``sglang/srt``, so the whole
    ``sglang/srt`` tree is extracted once into the upstream cache.

    + version: an sglang release, e.g. ``"0.5.9"``
    """
    tree = CACHE / "tree" / version
    server_args = tree / "sglang" / "srt" / "server_args.py"
    if not server_args.exists():
        with zipfile.ZipFile(sglang_wheel(version)) as wheel:
            members = [name for name in wheel.namelist()
                       if name.startswith("sglang/srt/") and name.endswith(".py")]
            partial = CACHE / "tree" / f".{version}.{os.getpid()}"
            wheel.extractall(partial, members)
        try:
            partial.rename(tree)  # atomic; another process may have won the race
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
            if not server_args.exists():
                with zipfile.ZipFile(sglang_wheel(version)) as wheel:
                    wheel.extractall(tree, members)
    return load_flags(server_args, cache_dir=cache_dir())
