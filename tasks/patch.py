"""Patch: the KimiK25 EAGLE-3 delegation methods, inside the class body of the stack's sglang."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.context import host_stack, patched_digests
from sglfleet.host.stacks import patched
from sglfleet.operations import patch


@deploy("Patch")
def patch_eagle3_methods():
    stack = host_stack(host)
    patch.eagle3_methods(
        name="KimiK25 EAGLE-3 methods inside the class body",
        path=f"{stack.venv}/{patched(stack.python)}",
        done_digests=patched_digests(stack),
    )
