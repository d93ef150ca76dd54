"""Patch: the stack's patch sets (the KimiK25 EAGLE-3 methods first), each file of its sglang in turn."""

from pyinfra.api import deploy

from sglfleet.artifacts.patchsets import for_file
from sglfleet.facts.host import READ
from sglfleet.host.stacks import PATCHED, site_packages
from sglfleet.operations import patch
from sglfleet.controller.wheels import patched_digests


@deploy("Patch")
def patch_sglang(plan, found, run):
    """
    + plan: the host's plan (``sglfleet.plan.fleet_plan.HostPlan``)
    + found: its read (``sglfleet.controller.reads.read_host``)
    + run: this run's record (``sglfleet.record.run``), where the wheels fetched this run are kept
    """
    if plan.is_gateway:
        return  # no sglang to patch
    stack = plan.build(found.os.python_minor).stack
    files, names = [], []
    for member in plan.patch_files:  # in the same order on every host
        these = for_file(list(plan.patch_sets), stack.sglang_version, member)
        names += [patch_set.name for patch_set in these]
        path = f"{stack.venv}/{site_packages(stack.python)}/{member}"
        files.append(dict(
            path=path,
            sets=these,
            done_digests=patched_digests(run, stack, member, these),
            # The one read has every file; a stack built this run is read after its build.
            source=(found.patch if member == PATCHED else found.patches.get(path, READ))
            if found.stack.verified else READ,
        ))
    patch.files_patched(name=f"Patch sets {', '.join(names) or 'none'} in {len(files)} files of sglang", files=files)
