"""Release: stage what each running service needs under a content-hash id."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.operations import release
from sglfleet.run.context import host_config, host_is_gateway, host_release, host_services, host_state


@deploy("Release")
def stage_release():
    if host_is_gateway(host):
        return  # a gateway serves no release
    found = host_state(host)
    textfile_dir = host_config(host).textfile_dir
    # A host of named services says each one's unit (the legacy one is alone on its host).
    several = any(not service.layout.legacy for service in host_services(host))
    for service in host_services(host):
        rendered = host_release(host, service)
        release.staged(name=f"Stage release {rendered.release_id}" + (f" of {service.unit}" if several else ""),
                       release=rendered, found=found.services.get(service.name), layout=service.layout,
                       textfile_dir=textfile_dir)
