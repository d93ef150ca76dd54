"""
The GPU acceptance run: real SGLang on one GPU host, started through sglfleet's own
release and judged by sglfleet's own host tool.

What ``run`` does, in order, writing the transcript after each step (a run cut short
still leaves what it measured) and each start's log beside it:

1. **Release.** The prod inventory's values (``inventory/group_data/prod.py``: EAGLE-3,
   3 steps, topk 1, 4 draft tokens, ``--cuda-graph-max-bs 64``, 64 running requests,
   metrics on, an API key) cut to one GPU (``ONE_GPU``: tp 1) and a tiny random-weight
   Llama with an EAGLE-3 draft (``--load-format dummy``), rendered by
   ``sglfleet.plan.release.render_release`` and staged as a host has it (``releases/<id>/``,
   ``current`` switched by ``sglfleet.host.releases.point``), under one bench folder
   (``BenchLayout``). The unit is rendered by ``sglfleet.plan.templates.render_unit`` and the
   env file by ``sglfleet.plan.secrets.render_env``.
2. **Cold start**, with empty state and cache directories: ``current/launch`` started
   as the unit starts it (``service_environment``: its ``Environment=`` lines, the env
   file, ``RUNTIME_DIRECTORY``, a fresh ``TMPDIR`` for ``PrivateTmp=yes``, a session
   of its own), while ``/health`` is watched from refused to 503 to 200.
3. The host tool's **gate** (``sglfleet-release gate``, ``sglfleet.host.cli.main``), a
   **long generation** (its ``meta_info`` keys, the ``/metrics`` names before and after),
   then the host tool's **bake** (``sglfleet-release bake``) with ``BAKE_CLIENTS``
   clients sending generations meanwhile.
4. The **stop** as the unit stops it (``KillMode=mixed``): SIGTERM to the launch script
   alone, SIGKILL to what is left of its session after ``TimeoutStopSec``; when each
   process ended, and the launch script's exit status (systemd's ``Result=``).
5. **Warm start**: the same state and cache directories (the compile caches the unit
   keeps), a fresh ``TMPDIR``; the gate again; the stop again.
6. **Shared start**, as a later host of the rollout starts: the compile caches packed
   by the host tool (``sglfleet.host.compile_cache.pack``, as the canary packs them),
   the state and cache directories emptied (a new host), the archive unpacked
   (``unpack``, as a later host takes it), then a start, the gate and the stop.

The device has no systemd. ``systemctl show``, which the gate and the bake ask for
the unit's state (``sglfleet.host.service.properties``), is answered from the launch
script's process while the host tool runs in this process (``unit_of``): active
while it runs, failed once it ended with a non-zero status, never restarted. The
server is real sglang, and nothing else of the host tool is replaced. It runs as
root, not as the unit's service user.

**Example** (the run of ``tests/data/gpu/acceptance-h200-sglang-0.5.14.json``: one H200,
sglang 0.5.14, the device's torch 2.11.0+cu130):

.. code:: shell

    # here, with the network: the wheels the device lacks, installed into one folder and packed (41 MiB)
    echo /.whl/ >> .git/info/exclude
    .venv/bin/python bench/gpu_acceptance.py prepare

    # on the device, through the run tool: carry [".whl"], timeout_s 600, this command (about 5 minutes):
    set -o pipefail; mkdir -p /tmp/site && tar -xJf .whl/sglang-0.5.14-site.tar.xz -C /tmp/site &&
      PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 570 python3 bench/gpu_acceptance.py run \\
      --site /tmp/site --out $OUT 2>&1 | tee $OUT/bench.log

    # back here: $OUT's acceptance.json, cold.log and warm.log into tests/data/gpu/
    cp <files_at>/acceptance.json tests/data/gpu/acceptance-h200-sglang-0.5.14.json
    cp <files_at>/cold.log tests/data/gpu/acceptance-h200-sglang-0.5.14-cold.log
    cp <files_at>/warm.log tests/data/gpu/acceptance-h200-sglang-0.5.14-warm.log

    # a rehearsal without a GPU, against the stand-in over sglang 0.5.9's flags (30 s):
    .venv/bin/python bench/gpu_acceptance.py run --server standin --site .cache/standin/sglang-0.5.9 \\
        --out /tmp/rehearsal --bake-s 10 --long-tokens 256

``prepare`` leaves out of sglang-kernel 0.4.4 what an H200 never loads
(``KERNEL_LEFT_OUT``: ``flash_ops``, 1.7 GB, ``flashmla_ops`` and the ``sm100/``
build; the H200 loads ``sm90/``), and takes the device's own torch 2.11.0+cu130,
triton, numpy, huggingface_hub and the rest of what its image has (``WHEELS`` lists
only what it lacks, or holds in a version that sglang 0.5.14 refuses: transformers
5.17.0 registers ``qwen3_asr`` twice, and transformers 5.8.1 refuses tokenizers 0.23.2).
Also left out, as nothing this launch imports needs them: flashinfer-cubin (flashinfer
JIT-compiles with the device's nvcc instead), flash-attn-4, nvidia-cutlass-dsl, tilelang,
sgl-deep-gemm, tokenspeed-mla, xgrammar, llguidance, outlines, torchao, torch-memory-saver
and openai-harmony (sglang then logs that ``/v1/responses`` is off).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import platform
import posixpath
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))  # run as a script: this checkout's sglfleet

from sglfleet.host import cli, compile_cache, prometheus, service  # noqa: E402
from sglfleet.host import releases as host_releases  # noqa: E402
from sglfleet.host.client import api_key, base_url, request  # noqa: E402
from sglfleet.host.layout import Layout  # noqa: E402
from sglfleet.plan.release import Release, render_release  # noqa: E402
from sglfleet.plan.schema import validate_host_data  # noqa: E402
from sglfleet.plan.settings import SCHEMA_KEYS  # noqa: E402
from sglfleet.plan.secrets import render_env  # noqa: E402
from sglfleet.plan.templates import render_unit  # noqa: E402

SGLANG = "0.5.14"
SITE_ARCHIVE = PROJECT_ROOT / ".whl" / f"sglang-{SGLANG}-site.tar.xz"
WHEEL_CACHE = PROJECT_ROOT / ".cache" / "bench" / f"gpu-wheels-{SGLANG}"
TRANSCRIPT = PROJECT_ROOT / "tests" / "data" / "gpu" / f"acceptance-h200-sglang-{SGLANG}.json"
PROD = PROJECT_ROOT / "inventory" / "group_data" / "prod.py"
STACK_IDS = {"sglang": f"bench-sglang-{SGLANG}", "standin": "bench-standin"}  # venvs: the device's own python
API_KEY = "sk-gpu-acceptance"  # the server lives as long as the run, on loopback

# What the device's image lacks for sglang 0.5.14 on CUDA, resolved with
# `uv pip compile` (python 3.12, manylinux_2_34) and cut to what a launch imports:
# none of the optional kernels (flash-attn-4, cutlass-dsl, tilelang, deep-gemm, xgrammar).
WHEELS = (
    "sglang==0.5.14", "sglang-kernel==0.4.4", "flashinfer-python==0.6.12", "apache-tvm-ffi==0.1.9",
    "transformers==5.8.1", "tokenizers==0.22.2",
    "fastapi==0.165.0", "starlette==1.10.0", "uvicorn==0.54.0", "python-multipart==0.0.34",
    "watchfiles==1.3.0", "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0",
    "typing-inspection==0.4.5", "orjson==3.13.0", "msgspec==0.23.0", "pyzmq==27.3.0",
    "setproctitle==1.3.8", "pybase64==1.5.1", "partial-json-parser==0.2.1.1.post7",
    "interegular==0.3.3", "openai==2.6.1", "distro==1.9.0", "jiter==0.19.0", "sniffio==1.3.1",
    "opentelemetry-api==1.45.2", "dill==0.4.1", "compressed-tensors==0.20.1", "loguru==0.7.3",
    "gguf==0.19.0", "jsonschema==4.26.0", "referencing==0.37.0", "rpds-py==2026.9.1",
    "jsonschema-specifications==2025.9.1", "soundfile==0.13.1", "cffi==2.1.1", "pycparser==3.12",
    # sglang/utils.py imports IPython.display, and IPython what it needs
    "ipython==9.18.1", "ipython-pygments-lexers==1.1.1", "traitlets==5.16.1", "jedi==0.20.1",
    "parso==0.8.7", "pexpect==4.9.0", "ptyprocess==0.7.0", "prompt-toolkit==3.0.53",
    "wcwidth==0.9.4", "stack-data==0.6.3", "asttokens==3.0.2", "executing==2.3.0",
    "pure-eval==0.2.4", "matplotlib-inline==0.2.2",
    # sglfleet's own: the fleet CA's certificates (sglfleet.artifacts.tls), imported with the release plan
    "cryptography==50.0.2",
)
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_26_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
KERNEL_LEFT_OUT = ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel/flashmla_ops.abi3.so", "sgl_kernel/sm100")

# The prod inventory on one H200 with a tiny model: what differs from group_data/prod.py.
ONE_GPU = {
    "tp_size": 1, "gpu_count": 1, "gpu_compute_cap": "9.0",
    "served_model_name": "tiny-llama-eagle3",
    "model_revision": None, "speculative_draft_model_revision": None, "models_dir": None,
    "mem_fraction_static": 0.3,  # the KV cache of a tiny model needs little of 141 GB
    "listen_host": "127.0.0.1", "router_url": None,
    "gate_warmup_s": 600, "gate_bake_s": 45, "gate_interval_s": 5,
    # Random weights accept no draft token: every verify gives one token, the floor.
    "gate_min_spec_accept_length": 1.0,
    "standin_warmup_s": 2.0, "standin_compile_s": 2.0, "standin_sampling_jit_s": 2.0,
}
# Random weights (target and draft), no FA3 and no xgrammar: what the tiny model needs.
TINY_MODEL_FLAGS = ("--load-format", "dummy", "--attention-backend", "triton",
                    "--sampling-backend", "pytorch", "--grammar-backend", "none")
LONG_PROMPT = "Write a long story about a lighthouse keeper."
LONG_TOKENS = 2048
BAKE_CLIENTS = 4
BAKE_TOKENS = 128
HEALTH_POLL_S = 0.25
RESULT = "sglfleet-result"  # the host tool's result line: "sglfleet-result {...}", last on stdout
VERSIONS = ("sglang", "sglang-kernel", "flashinfer-python", "torch", "transformers", "tokenizers",
            "triton", "apache-tvm-ffi", "nvidia-nccl-cu13")


def log(message: str) -> None:
    print(f"[gpu-acceptance {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the carry: what the device lacks --------------------------------------------------


def prepare(archive: Path = SITE_ARCHIVE, wheels: Path = WHEEL_CACHE) -> Path:
    """Download ``WHEELS``, install them into one folder, leave out ``KERNEL_LEFT_OUT``, pack it as tar.xz."""
    wheels.mkdir(parents=True, exist_ok=True)
    platforms = [arg for name in PLATFORMS for arg in ("--platform", name)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *platforms,
                    "-d", str(wheels), *WHEELS], check=True)
    uv = PROJECT_ROOT / ".venv" / "bin" / "uv"
    with tempfile.TemporaryDirectory() as site:
        files = sorted(str(path) for path in wheels.glob("*.whl")
                       if any(path.name.lower().startswith(spec.split("==")[0].replace("-", "_").lower() + "-"
                                                           + spec.split("==")[1]) for spec in WHEELS))
        subprocess.run([str(uv), "pip", "install", "-q", "--no-deps", "--target", site, "--python-version",
                        "3.12", "--python-platform", "x86_64-manylinux_2_34", *files], check=True)
        for name in KERNEL_LEFT_OUT:
            path = Path(site) / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        for cached in Path(site).rglob("__pycache__"):
            shutil.rmtree(cached, ignore_errors=True)
        archive.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "-cJf", str(archive), "-C", site, "."], check=True,
                       env={**os.environ, "XZ_OPT": "-9 -T0"})
    log(f"{archive}: {archive.stat().st_size / 2**20:.1f} MiB from {len(files)} wheels")
    return archive


# --- the host, laid out under one folder -----------------------------------------------


@dataclass(frozen=True)
class BenchLayout(Layout):
    """The fleet's layout under ``root``, the unit's state, cache and runtime directories too."""

    @property
    def state_dir(self) -> str:
        return posixpath.join(self.root, "var", "lib", self.service)

    @property
    def cache_dir(self) -> str:
        return posixpath.join(self.root, "var", "cache", self.service)

    @property
    def runtime_dir(self) -> str:
        return posixpath.join(self.root, "run", self.service)


def word_vocab(size: int) -> dict[str, int]:
    """Special tokens, the words of the gate's prompts, then filler words: ``size`` in all."""
    from sglfleet.host.gate import DEFAULT_PROMPTS

    words = ["<pad>", "<s>", "</s>", "<unk>"]
    for prompt in (*DEFAULT_PROMPTS, LONG_PROMPT):
        for word in prompt.replace(".", " .").replace(",", " ,").replace(":", " :").split():
            if word not in words:
                words.append(word)
    words += [f"w{n}" for n in range(size - len(words))]
    return {word: index for index, word in enumerate(words)}


