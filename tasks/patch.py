"""Patch: the stack's patch sets (the KimiK25 EAGLE-3 methods first), each file of its sglang in turn."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.artifacts.patchsets import for_file
from sglfleet.facts.host import READ
from sglfleet.host.stacks import PATCHED, site_packages
from sglfleet.operations import patch
from sglfleet.run.context import (host_is_gateway, host_patch_files, host_patch_sets, host_stack, host_state,
                                  patched_digests)


@deploy("Patch")
def patch_sglang():
    if host_is_gateway(host):
        return  # no sglang to patch
    stack = host_stack(host)
    found = host_state(host)
    sets = host_patch_sets(host, stack)
    files, names = [], []
    for member in host_patch_files(host):  # in the same order on every host
        these = for_file(sets, stack.sglang_version, member)
        names += [patch_set.name for patch_set in these]
        path = f"{stack.venv}/{site_packages(stack.python)}/{member}"
        files.append(dict(
            path=path,
            sets=these,
            done_digests=patched_digests(stack, member, these),
            # The one read has every file; a stack built this run is read after its build.
            source=(found.patch if member == PATCHED else found.patches.get(path, READ))
            if found.stack.verified else READ,
        ))
    patch.files_patched(name=f"Patch sets {', '.join(names) or 'none'} in {len(files)} files of sglang", files=files)
