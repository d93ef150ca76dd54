"""Service: each service's user, secrets and unit; the host tool and the stand-in where asked, once for all."""

from pyinfra.api import deploy

from sglfleet.facts.files import narrowed
from sglfleet.operations import secrets as secret_files, service as service_ops


@deploy("Service")
def install_service(plan, found):
    """
    + plan: the host's plan (``sglfleet.plan.fleet_plan.HostPlan``)
    + found: its read (``sglfleet.controller.reads.read_host``)
    """
    if plan.is_gateway:
        return  # no sglang unit: the gateway step installs the host's one service
    in_place = dict(plan.tool_files)
    users, secrets = [], []
    for service in plan.services:
        layout = service.layout
        users.append(dict(user=layout.service_user, home=layout.state_dir, shell="/usr/sbin/nologin",
                          entry=found.users.get(service.name)))
        rendered = plan.service_files[service.name]
        secrets.append(dict(path=layout.env_file, content=rendered.env, redacted=rendered.env_redacted,
                            found=narrowed(found.files, [layout.env_file])))
        in_place[layout.unit_file] = (rendered.unit.encode(), "644")
    # The units and the env files take effect at the next restart: they are part of each
    # service's release id, so a change restarts hosts wave by wave, behind the gate.
    units = ", ".join(service.unit for service in plan.services)
    service_ops.installed(name=f"{units}: users, secrets, units and host tools", users=users, secrets=secrets,
                          files=in_place, found=narrowed(found.files, in_place))
    # TLS: each service's certificate and key, and the fleet CA, root-only as the secrets are (diffs show
    # fingerprints); systemd hands them to the service at its next start, which its release id asks for.
    for service in plan.services:
        for one in plan.service_files[service.name].tls:
            secret_files.secret_file(name=f"TLS of {service.unit}: {one['path']}", path=one["path"],
                                     content=one["content"], redacted=one["redacted"],
                                     found=narrowed(found.files, [one["path"]]))
