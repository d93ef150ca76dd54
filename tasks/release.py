"""Release: stage what each running service needs under a content-hash id."""

from pyinfra.api import deploy

from sglfleet.operations import release


@deploy("Release")
def stage_release(plan, found):
    """
    + plan: the host's plan (``sglfleet.plan.fleet_plan.HostPlan``)
    + found: its read (``sglfleet.controller.reads.read_host``)
    """
    if plan.is_gateway:
        return  # a gateway serves no release
    releases = plan.build(found.os.python_minor).releases
    # A host of named services says each one's unit (the legacy one is alone on its host).
    several = any(not service.layout.legacy for service in plan.services)
    for service in plan.services:
        rendered = releases[service.name]
        release.staged(name=f"Stage release {rendered.release_id}" + (f" of {service.unit}" if several else ""),
                       release=rendered, found=found.services.get(service.name), layout=service.layout,
                       textfile_dir=plan.config.textfile_dir)
