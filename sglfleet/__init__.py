"""sglfleet: provision SGLang fleets serving Kimi K2.5 with EAGLE-3, on pyinfra."""

import os
from pathlib import Path

# The repository root: files/, inventory/ and the fleet state live beside the package.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
FILES = PROJECT_ROOT / "files"


def cache_dir() -> Path:
    """
    The controller's cache folder: ``$SGLFLEET_CACHE``, else ``.cache`` in the checkout.

    The one place it is resolved. The checkout's ``.cache`` (git-ignored) is where the
    docs and the benchmarks place every controller cache (``rootfs-<recipe>``,
    ``wheelhouse``, ``measured``, ``upstream``, ``flags``, ``bench``). The stand-in,
    which runs on a host with no checkout, falls back to ``~/.cache/sglfleet``
    instead (``server_flags.default_cache_dir``).
    """
    return Path(os.environ.get("SGLFLEET_CACHE") or PROJECT_ROOT / ".cache")
