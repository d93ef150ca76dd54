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

import json
import shlex
from dataclasses import dataclass, fields
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sglfleet.artifacts.models import offline, served_launch
from sglfleet.host.gate import GateSettings
from sglfleet.host.layout import LAYOUT, Layout
from sglfleet.host.releases import content_id
from sglfleet.plan.settings import LaunchSettings, rendered_keys, unrendered_keys
from sglfleet.plan.templates import TEMPLATES, arg_lines, render
from sglfleet.plan.tls import worker_ssl_args

# Compile caches decide how fast a restart serves again (minutes cold), so every JIT writes
# under the stack's folder of the unit's cache directory, kept across restarts and shared
# with later hosts (``sglfleet.host.compile_cache``); none in the private /tmp, which each
# start begins empty. Defaults read in the wheels of the cu130-sglang-0.5.9 stack:
# - torch 2.9.1 _inductor/runtime/cache_dir_utils.py:14-27: tempfile.gettempdir()/torchinductor_<user>;
#   triton's kernels for inductor go under it too, unless TRITON_CACHE_DIR is set (:31)
# - triton 3.9.0 knobs.py:345-355: ~/.triton/cache
# - flashinfer 0.6.4 jit/env.py:51-55: FLASHINFER_WORKSPACE_BASE (~)/.cache/flashinfer
# - apache-tvm-ffi 0.1.15.post2 cpp/extension.py:758: ~/.cache/tvm-ffi (sglang's JIT kernels)
# - sglang 0.5.9 srt/environ.py:357, layers/deep_gemm_wrapper/compile_utils.py:33: ~/.cache/deep_gemm;
#   srt/compilation/backend.py:399: ~/.cache/sglang/ (torch.compile's graphs)
# - CUDA's JIT cache of PTX compiled for this GPU: CUDA_CACHE_PATH (~/.nv/ComputeCache)
# - anything else that follows XDG: XDG_CACHE_HOME
COMPILE_CACHES = (
    ("XDG_CACHE_HOME", ""),
    ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"),
    ("TRITON_CACHE_DIR", "triton"),
    ("FLASHINFER_WORKSPACE_BASE", ""),
    ("TVM_FFI_CACHE_DIR", "tvm-ffi"),
    ("SGLANG_DG_CACHE_DIR", "deep_gemm"),
    ("SGLANG_CACHE_DIR", "sglang"),
    ("CUDA_CACHE_PATH", "nv/ComputeCache"),
)


# From 0.5.13 a server whose scheduler fails while it serves runs crash diagnostics before it ends
# (0.5.14 tokenizer_manager.py:2585-2606, in the signal handler: nothing is answered meanwhile): 5 s and
# py-spy, then a wait for CUDA coredumps, 60 s, though only CUDA_ENABLE_USER_TRIGGERED_COREDUMP, which
# sglfleet sets nowhere, makes any. The H100 record's head ended 65.6 s after its group's rank 1 died
# (tests/data/gpu/multinode-h100-sglang-0.5.14.json); without the wait, after the py-spy dump.
CRASH_DIAGNOSTICS_SINCE = Version("0.5.13")


def crash_environment(sglang_version: str | None) -> list[tuple[str, str]]:
    """
    The launcher's environment that ends a failed server without the coredump wait nothing fills.

    + sglang_version: the stack's sglang (None: not known, nothing set)

    **Example:**

    .. code:: python

        crash_environment("0.5.14")  # [("SGLANG_CUDA_COREDUMP_BEFORE_CRASH", "0")]
        crash_environment("0.5.9")   # []: it ends at once
    """
    try:
        late = sglang_version is not None and Version(sglang_version) >= CRASH_DIAGNOSTICS_SINCE
    except InvalidVersion:
        late = False
    return [("SGLANG_CUDA_COREDUMP_BEFORE_CRASH", "0")] if late else []


def compile_cache_environment(stack_id: str, layout: Layout = LAYOUT) -> list[tuple[str, str]]:
    """
    The launcher's environment that puts every compile cache of the server under the stack's folder.

    + stack_id: the stack the release runs

    **Example:**

    .. code:: python

        compile_cache_environment("dev-0a24832cc36f")[2]
        # ("TRITON_CACHE_DIR", "/var/cache/sglang/compile/dev-0a24832cc36f/triton")
    """
    folder = layout.compile_cache(stack_id)
    return [(name, shlex.quote(f"{folder}/{sub}" if sub else folder)) for name, sub in COMPILE_CACHES]


def launch_args(launch: LaunchSettings) -> list[str]:
    """
    The sglang command-line arguments launch settings render to (no secrets).

    + launch: a host's ``HostConfig.launch``

    **Example:**

    .. code:: python

        launch_args(config.launch)  # ["--model-path", "moonshotai/Kimi-K2.5", ..., "--port", "30000"]
    """
    args: list[str] = []
    for key in rendered_keys(launch):
        value = getattr(launch, key)
        if value is None or value is False:
            continue
        if value is True:  # store_true flags in sglang
            args.append(LaunchSettings.flag(key))
        else:
            args += [LaunchSettings.flag(key), str(value)]
    return args + list(launch.extra_flags)


