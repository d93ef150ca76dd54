"""Stage a release: the launch configuration and its stack, under a content-hash id."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.context import host_config, host_stack, patch_digest
from sglfleet.operations import release
from sglfleet.release import render_release


@deploy("Release")
def stage_release():
    config = host_config(host)
    rendered = render_release(config, host_stack(host).id, patch_digest())
    release.collected(name="Collect old releases", keep=config.releases_keep)
    release.staged(
        name=f"Stage release {rendered.release_id}",
        release_id=rendered.release_id,
        files=rendered.files,
        diff_against="launch.args",
    )
