"""Service: the user, the host tool, the stand-in where asked, the secrets and the unit."""

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import server

from sglfleet import FILES, PROJECT_ROOT
from sglfleet.context import host_config
from sglfleet.operations import files, secrets as secret_files
from sglfleet.operations.release import RELEASE_TOOL
from sglfleet.secrets import load_secrets, render_env
from sglfleet.templates import ENV_FILE, ROOT, SERVICE_USER, UNIT_FILE, render_unit

# The stand-in and the two stdlib modules it imports from its own folder.
STANDIN_FILES = {
    "sglang_standin.py": FILES / "standin" / "sglang_standin.py",
    "server_flags.py": PROJECT_ROOT / "sglfleet" / "server_flags.py",
    "stub_import.py": PROJECT_ROOT / "sglfleet" / "stub_import.py",
}


@deploy("Service")
def install_service():
    config = host_config(host)
    server.user(
        name=f"System user {SERVICE_USER} for sglang.service",
        user=SERVICE_USER, system=True, home=f"/var/lib/{SERVICE_USER}",
        shell="/usr/sbin/nologin", create_home=False,
    )

    tools = {RELEASE_TOOL: ((FILES / "host" / "sglfleet_release.py").read_bytes(), "755")}
    if config.server == "standin":
        tools.update({
            f"{ROOT}/standin/{name}": (source.read_bytes(), "644")
            for name, source in STANDIN_FILES.items()
        })
    files.in_place(name="Host tools", files=tools)

    env = load_secrets(config.secrets_file)
    secret_files.secret_file(
        name="Secrets of sglang.service",
        path=ENV_FILE,
        content=render_env(env),
        redacted=render_env(env, redacted=True),
    )
    # Takes effect at the next restart, which the rollout does wave by wave.
    files.in_place(name="sglang.service", files={UNIT_FILE: (render_unit(config).encode(), "644")})