def gate_settings(config) -> GateSettings:
    """
    The thresholds the host tool judges this host's releases by (``gate.json``).

    + config: the host's ``HostConfig``
    """
    # Each of the gate's settings is the inventory's gate_<name>: the keys are the fields.
    settings = {f.name: getattr(config, f"gate_{f.name}") for f in fields(GateSettings) if f.name != "extra"}
    return GateSettings(**{**settings, "prompts": tuple(settings["prompts"])})


@dataclass(frozen=True)
class Release:
    """A rendered release: its id, launch arguments and the files of its directory."""

    release_id: str
    stack_id: str
    patch_digest: str
    server: str
    args: tuple[str, ...]
    launch_script: str
    args_text: str  # the launch arguments, one flag per line (for diffs)
    release_json: str
    gate_json: str

    @property
    def files(self) -> dict[str, tuple[str, int]]:
        """File name -> (text, mode) of ``releases/<release_id>/``: exactly what the id covers."""
        return {
            "launch": (self.launch_script, 0o755),
            "launch.args": (self.args_text, 0o644),
            "release.json": (self.release_json, 0o644),
        }

    @property
    def settings(self) -> dict[str, tuple[str, int]]:
        """Files of the release its id does not cover: the gate's thresholds change
        without a new release (and without restarting every host)."""
        return {"gate.json": (self.gate_json, 0o644)}


def render_release(
    config, stack_id: str, patch_digest: str, templates: Path = TEMPLATES, service_digest: str = "",
    layout: Layout = LAYOUT, gpus: tuple[int, ...] | None = None, sglang_version: str | None = None,
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
    + layout: where things are on the host (the stack's python, the stand-in, the unit's runtime directory)
    + gpus: the GPU indices the service owns (one of a host's ``services``): its ``CUDA_VISIBLE_DEVICES``;
      None for a host's one service, which sees every GPU
    + sglang_version: the stack's sglang, for what differs between its releases (``crash_environment``)

    **Example:**

    .. code:: python

        release = render_release(config, stack_id, patch_digest)
        release.release_id   # "9c41d0e2a7b35f18"
    """
    # Pinned models load from their staged folders, which name the revision.
    args = launch_args(served_launch(config))
    if config.worker_tls:  # files in the unit's credentials folder: the release names them, never their content
        args += worker_ssl_args(layout)
    python = layout.python(stack_id)
    if config.server == "standin":
        command = f"{python} {layout.standin}/sglang_standin.py"
        environment = [("SGLFLEET_STANDIN_WARMUP", shlex.quote(f"{config.standin_warmup_s:g}")),
                       ("SGLFLEET_STANDIN_COMPILE_S", shlex.quote(f"{config.standin_compile_s:g}")),
                       ("SGLFLEET_STANDIN_SAMPLING_JIT_S", shlex.quote(f"{config.standin_sampling_jit_s:g}"))]
        if config.standin_time_scale != 1:
            environment.append(("SGLFLEET_STANDIN_TIME_SCALE", shlex.quote(f"{config.standin_time_scale:g}")))
        if config.standin_spec_accept_length is not None:
            environment.append(("SGLFLEET_STANDIN_SPEC_ACCEPT_LENGTH",
                                shlex.quote(f"{config.standin_spec_accept_length:g}")))
    else:
        command = f"{python} -m sglang.launch_server"
        environment = []
    if gpus is not None:
        # torch numbers the visible GPUs from 0: sglang's tp ranks land on exactly these.
        environment.append(("CUDA_VISIBLE_DEVICES", ",".join(str(gpu) for gpu in gpus)))
    environment += compile_cache_environment(stack_id, layout)
    environment += crash_environment(sglang_version)
    if offline(config):
        # Every model is staged and verified: a start never reaches the network.
        environment.append(("HF_HUB_OFFLINE", "1"))
    script = render(
        "launch.sh.j2",
        templates,
        server=config.server,
        stack_id=stack_id,
        patch_digest=patch_digest or "none",
        environment=environment,
        arg_lines=arg_lines(args),
        command=command,
        unit=layout.unit,
        root=layout.root,
        current=layout.current,
        runtime_dir=layout.runtime_dir,
    )
    meta = {
        "stack": stack_id,
        "patch": patch_digest,
        "service": service_digest,
        "server": config.server,
        # A whole server on one host reads as before PD roles and groups existed: its id does not change with them.
        "launch": config.launch.model_dump(exclude={*unrendered_keys(config.launch),
                                                    *(() if config.launch.disaggregation_mode else ("disaggregation_mode",))}),
        "args": args,
        **({"service_name": layout.service_name, "gpus": list(gpus)} if gpus is not None else {}),
    }
    args_text = "".join(line + "\n" for line in arg_lines(args))
    release_id = content_id({"launch": script.encode(), "launch.args": args_text.encode(),
                             "release.json": json.dumps(meta).encode()})
    return Release(
        release_id=release_id,
        stack_id=stack_id,
        patch_digest=patch_digest,
        server=config.server,
        args=tuple(args),
        launch_script=script,
        args_text=args_text,
        release_json=json.dumps({**meta, "release_id": release_id}, indent=2, sort_keys=True) + "\n",
        gate_json=gate_settings(config).to_json(),
    )