def write_models(folder: Path, vocab_size: int = 1024) -> tuple[Path, Path]:
    """
    A tiny Llama (8 layers, so that EAGLE-3's capture layers [2, n//2, n-3] differ) and its
    EAGLE-3 draft: configs and a word-level tokenizer, no weights (``--load-format dummy``).
    """
    vocab = word_vocab(vocab_size)
    special = [{"id": vocab[token], "content": token, "single_word": False, "lstrip": False,
                "rstrip": False, "normalized": False, "special": True}
               for token in ("<pad>", "<s>", "</s>", "<unk>")]
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
                 "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
                 "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                        "unk_token": "<unk>", "pad_token": "<pad>", "model_max_length": 4096}
    llama = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 768, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 64, "hidden_act": "silu", "max_position_embeddings": 4096,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": vocab_size, "bos_token_id": 1,
             "eos_token_id": 2, "pad_token_id": 0, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    configs = {
        "tiny-llama": {**llama, "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 8},
        "tiny-llama-eagle3": {**llama, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
                              "draft_vocab_size": vocab_size},
    }
    for name, config in configs.items():
        model = folder / name
        model.mkdir(parents=True, exist_ok=True)
        for file, data in (("config.json", config), ("tokenizer.json", tokenizer),
                           ("tokenizer_config.json", tokenizer_config),
                           ("generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})):
            (model / file).write_text(json.dumps(data, indent=1) + "\n")
    return folder / "tiny-llama", folder / "tiny-llama-eagle3"


def bench_config(server: str, model: Path, draft: Path, flags=TINY_MODEL_FLAGS, **overrides):
    """The prod inventory's host data, cut to one GPU and a tiny model (its ``flags``), validated as the fleet validates it."""
    prod: dict = {}
    exec(compile(PROD.read_text(), str(PROD), "exec"), prod)
    data = {key: value for key, value in prod.items() if key in SCHEMA_KEYS}
    data.update(ONE_GPU, server=server, gpu_less=server == "standin", model_path=str(model),
                speculative_draft_model_path=str(draft),
                extra_flags=[*prod["extra_flags"], *flags], **overrides)
    return validate_host_data("gpu-acceptance", data)


def stage(config, layout: Layout, python: str) -> Release:
    """
    Render the release and stage it as a host has it: ``releases/<id>/``, ``current``,
    the stack's venv (the device's own python), the env file; the stand-in's files when
    the release runs it.
    """
    stack_id = STACK_IDS[config.server]
    release = render_release(config, stack_id, "", layout=layout)
    folder = Path(layout.release(release.release_id))
    folder.mkdir(parents=True, exist_ok=True)
    for name, (text, mode) in {**release.files, **release.settings}.items():
        (folder / name).write_text(text)
        (folder / name).chmod(mode)
    host_releases.point(layout.current, release.release_id)
    link_venv(Path(python).parent.parent, Path(layout.venv(stack_id)))
    if config.server == "standin":
        from sglfleet.plan.host_files import STANDIN_FILES

        Path(layout.standin).mkdir(parents=True, exist_ok=True)
        for name, source in STANDIN_FILES.items():
            shutil.copy(source, Path(layout.standin) / name)
    env_file = Path(layout.env_file)
    env_file.parent.mkdir(parents=True, exist_ok=True)
    env_file.write_text(render_env({"SGLANG_API_KEY": API_KEY}))
    env_file.chmod(0o600)
    return release


def link_venv(source: Path, venv: Path) -> None:
    """
    The stack's venv as links into ``source`` (this python's venv), so that its
    ``bin/python`` finds ``pyvenv.cfg`` and the same site-packages; ``bin/python``
    is made from ``python3`` where the venv lacks it.
    """
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.name != "bin" and not (venv / entry.name).exists():
            (venv / entry.name).symlink_to(entry)
    for entry in (source / "bin").iterdir():
        if entry.name.startswith("python") and not (venv / "bin" / entry.name).exists():
            (venv / "bin" / entry.name).symlink_to(entry)  # not resolved: still the venv's
    if not (venv / "bin" / "python").exists():
        (venv / "bin" / "python").symlink_to(source / "bin" / "python3")


# --- the unit, without systemd ---------------------------------------------------------


def unit_setting(unit: str, name: str) -> list[str]:
    """The values of one setting of a unit file, in order (``Environment`` gives several)."""
    prefix = name + "="
    return [line[len(prefix):] for line in unit.splitlines() if line.startswith(prefix)]


def unit_environment(unit: str) -> dict[str, str]:
    """The unit's ``Environment=`` lines, as systemd sets them."""
    return dict(value.partition("=")[::2] for value in unit_setting(unit, "Environment"))


def env_file_values(path: str) -> dict[str, str]:
    """An ``EnvironmentFile=``'s ``NAME=value`` lines."""
    lines = Path(path).read_text().splitlines()
    return dict(line.partition("=")[::2] for line in lines if "=" in line and not line.startswith("#"))


def service_environment(unit: str, layout: Layout, site: str, tmpdir: str, server: str) -> dict[str, str]:
    """
    The environment systemd would start ``current/launch`` with, on this machine.

    The machine's own variables (its PATH, CUDA_HOME, the driver's libraries) stand for
    the host's; then the unit's ``Environment=``, the env file, the directories systemd
    names, ``TMPDIR`` for ``PrivateTmp=``, and ``site`` on ``PYTHONPATH``: the packages a
    stack's venv would hold.
    """
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("SGLANG_", "SGLFLEET_", "PYTHON", "HF_"))}
    env.update(unit_environment(unit))
    env.update(env_file_values(layout.env_file))
    env.update(RUNTIME_DIRECTORY=layout.runtime_dir, STATE_DIRECTORY=layout.state_dir,
               CACHE_DIRECTORY=layout.cache_dir, TMPDIR=tmpdir, PYTHONPATH=site,
               # as the launch script sets it where every model is staged (prod); these are local folders
               HF_HUB_OFFLINE="1")
    if server == "standin":
        env.update(SGLFLEET_STANDIN_FAULT_FILE=layout.fault_file, SGLFLEET_ROOT=layout.root)
    return env


@dataclass
class Server:
    """A started ``current/launch``: its process (the unit's main process), when it started, its log."""

    proc: subprocess.Popen
    started: float
    log: Path
    tmpdir: str


def start(layout: Layout, unit: str, site: str, server: str, log_path: Path) -> Server:
    """Start ``current/launch`` as ``ExecStart=``: fresh runtime directory and TMPDIR, a session of its own."""
    for folder in (layout.state_dir, layout.cache_dir):
        Path(folder).mkdir(parents=True, exist_ok=True)
    shutil.rmtree(layout.runtime_dir, ignore_errors=True)
    Path(layout.runtime_dir).mkdir(parents=True, mode=0o700)
    tmpdir = tempfile.mkdtemp(prefix="private-tmp-")
    env = service_environment(unit, layout, site, tmpdir, server)
    output = open(log_path, "w")
    proc = subprocess.Popen([posixpath.join(layout.current, "launch")], env=env, cwd="/",
                            stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                            start_new_session=True)
    output.close()
    return Server(proc=proc, started=time.monotonic(), log=log_path, tmpdir=tmpdir)


@contextlib.contextmanager
def unit_of(proc: subprocess.Popen, log: Path | None = None):
    """
    ``systemctl show`` for the host tool, answered from the launch script's process (Type=exec),
    and the unit's journal from the server's ``log``, where given.
    """
    def properties(layout=None) -> dict[str, str]:
        status = proc.poll()
        state, sub = (("active", "running") if status is None else
                      ("inactive", "dead") if status == 0 else ("failed", "failed"))
        return {"ActiveState": state, "SubState": sub, "NRestarts": "0",
                "MainPID": str(proc.pid if status is None else 0), "ActiveEnterTimestamp": ""}

    def journal_lines(layout=None, lines: int = 400) -> list[str]:
        return log.read_text(errors="replace").splitlines()[-lines:] if log and log.exists() else []

    saved = service.properties, service.journal_lines
    service.properties, service.journal_lines = properties, journal_lines
    try:
        yield
    finally:
        service.properties, service.journal_lines = saved


def host_tool(layout: Layout, proc: subprocess.Popen, *argv: str, log: Path | None = None) -> dict:
    """``sglfleet-release ARGV``, run in this process: its exit status, result line and messages."""
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with unit_of(proc, log), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(["--textfile-dir", posixpath.join(layout.root, "textfile"), *argv], layout)
    results = [json.loads(line.split(" ", 1)[1]) for line in out.getvalue().splitlines()
               if line.startswith(RESULT + " ")]
    return {"argv": ["sglfleet-release", *argv], "exit_status": status,
            "seconds": round(time.monotonic() - started, 3), "result": results[-1] if results else None,
            "messages": [line for line in (out.getvalue() + err.getvalue()).splitlines()
                         if not line.startswith(RESULT)]}


def session_processes(session: int) -> dict[int, str]:
    """The live processes of a session (zombies left out): pid -> its name (``comm``) and command line."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            name = Path(f"/proc/{entry}/comm").read_text().strip()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # state ppid pgrp session ...
        if fields[0] != "Z" and int(fields[3]) == session:
            found[int(entry)] = f"{name}: {command.strip()[:100]}"
    return found


def stop(server: Server, timeout_s: float) -> dict:
    """
    Stop as the unit does (``KillMode=mixed``): SIGTERM to the launch script alone; once it
    ended, wait for the rest of its session; SIGKILL what is left after ``timeout_s``
    (``TimeoutStopSec=``). When each process ended, and the launch script's status.
    """
    session = server.proc.pid
    seen = session_processes(session)
    gone: dict[int, float] = {}
    killed: list[str] = []
    t0 = time.monotonic()
    with contextlib.suppress(ProcessLookupError):  # it ended on its own: a failed start
        os.kill(server.proc.pid, signal.SIGTERM)
    main_exit = None
    while True:
        now = time.monotonic() - t0
        if main_exit is None and server.proc.poll() is not None:
            main_exit = now
        alive = session_processes(session)
        seen.update(alive)
        for pid in seen:
            if pid not in alive and pid not in gone:
                gone[pid] = now
        if main_exit is not None and not alive:
            break
        if now >= timeout_s:
            for pid, name in alive.items():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed.append(name)
            server.proc.wait(30)
            main_exit = main_exit if main_exit is not None else time.monotonic() - t0
            break
        time.sleep(0.02)
    shutil.rmtree(server.tmpdir, ignore_errors=True)  # PrivateTmp= ends with the unit
    return {
        "how": "SIGTERM to the launch script alone; SIGKILL to the rest after TimeoutStopSec (KillMode=mixed)",
        "timeout_s": timeout_s,
        "exit_status": server.proc.returncode,
        "main_exit_s": round(main_exit, 3),
        "all_gone_s": round(time.monotonic() - t0, 3),
        "killed_after_timeout": killed,
        "processes": [{"name": name, "gone_s": round(gone.get(pid, 0.0), 3)}
                      for pid, name in sorted(seen.items(), key=lambda item: gone.get(item[0], 0.0))],
        "log_tail": tail(server.log, 12),
    }


MILESTONES = ("Load weight", "KV Cache is allocated", "max_total_num_tokens", "Capture", "Uvicorn running",
              "fired up", "deprecated", "JIT", "ompil", "ninja", "nvcc", "SIGTERM", "Gracefully", "xiting",
              "kill", "Traceback", "Error", "error:")


def milestones(path: Path, per_pattern: int = 3) -> list[str]:
    """The log's lines that mark sglang's start-up and stop (sglang stamps each line to the second)."""
    counts = dict.fromkeys(MILESTONES, 0)
    found = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        hits = [pattern for pattern in MILESTONES if pattern in line and counts[pattern] < per_pattern]
        if hits and not any(noise in line for noise in ("GET /", "POST /", "server_args=")):
            for pattern in hits:
                counts[pattern] += 1
            found.append(line[:300])
    return found


def tail(path: Path, lines: int) -> list[str]:
    """The last lines of a log, each cut to 300 characters."""
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return [line[:300] for line in text[-lines:]]


# --- what is measured -------------------------------------------------------------------


def health_state(status: int, text: str) -> str:
    if status:
        return str(status)
    return "refused" if "refused" in text.lower() else f"no answer ({text[:60]})"


class HealthWatch(threading.Thread):
    """``/health`` through sglang's start-up: each change of answer (refused, 503, 200) with its time."""

    def __init__(self, base: str, server: Server, poll_s: float = HEALTH_POLL_S):
        super().__init__(daemon=True)
        self.base, self.server, self.poll_s = base, server, poll_s
        self.sequence: list[dict] = []
        self.metrics_at_ready: dict | None = None

    def run(self) -> None:
        while self.server.proc.poll() is None:
            status, text = request(f"{self.base}/health", timeout=25.0)
            state = health_state(status, text)
            at = round(time.monotonic() - self.server.started, 3)
            if self.sequence and self.sequence[-1]["state"] == state:
                self.sequence[-1]["polls"] += 1
                self.sequence[-1]["last_s"] = at
            else:
                self.sequence.append({"state": state, "at_s": at, "last_s": at, "polls": 1,
                                      "body": text[:80] if status else ""})
            if status == 200:
                self.metrics_at_ready = metrics_view(self.base)  # before the gate's generations end
                self.metrics_at_ready["at_s"] = round(time.monotonic() - self.server.started, 3)
                return
            time.sleep(self.poll_s)

    def first(self, state: str | None = None) -> float | None:
        """When the first answer of ``state`` came (the first that was not "refused", for None)."""
        for entry in self.sequence:
            if entry["state"] == state or (state is None and entry["state"] != "refused"):
                return entry["at_s"]
        return None


def families(text: str) -> dict[str, str]:
    """``/metrics``' metric families: name -> type, from the ``# TYPE`` lines."""
    return dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))


