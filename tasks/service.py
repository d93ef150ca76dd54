"""Service: the user, the host tool, the stand-in where asked, the secrets and the unit."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.facts.files import narrowed
from sglfleet.host.layout import LAYOUT
from sglfleet.operations import files, secrets as secret_files, users
from sglfleet.run.context import host_config, host_is_gateway, host_service_files, host_state, host_tool_files


@deploy("Service")
def install_service():
    if host_is_gateway(host):
        return  # no sglang unit: the gateway step installs the host's one service
    config = host_config(host)
    found = host_state(host)
    users.system_user(
        name=f"System user {LAYOUT.service_user} for {LAYOUT.unit}",
        user=LAYOUT.service_user, home=LAYOUT.state_dir, shell="/usr/sbin/nologin", entry=found.user,
    )
    service = host_service_files(host)
    secret_files.secret_file(
        name=f"Secrets of {LAYOUT.unit}", path=LAYOUT.env_file,
        content=service.env, redacted=service.env_redacted, found=narrowed(found.files, [LAYOUT.env_file]),
    )
    # The unit and the env file take effect at the next restart: they are part of
    # the release id, so a change restarts hosts wave by wave, behind the gate.
    # One operation for the tools and the unit: one digest fact for all of them.
    in_place = {**host_tool_files(config.server), LAYOUT.unit_file: (service.unit.encode(), "644")}
    files.in_place(name=f"Host tools and {LAYOUT.unit}", files=in_place, found=narrowed(found.files, in_place))
