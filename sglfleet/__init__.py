"""sglfleet: provision SGLang fleets serving Kimi K2.5 with EAGLE-3, on pyinfra."""

from pathlib import Path

# The repository root: files/, inventory/ and the fleet state live beside the package.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
FILES = PROJECT_ROOT / "files"
