"""Service: each service's user, secrets and unit; the host tool and the stand-in where asked, once for all."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.facts.files import narrowed
from sglfleet.operations import service as service_ops
from sglfleet.run.context import (host_is_gateway, host_service_files, host_services, host_state,
                                  host_tool_files)


@deploy("Service")
def install_service():
    if host_is_gateway(host):
        return  # no sglang unit: the gateway step installs the host's one service
    found = host_state(host)
    in_place = dict(host_tool_files(host))
    users, secrets = [], []
    for service in host_services(host):
        layout = service.layout
        users.append(dict(user=layout.service_user, home=layout.state_dir, shell="/usr/sbin/nologin",
                          entry=found.users.get(service.name)))
        rendered = host_service_files(host, service)
        secrets.append(dict(path=layout.env_file, content=rendered.env, redacted=rendered.env_redacted,
                            found=narrowed(found.files, [layout.env_file])))
        in_place[layout.unit_file] = (rendered.unit.encode(), "644")
    # The units and the env files take effect at the next restart: they are part of each
    # service's release id, so a change restarts hosts wave by wave, behind the gate.
    units = ", ".join(service.unit for service in host_services(host))
    service_ops.installed(name=f"{units}: users, secrets, units and host tools", users=users, secrets=secrets,
                          files=in_place, found=narrowed(found.files, in_place))
