"""Service: the user, the host tool, the stand-in where asked, the secrets and the unit."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet import FILES, PROJECT_ROOT
from sglfleet.context import host_config, host_service_files
from sglfleet.operations import files, secrets as secret_files, users
from sglfleet.operations.release import RELEASE_TOOL
from sglfleet.templates import ENV_FILE, ROOT, SERVICE_USER, UNIT_FILE

# The stand-in, its modules, and the two stdlib modules it imports from its own folder.
STANDIN_FILES = {
    **{name: FILES / "standin" / name for name in (
        "sglang_standin.py", "standin_server_args.py", "standin_model.py", "standin_faults.py",
        "standin_engine.py", "standin_metrics.py", "standin_http.py")},
    "server_flags.py": PROJECT_ROOT / "sglfleet" / "server_flags.py",
    "stub_import.py": PROJECT_ROOT / "sglfleet" / "stub_import.py",
}


@deploy("Service")
def install_service():
    config = host_config(host)
    users.system_user(
        name=f"System user {SERVICE_USER} for sglang.service",
        user=SERVICE_USER, home=f"/var/lib/{SERVICE_USER}", shell="/usr/sbin/nologin",
    )

    tools = {RELEASE_TOOL: ((FILES / "host" / "sglfleet_release.py").read_bytes(), "755")}
    if config.server == "standin":
        tools.update({
            f"{ROOT}/standin/{name}": (source.read_bytes(), "644")
            for name, source in STANDIN_FILES.items()
        })

    service = host_service_files(host)
    secret_files.secret_file(
        name="Secrets of sglang.service", path=ENV_FILE,
        content=service.env, redacted=service.env_redacted,
    )
    # The unit and the env file take effect at the next restart: they are part of
    # the release id, so a change restarts hosts wave by wave, behind the gate.
    # One operation for the tools and the unit: one digest fact for all of them.
    files.in_place(name="Host tools and sglang.service",
                   files={**tools, UNIT_FILE: (service.unit.encode(), "644")})
