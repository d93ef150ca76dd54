"""Release: stage what one running service needs under a content-hash id; collect old ones."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.context import host_config, host_release
from sglfleet.operations import release


@deploy("Release")
def stage_release():
    rendered = host_release(host)
    release.staged(name=f"Stage release {rendered.release_id}", release=rendered)


@deploy("Release")
def collect_releases():
    # After the rollout, so the releases it just switched are the ones kept.
    release.collected(name="Collect old releases", keep=host_config(host).releases_keep)
