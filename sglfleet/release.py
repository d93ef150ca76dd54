"""Releases: what one running service needs besides its stack, named by a content hash. Pure.

A release is the launch script (the sglang command line and its environment),
the ids of the stack and the patch it runs with, and ``release.json``. Its id is
a hash of exactly those, so an unchanged configuration gives the same id and
stages nothing. Secrets never enter a release: the launch script reads them
from the unit's environment (``/etc/sglfleet/sglang.env``) at start.

**Example:**

.. code:: python

    release = render_release(config, "cu130-sglang-0.5.9-1a2b3c4d", patch_digest)
    staged(release_id=release.release_id, files=release.files)
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from sglfleet.templates import ROOT, TEMPLATES, render

STANDIN_SCRIPT = f"{ROOT}/standin/sglang_standin.py"

# HostConfig keys rendered as sglang flags, in this order; the flag is the key
# with dashes (sglang's own naming). Booleans are store_true flags in 0.5.9.
LAUNCH_KEYS = (
    "model_path",
    "served_model_name",
    "trust_remote_code",
    "tp_size",
    "mem_fraction_static",
    "cuda_graph_max_bs",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "enable_flashinfer_allreduce_fusion",
    "enable_torch_symm_mem",
    "enable_metrics",
    "host",
    "port",
)


def flag_of(key: str) -> str:
    """``"tp_size"`` -> ``"--tp-size"``."""
    return "--" + key.replace("_", "-")


def launch_args(config) -> list[str]:
    """
    The sglang command-line arguments a config renders to (no secrets).

    + config: a ``HostConfig``

    **Example:**

    .. code:: python

        launch_args(config)  # ["--model-path", "moonshotai/Kimi-K2.5", ..., "--port", "30000"]
    """
    args: list[str] = []
    for key in LAUNCH_KEYS:
        value = getattr(config, key)
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag_of(key))
        else:
            args += [flag_of(key), str(value)]
    return args + list(config.extra_flags)


def arg_lines(args: list[str]) -> list[str]:
    """One flag and its values per line, shell-quoted: readable in the script and in diffs."""
    lines: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not lines:
            lines.append([arg])
        else:
            lines[-1].append(arg)
    return [" ".join(shlex.quote(part) for part in line) for line in lines]


def stack_python(stack_id: str) -> str:
    """The python of a stack's venv on a host."""
    return f"{ROOT}/stacks/{stack_id}/venv/bin/python"


@dataclass(frozen=True)
class Release:
    """A rendered release: its id, launch arguments and the files of its directory."""

    release_id: str
    stack_id: str
    patch_digest: str
    server: str
    args: tuple[str, ...]
    launch_script: str
    release_json: str

    @property
    def args_text(self) -> str:
        """The launch arguments, one flag per line (for diffs)."""
        return "".join(line + "\n" for line in arg_lines(list(self.args)))

    @property
    def files(self) -> dict[str, tuple[str, int]]:
        """File name -> (text, mode) of ``/opt/sglfleet/releases/<release_id>/``."""
        return {
            "launch": (self.launch_script, 0o755),
            "launch.args": (self.args_text, 0o644),
            "release.json": (self.release_json, 0o644),
        }


def release_id_of(stack_id: str, patch_digest: str, launch_script: str, service_digest: str = "") -> str:
    """The content hash (16 hex digits) of a stack, a patch, a rendered launch script and the service files."""
    payload = json.dumps(
        {"stack": stack_id, "patch": patch_digest, "launch": launch_script, "service": service_digest},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def render_release(
    config, stack_id: str, patch_digest: str, templates: Path = TEMPLATES, service_digest: str = "",
) -> Release:
    """
    Render a host's release and compute its id.

    + config: the host's ``HostConfig``
    + stack_id: the id of the stack it runs on (``/opt/sglfleet/stacks/<stack_id>``)
    + patch_digest: the digest of the patch applied to that stack ("" for none)
    + templates: the templates directory
    + service_digest: a digest of the unit and the env file, so that a change to
      either (a new hardening, a rotated key) restarts hosts wave by wave behind
      the gate; "" for none

    **Example:**

    .. code:: python

        release = render_release(config, stack_id, patch_digest)
        release.release_id   # "9c41d0e2a7b35f18"
    """
    args = launch_args(config)
    python = stack_python(stack_id)
    if config.server == "standin":
        command = f"{python} {STANDIN_SCRIPT}"
        environment = [("SGLFLEET_STANDIN_WARMUP", shlex.quote(f"{config.standin_warmup_s:g}"))]
    else:
        command = f"{python} -m sglang.launch_server"
        environment = []
    script = render(
        "launch.sh.j2",
        templates,
        server=config.server,
        stack_id=stack_id,
        patch_digest=patch_digest or "none",
        environment=environment,
        arg_lines=arg_lines(args),
        command=command,
    )
    release_id = release_id_of(stack_id, patch_digest, script, service_digest)
    launch = {key: getattr(config, key) for key in LAUNCH_KEYS}
    launch["extra_flags"] = list(config.extra_flags)
    meta = {
        "release_id": release_id,
        "stack": stack_id,
        "patch": patch_digest,
        "service": service_digest,
        "server": config.server,
        "launch": launch,
        "args": args,
    }
    return Release(
        release_id=release_id,
        stack_id=stack_id,
        patch_digest=patch_digest,
        server=config.server,
        args=tuple(args),
        launch_script=script,
        release_json=json.dumps(meta, indent=2, sort_keys=True) + "\n",
    )
