"""Patch: the KimiK25 EAGLE-3 delegation methods, inside the class body of the stack's sglang."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.context import KIMI_K25, host_stack, patched_digests
from sglfleet.operations import patch


@deploy("Patch")
def patch_eagle3_methods():
    stack = host_stack(host)
    patch.eagle3_methods(
        name="KimiK25 EAGLE-3 methods inside the class body",
        path=f"{stack.venv}/lib/python{stack.python}/site-packages/{KIMI_K25}",
        done_digests=patched_digests(stack),
    )
