"""Patch: the KimiK25 EAGLE-3 delegation methods, inside the class body of the stack's sglang."""

import functools
import hashlib
import zipfile

from pyinfra import host
from pyinfra.api import deploy

from sglfleet import wheelhouse
from sglfleet.context import host_stack
from sglfleet.operations import patch
from sglfleet.patcher import PatchRefused, apply, load_patch
from sglfleet.stacks import Stack

MEMBER = "sglang/srt/models/kimi_k25.py"


@functools.cache
def _done_digests(wheel: str) -> tuple[str, ...]:
    """sha256 of the stack's kimi_k25.py once patched: a host file with it is not read (or parsed) again."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return (hashlib.sha256(apply(archive.read(MEMBER), load_patch())).hexdigest(),)
    except (KeyError, PatchRefused):
        return ()  # no such file, or one the engine refuses: each host reads and reports its own


def done_digests(stack: Stack) -> tuple[str, ...]:
    wheels = [local.path for name, local in wheelhouse.ensure(stack).items() if name.startswith("sglang-")]
    return _done_digests(str(wheels[0])) if wheels else ()


@deploy("Patch")
def patch_eagle3_methods():
    stack = host_stack(host)
    patch.eagle3_methods(
        name="KimiK25 EAGLE-3 methods inside the class body",
        path=f"{stack.venv}/lib/python{stack.python}/site-packages/{MEMBER}",
        done_digests=done_digests(stack),
    )