def sample_names(text: str) -> list[str]:
    """The names of ``/metrics``' samples, labels left off."""
    return sorted({line.split("{")[0].split(" ")[0] for line in text.splitlines()
                   if line and not line.startswith("#")})


COUNTED = ("sglang:generation_tokens_total", "sglang:prompt_tokens_total", "sglang:num_requests_total",
           "sglang:spec_verify_calls_total")


def metrics_view(base: str) -> dict:
    """What ``/metrics`` holds now: family names and types, sample names, a few figures."""
    status, text = request(f"{base}/metrics", timeout=10.0)
    samples = prometheus.parse(text) if status == 200 else {}
    return {"status": status, "families": families(text), "samples": sample_names(text),
            "totals": {name: prometheus.total(samples, name) for name in COUNTED},
            "spec_accept_length": prometheus.gauge(samples, "sglang:spec_accept_length"),
            "gen_throughput": prometheus.gauge(samples, "sglang:gen_throughput")}


def long_generation(base: str, key: str | None, tokens: int = LONG_TOKENS) -> dict:
    """One greedy generation of ``tokens`` tokens (ignore_eos): ``/metrics`` before and after, its ``meta_info``."""
    before = metrics_view(base)
    started = time.monotonic()
    status, text = request(f"{base}/generate", {"text": LONG_PROMPT, "sampling_params": {
        "max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}, timeout=600.0, key=key)
    seconds = round(time.monotonic() - started, 3)
    after = metrics_view(base)
    answer = json.loads(text) if status == 200 else {}
    meta = answer.get("meta_info", {})
    scalars = {name: value for name, value in meta.items() if isinstance(value, (int, float, str, type(None)))}
    return {"status": status, "seconds": seconds, "text_words": len(answer.get("text", "").split()),
            "meta_info_keys": sorted(meta), "meta_info": scalars,
            "spec_accept_histogram": meta.get("spec_accept_histogram"),
            "metrics_before": before, "metrics_after": after,
            "metrics_new_after": sorted(set(after["samples"]) - set(before["samples"]))}


def cache_files(layout: Layout) -> dict[str, int]:
    """Every file of the state and cache directories: path (from the bench root) -> bytes."""
    return {str(path.relative_to(layout.root)): path.stat().st_size
            for base in (layout.state_dir, layout.cache_dir) for path in Path(base).rglob("*") if path.is_file()}


def first_sampled(base: str, key: str | None, layout: Layout) -> dict:
    """
    The first sampled generation (sglang's default temperature 1.0; the gate and the long
    generation are greedy): how long it took, and what it added to the caches.
    """
    before = cache_files(layout)
    started = time.monotonic()
    status, text = request(f"{base}/generate", {"text": "Tell me about the sea.",
                                                "sampling_params": {"max_new_tokens": 16}},
                           timeout=600.0, key=key)
    seconds = round(time.monotonic() - started, 3)
    added = {path: size for path, size in cache_files(layout).items() if path not in before}
    meta = json.loads(text).get("meta_info", {}) if status == 200 else {}
    return {"status": status, "seconds": seconds, "completion_tokens": meta.get("completion_tokens"),
            "cache_files_added": len(added), "cache_bytes_added": sum(added.values()),
            "cache_added": sorted(path for path in added if "/triton/" not in path)[:40],
            "triton_files_added": sum("/triton/" in path for path in added)}


def server_info(base: str, key: str | None) -> dict:
    """What ``/server_info`` says of the settings sglang resolved."""
    status, text = request(f"{base}/server_info", timeout=10.0, key=key)
    info = json.loads(text) if status == 200 else {}
    wanted = ("version", "tp_size", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
              "speculative_num_draft_tokens", "max_running_requests", "cuda_graph_max_bs",
              "cuda_graph_max_bs_decode", "mem_fraction_static", "attention_backend", "sampling_backend",
              "max_total_num_tokens", "disable_cuda_graph", "enable_metrics", "decode_log_interval")
    return {"status": status, **{name: info[name] for name in wanted if name in info}}


def with_traffic(base: str, key: str | None, clients: int, action):
    """Run ``action()`` while ``clients`` threads send generations; its result and what they got."""
    done = threading.Event()
    answers: dict[str, int] = {}
    lock = threading.Lock()

    def client(number: int) -> None:
        while not done.is_set():
            status, _ = request(f"{base}/generate", {"text": f"Request {number}: tell me about the sea.",
                                                     "sampling_params": {"max_new_tokens": BAKE_TOKENS,
                                                                         "ignore_eos": True}},
                                timeout=120.0, key=key)
            with lock:
                answers[str(status)] = answers.get(str(status), 0) + 1

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    try:
        return action(), {"clients": clients, "max_new_tokens": BAKE_TOKENS, "answers": answers}
    finally:
        done.set()
        for thread in threads:
            thread.join(150)


def caches(layout: Layout) -> dict:
    """What the state and cache directories hold: files and bytes of each folder two levels down."""
    found = {}
    for base in (layout.state_dir, layout.cache_dir):
        for path in sorted(Path(base).glob("*")) + sorted(Path(base).glob("*/*")):
            if path.is_dir():
                files = [f for f in path.rglob("*") if f.is_file()]
                if files:
                    found[str(path.relative_to(layout.root))] = {
                        "files": len(files), "bytes": sum(f.stat().st_size for f in files)}
    return found


def versions(site: str) -> dict:
    """The packages the server runs with (``site`` first, then this python's) and the GPU."""
    found = {"python": platform.python_version()}
    for name in VERSIONS:
        try:
            found[name] = next(iter(metadata.distributions(name=name, path=[site] + sys.path))).version
        except StopIteration:
            found[name] = None
    query = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True) \
        if shutil.which("nvidia-smi") else None
    if query and query.returncode == 0:
        name, driver, cap, memory = [part.strip() for part in query.stdout.splitlines()[0].split(",")]
        found.update(gpu=name, driver=driver, compute_cap=cap, gpu_memory=memory)
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if os.path.exists(nvcc):
        release = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip()
        found["nvcc"] = release.splitlines()[-1] if release else None
    return found


# --- the run ----------------------------------------------------------------------------


class Transcript(dict):
    """The run's record, written to ``path`` whenever it grows."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path

    def save(self, **entries) -> None:
        self.update(entries)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self, indent=1, sort_keys=False) + "\n")
        temporary.rename(self.path)


def serve(name: str, layout: Layout, unit: str, release: Release, args, full: bool) -> dict:
    """
    One start of the unit: the health sequence, the host tool's gate, and (``full``) the long
    generation and the bake; then the stop. Raises nothing: a failure is recorded.
    """
    release_data = host_releases.read(release.release_id, "release.json", layout)
    base, key = base_url(release_data), api_key(layout)
    log_path = Path(args.out) / f"{name}.log"
    record: dict = {"started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    server = start(layout, unit, args.site, args.server, log_path)
    log(f"{name} start: pid {server.proc.pid}")
    watch = HealthWatch(base, server)
    watch.start()
    try:
        record["gate"] = host_tool(layout, server.proc, "gate", log=server.log)
        watch.join(30)
        record.update(health=watch.sequence, listen_s=watch.first(), ready_s=watch.first("200"),
                      metrics_at_ready=watch.metrics_at_ready)
        log(f"{name}: listen {record['listen_s']} s, ready {record['ready_s']} s, "
            f"gate exit {record['gate']['exit_status']}")
        if record["gate"]["exit_status"] == 0 and full:
            record["server_info"] = server_info(base, key)
            record["long_generation"] = long_generation(base, key, args.long_tokens)
            log(f"{name}: long generation {record['long_generation']['seconds']} s")
        if record["gate"]["exit_status"] == 0:
            record["first_sampled"] = first_sampled(base, key, layout)
            log(f"{name}: first sampled generation {record['first_sampled']['seconds']} s")
        if record["gate"]["exit_status"] == 0 and full:
            record["bake"], record["bake_traffic"] = with_traffic(
                base, key, BAKE_CLIENTS, lambda: host_tool(layout, server.proc, "bake", release.release_id))
            log(f"{name}: bake exit {record['bake']['exit_status']}")
    finally:
        watch.join(1)
        record.setdefault("health", watch.sequence)
        timeout = float(unit_setting(unit, "TimeoutStopSec")[0])
        record["stop"] = stop(server, timeout)
        record["log_milestones"] = milestones(log_path)
        log(f"{name} stop: exit {record['stop']['exit_status']} after {record['stop']['main_exit_s']} s")
    return record


def run(args) -> int:
    """The whole acceptance run; the transcript goes to ``args.out``/acceptance.json."""
    # A timeout's SIGTERM ends the run through its finally blocks, which stop the server.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    root = Path(args.root)
    shutil.rmtree(root, ignore_errors=True)
    args.site = os.path.abspath(args.site)
    layout = BenchLayout(root=str(root), service="sglang", etc=str(root / "etc"))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    transcript = Transcript(Path(args.out) / "acceptance.json")
    model, draft = write_models(root / "models")
    overrides = {"gate_bake_s": args.bake_s} if args.bake_s is not None else {}
    config = bench_config(args.server, model, draft, **overrides)
    release = stage(config, layout, sys.executable)
    unit = render_unit(config, layout=layout)
    transcript.save(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        what=f"sglfleet GPU acceptance run (bench/gpu_acceptance.py, server {args.server})",
        versions=versions(args.site), release_id=release.release_id, launch_args=list(release.args),
        gate_json=json.loads(release.gate_json), unit_environment=unit_environment(unit),
        unit_timeout_stop_s=float(unit_setting(unit, "TimeoutStopSec")[0]),
        model={"target": json.loads((model / "config.json").read_text()),
               "draft": json.loads((draft / "config.json").read_text())})
    log(f"release {release.release_id}: {' '.join(release.args)}")
    transcript.save(cold=serve("cold", layout, unit, release, args, full=not args.brief))
    transcript.save(caches_after_cold=caches(layout),
                    cache_files_after_cold=sorted(path for path in cache_files(layout) if "/triton/" not in path))
    if transcript["cold"]["gate"]["exit_status"] != 0:
        log("the cold start failed its gate: no warm start")
        return 1
    if not args.brief:
        transcript.save(warm=serve("warm", layout, unit, release, args, full=False))
    transcript.save(shared_caches=hand_on(layout, STACK_IDS[args.server]))
    transcript.save(shared=serve("shared", layout, unit, release, args, full=False))
    starts = {name: transcript[name] for name in ("cold", "warm", "shared") if name in transcript}
    transcript.save(summary={
        **{name: {"listen_s": r["listen_s"], "ready_s": r["ready_s"],
                  "gate_sampled_s": (r["gate"].get("result") or {}).get("figures", {}).get("sampled_s")}
           for name, r in starts.items()},
        "stops": [{"exit_status": r["stop"]["exit_status"], "main_exit_s": r["stop"]["main_exit_s"],
                   "killed_after_timeout": r["stop"]["killed_after_timeout"]} for r in starts.values()],
        "gates": [r["gate"]["exit_status"] for r in starts.values()],
        "first_sampled_s": [r.get("first_sampled", {}).get("seconds") for r in starts.values()],
        "bake": (starts["cold"].get("bake") or {}).get("result"),
        "archive": {key: transcript["shared_caches"].get(key) for key in ("bytes", "files", "pack_s", "unpack_s")},
    })
    log(f"summary: {json.dumps(transcript['summary'])}")
    return 0 if all(r["gate"]["exit_status"] == 0 for r in starts.values()) else 1


def hand_on(layout: Layout, stack_id: str) -> dict:
    """
    The compile caches packed as the canary packs them, the state and cache directories
    emptied as on a new host, and the archive unpacked there as a later host takes it.
    """
    started = time.monotonic()
    packed = compile_cache.pack(stack_id, layout)
    packed["pack_s"] = round(time.monotonic() - started, 3)
    log(f"compile caches packed: {packed}")
    if not packed.get("packed"):
        return packed
    for folder in (layout.state_dir, layout.cache_dir):
        shutil.rmtree(folder)
    started = time.monotonic()
    taken = compile_cache.unpack(layout.compile_archive(packed["key"]), stack_id, packed["key"], packed["sha256"],
                                 layout)
    log(f"compile caches unpacked into an empty cache directory: {taken}")
    return {**packed, "unpacked": taken, "unpack_s": round(time.monotonic() - started, 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="download and pack the wheels the device lacks (needs the network)")
    go = sub.add_parser("run", help="the acceptance run (needs a GPU, or --server standin)")
    go.add_argument("--site", required=True, help="the folder of the server's packages (the unpacked carry)")
    go.add_argument("--out", default=str(PROJECT_ROOT / ".cache" / "bench" / "gpu-acceptance"),
                    help="where the transcript (acceptance.json) and the logs go")
    go.add_argument("--root", default="/tmp/sglfleet-gpu-acceptance", help="the bench host's folder (emptied)")
    go.add_argument("--server", choices=("sglang", "standin"), default="sglang")
    go.add_argument("--bake-s", type=float, default=None, help="the bake's length (default: ONE_GPU's)")
    go.add_argument("--long-tokens", type=int, default=LONG_TOKENS)
    go.add_argument("--brief", action="store_true",
                    help="the cold start's gate only (no long generation, no bake), no warm start: cold, then shared")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare()
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
