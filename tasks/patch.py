"""Patch: the KimiK25 EAGLE-3 delegation methods, inside the class body of the stack's sglang."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.facts.host import READ
from sglfleet.host.stacks import patched
from sglfleet.operations import patch
from sglfleet.run.context import host_is_gateway, host_stack, host_state, patched_digests


@deploy("Patch")
def patch_eagle3_methods():
    if host_is_gateway(host):
        return  # no sglang to patch
    stack = host_stack(host)
    found = host_state(host)
    patch.eagle3_methods(
        name="KimiK25 EAGLE-3 methods inside the class body",
        path=f"{stack.venv}/{patched(stack.python)}",
        done_digests=patched_digests(stack),
        # A stack built this run is read after its build.
        source=found.patch if found.stack.verified else READ,
    )
