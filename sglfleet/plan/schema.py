"""The typed schema of sglfleet's inventory data, checked before any connection.

The models are ``sglfleet.plan.settings``'s; this module reads a host's data into
them, with its ``services`` (``sglfleet.plan.services``), and says what is wrong.

Host data is flat, pyinfra style: SGLang launch keys named after sglang's own
flags, plus sglfleet's own keys (stack, server, waves, gate, housekeeping).
Defaults live only in ``inventory/group_data/all.py``; this module reads that
file, so an inventory anywhere gets the same defaults. Values from
``pyinfra --data key=value`` arrive as strings, ints or JSON: they are coerced
(``"8"`` -> 8, ``"yes"`` -> True, ``"a,b"`` -> ["a", "b"]) and then checked
strictly. Every problem is one line that names the host, the key and the fix.

**Example:**

.. code:: python

    config = validate_host_data("node1", {"stack": "dev", "model_path": "m"})
    configs = validate_inventory(inventory)  # every host, every problem at once
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from sglfleet import PROJECT_ROOT
from sglfleet.artifacts.stacks import STACKS_DIR
from sglfleet.errors import ConfigError
from sglfleet.plan.services import parse_services
from sglfleet.plan.settings import SCHEMA_KEYS, HostConfig, LaunchSettings, pydantic_problems

DEFAULTS_FILE = PROJECT_ROOT / "inventory" / "group_data" / "all.py"

# Host data that belongs to pyinfra (connectors, its own operation arguments), not to us.
PYINFRA_PREFIXES = ("_", "ssh_", "winrm_", "docker_", "dockerssh_", "chroot_", "podman_", "local_")

# Key names that carry secrets; secrets come from the environment or the
# secrets file, never from inventory data (it is committed and printed).
SECRET_KEY = re.compile(r"token|secret|passw|api_?key|apikey|credential|private_?key", re.I)
# Values that look like real credentials whatever key they sit under.
SECRET_VALUE = re.compile(r"\b(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|ghp_[A-Za-z0-9]{20,})")
SECRET_FLAGS = ("--api-key", "--admin-api-key", "--config")
SECRET_SOURCES = "SGLFLEET_HF_TOKEN / SGLFLEET_API_KEY in the controller's environment or the secrets_file"


# Keys an earlier sglfleet had, and their names now.
RENAMED = {"host": "listen_host", "port": "listen_port", "gate_generate_prompt": "gate_prompts"}


def defaults() -> Mapping[str, Any]:
    """The defaults of ``inventory/group_data/all.py``, the single place they live, as the file reads now."""
    return _defaults_of(DEFAULTS_FILE.read_text())


@cache
def _defaults_of(text: str) -> Mapping[str, Any]:
    # A pure function of the file's text: run once for each text it has, read-only for every caller.
    namespace: dict[str, Any] = {}
    exec(compile(text, str(DEFAULTS_FILE), "exec"), namespace)
    return MappingProxyType({key: value for key, value in namespace.items() if not key.startswith("_")})


def _secret_problems(name: str, key: str, value: Any) -> list[str]:
    if key not in SCHEMA_KEYS and SECRET_KEY.search(key):
        return [f"{name}: {key}: secrets do not belong in inventory data; remove it and use {SECRET_SOURCES}"]
    values = value if isinstance(value, (list, tuple)) else [value]
    for item in values:
        if isinstance(item, str) and SECRET_VALUE.search(item):
            return [f"{name}: {key}: holds what looks like a credential; remove it and use {SECRET_SOURCES}"]
        if key == "extra_flags" and isinstance(item, str) and item.split("=", 1)[0] in SECRET_FLAGS:
            flag = item.split("=", 1)[0]
            return [f"{name}: extra_flags: {flag} carries a secret and is set by sglfleet; remove it and use {SECRET_SOURCES}"]
    return []


def stack_problems(name: str, stack: Any, stacks_dir: Path, key: str = "stack") -> list[str]:
    """The line that says a host's ``key`` names no stack file, with the closest one; empty when it does."""
    if not isinstance(stack, str) or not stack or (stacks_dir / f"{stack}.toml").exists():
        return []
    known = sorted(path.stem for path in stacks_dir.glob("*.toml"))
    close = difflib.get_close_matches(stack, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    where = stacks_dir.relative_to(PROJECT_ROOT) if stacks_dir.is_relative_to(PROJECT_ROOT) else stacks_dir
    return [f"{name}: {key} = {stack!r}: no file {where}/{stack}.toml; {hint}"
            f"known stacks: {', '.join(known) or 'none'}"]


def _secrets_file_problems(name: str, path: Any) -> list[str]:
    if not isinstance(path, str):
        return []
    resolved = Path(path).expanduser().resolve()
    if resolved.is_relative_to(PROJECT_ROOT):
        return [f"{name}: secrets_file = {path!r} is inside the repository; move it out, "
                f"e.g. ~/.config/sglfleet/secrets.env (mode 0600)"]
    return []


def _patch_sets_problems(name: str, folder: Any, stack: Any, stacks_dir: Path, skip: Any = ()) -> list[str]:
    """
    One line for each patch set of ``folder`` that does not parse or is not for the stack's
    sglang, and for each name of ``skip`` that no patch set has.
    """
    from sglfleet.artifacts.patchsets import PatchSetError, load_sets, resolve_sets_dir
    from sglfleet.artifacts.stacks import StackError, load_stack

    if isinstance(skip, (list, tuple)) and skip:
        try:
            known = [s.name for s in load_sets(resolve_sets_dir(folder) if isinstance(folder, str) and folder and
                                               resolve_sets_dir(folder).is_dir() else None)]
        except PatchSetError:
            known = None  # said below
        for one in skip:
            if known is not None and isinstance(one, str) and one not in known:
                close = difflib.get_close_matches(one, known, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                return [f"{name}: patch_sets_skip: no patch set named {one!r}; {hint}known: {', '.join(known)}"]
    if not isinstance(folder, str) or not folder:
        return []
    path = resolve_sets_dir(folder)
    if not path.is_dir():
        return [f"{name}: patch_sets_dir = {folder!r}: no such folder on the controller (a relative path "
                f"starts at {PROJECT_ROOT}); create it or set patch_sets_dir = None"]
    try:
        own = [s for s in load_sets(path) if s.path.parent == path]
    except PatchSetError as error:
        return [f"{name}: patch_sets_dir: {error}"]
    problems = []
    try:
        version = load_stack(stack, allow_unhashed=True, stacks_dir=stacks_dir).sglang_version if isinstance(stack, str) else None
    except StackError:
        version = None  # the stack's own problems are said elsewhere
    for patch_set in own:
        if version is not None and version not in patch_set.versions:
            problems.append(
                f"{name}: patch_sets_dir: patch set {patch_set.name} ({patch_set.path}) is for sglang "
                f"{', '.join(patch_set.versions)}; stack {stack} has sglang {version}: check it with "
                f"`sglfleet patch plan --stack {stack} --sets-dir {folder}` and add \"{version}\" to its "
                "versions, or remove it")
    return problems


def validate_host_data(name: str, data: Mapping[str, Any], stacks_dir: Path = STACKS_DIR) -> HostConfig:
    """
    Check one host's data against the schema and return its typed config.

    + name: the host's inventory name, used in every message
    + data: the host's data (``host.data.dict()``); pyinfra's own keys are ignored
    + stacks_dir: where stack files live (``files/stacks``)

    Raises ``ConfigError`` with one line per problem.

    **Example:**

    .. code:: python

        config = validate_host_data("node1", host.data.dict())
    """
    problems: list[str] = []
    values = dict(defaults())
    for key, value in data.items():
        if key in SCHEMA_KEYS:
            problems += _secret_problems(name, key, value)
            values[key] = value
        elif key.startswith(PYINFRA_PREFIXES):
            continue
        elif secret := _secret_problems(name, key, value):
            problems += secret
        else:
            close = [RENAMED[key]] if key in RENAMED else difflib.get_close_matches(key, SCHEMA_KEYS, n=1, cutoff=0.6)
            fix = f"did you mean {close[0]!r}?" if close else "remove it (see inventory/group_data/all.py for the keys)"
            problems.append(f"{name}: {key}: unknown key; {fix}")
    if problems:
        raise ConfigError(problems)

    problems += stack_problems(name, values.get("stack"), stacks_dir)
    problems += _secrets_file_problems(name, values.get("secrets_file"))
    problems += _patch_sets_problems(name, values.get("patch_sets_dir"), values.get("stack"), stacks_dir,
                                     values.get("patch_sets_skip"))
    values["launch"] = {key: values.pop(key) for key in LaunchSettings.model_fields if key in values}
    if values.get("services") is not None:
        found, typed = parse_services(name, values["services"], values["launch"], values.get("gpu_count"))
        problems += found
        values["services"] = None if found else typed  # their own lines say what is wrong with them
    try:
        config = HostConfig.model_validate(values)
    except ValidationError as error:
        problems += pydantic_problems(name, error)
    if not problems:
        problems += _port_problems(name, config)
    if problems:
        raise ConfigError(problems)
    return config


# The ports a host listens on during a run: the server's, and the file servers' for its peers.
PORT_KEYS = ("listen_port", "share_port", "model_share_port", "compile_share_port")


def _port_problems(name: str, config: HostConfig) -> list[str]:
    """One line for each port two of a host's listeners would share."""
    # With services, each service's port is its own listener, and the host's listen_port none.
    servers = ({f"services[{i}] ({service.name})": service.port for i, service in enumerate(config.services)}
               if config.services else {"listen_port": config.launch.listen_port})
    # A prefill's bootstrap server listens too (sglang 0.5.9 disaggregation/common/conn.py:503-516, 640-646).
    launches = ({f"services[{i}] ({one.name})'s disaggregation_bootstrap_port": one.launch
                 for i, one in enumerate(config.services)} if config.services
                else {"disaggregation_bootstrap_port": config.launch})
    servers.update({key: launch.disaggregation_bootstrap_port for key, launch in launches.items()
                    if launch.disaggregation_mode == "prefill"})
    ports = {**servers, **{key: getattr(config, key) for key in PORT_KEYS[1:]}}
    problems, seen = [], {}
    for key, port in ports.items():
        if port in seen:
            problems.append(f"{name}: {key}: port {port} is already {seen[port]}'s; give each its own port")
        seen.setdefault(port, key)
    return problems
