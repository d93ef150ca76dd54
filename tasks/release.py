"""Release: stage what one running service needs under a content-hash id."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.operations import release
from sglfleet.run.context import host_config, host_is_gateway, host_release, host_state


@deploy("Release")
def stage_release():
    if host_is_gateway(host):
        return  # a gateway serves no release
    rendered = host_release(host)
    release.staged(name=f"Stage release {rendered.release_id}", release=rendered, found=host_state(host).release,
                   textfile_dir=host_config(host).textfile_dir)
