"""
The mission's own model class on a real GPU: a tiny random-weight Kimi K2.5 with an
EAGLE-3 draft, started by real sglang through sglfleet's release, once for each
``kimi_k25.py`` of ``VARIANTS``, all at once on one GPU.

The model (``write_kimi``): ``KimiK25ForConditionalGeneration`` with sglang's own
``KimiK25Config`` (``srt/configs/kimi_k25.py``): a DeepseekV3 text part with MLA
(8 dense layers: no MoE layer, ``first_k_dense_replace`` = 8), a one-block MoonViT
vision part, and a one-layer ``LlamaForCausalLMEagle3`` draft; ``--load-format dummy``.
What is sglfleet's own in the model folder: the word-level tokenizer, the chat
template (it renders an image part as ``<|media_pad|>``, which sglang's warm-up
sends to a vision model), and the processor (``bench/tiny_kimi_processor.py``,
named by ``processor_config.json``'s ``auto_map``, loaded with ``--trust-remote-code``).

The variants of ``kimi_k25.py`` (``kimi_variants``), all made from the file the
carried sglang ships:

- ``shipped``: as 0.5.14 ships it (it has the three delegation methods);
- ``removed``: the three methods taken out of the class, as 0.5.9 has it;
- ``patched``: ``removed`` after sglfleet's patch engine
  (``sglfleet.artifacts.patcher.apply``, what ``sglfleet patch apply`` writes);
- ``appended``: ``removed`` with the patch's methods appended after ``EntryClass``,
  as a block appended to the file lands (``files.block``'s default; indented);
- ``appended_dedented``: the same methods appended as module-level functions.

Each start has its own bench host (``gpu_acceptance.BenchLayout``), port, compile
caches and ``sitecustomize`` (``bench/kimi_trace_hook.py``), which loads the variant
as ``sglang.srt.models.kimi_k25`` and traces the delegation methods sglang calls.
Each start records: ``/health`` from refused to 503 to 200 (or to the process's
end), one ``/generate`` with EAGLE-3 (its ``meta_info``), the log lines that ended
it, its exit status, and the trace. ``--openai`` starts the acceptance run's tiny
Llama beside them and records its OpenAI surface (``bench/gpu_openai.py``).

**Example** (the run of ``tests/data/gpu/kimi-k25-h200-sglang-0.5.14.json``, about 170 s; ``docs/gpu.md``):

.. code:: shell

    # on the device, carry [".whl", ".gpucarry"] (.gpucarry: bench/, sglfleet/, files/, inventory/ of this checkout):
    set -o pipefail; mkdir -p /tmp/site && tar -xJf .whl/sglang-0.5.14-site.tar.xz -C /tmp/site &&
      cd .gpucarry && PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 555 python3 bench/gpu_kimi.py \\
      --site /tmp/site --out $OUT --openai --openai-kimi --budget-s 520 2>&1 | tee $OUT/bench.log

    # without a GPU, over sglang 0.5.14's files: the config, processor and template checked (--dry),
    # (--dry needs transformers 5), or the whole run rehearsed against the stand-in
    .venv/bin/python bench/gpu_kimi.py --site /tmp/sglang-0.5.14 --out /tmp/kimi --dry
    .venv/bin/python bench/gpu_kimi.py --site /tmp/sglang-0.5.14 --out /tmp/kimi --server standin --openai
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import hashlib
import json
import os
import shutil
import signal
import sys
import tarfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside gpu_acceptance
import gpu_acceptance as acceptance  # noqa: E402
from gpu_acceptance import PROJECT_ROOT, BenchLayout, HealthWatch, Transcript, log  # noqa: E402

from sglfleet.artifacts import patcher  # noqa: E402
from sglfleet.host import releases as host_releases  # noqa: E402
from sglfleet.host.client import api_key, base_url, request  # noqa: E402
from sglfleet.plan.templates import render_unit  # noqa: E402

HERE = Path(__file__).resolve().parent
KIMI = "KimiK25ForConditionalGeneration"
DELEGATION = ("set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head")
VARIANTS = ("shipped", "removed", "patched", "appended", "appended_dedented")
FIRST_PORT = 30001
OPENAI_PORT = 30010  # the tiny Llama's; the tiny Kimi's with its parsers is the next
KIMI_PARSERS = ("--reasoning-parser", "kimi_k2", "--tool-call-parser", "kimi_k2")
SPECIAL = ("<pad>", "<s>", "</s>", "<unk>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_end|>",
           "<|media_start|>", "<|media_content|>", "<|media_end|>", "<|media_pad|>")
# An image part renders as Kimi's media markers; sglang expands <|media_pad|> to the image's tokens.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}<|im_user|>{%- elif message['role'] == 'system' -%}<|im_system|>"
    "{%- else -%}<|im_assistant|>{%- endif -%}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] in ('image', 'image_url') -%}<|media_start|>image<|media_content|><|media_pad|><|media_end|>"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>{%- endif -%}")
MEDIA_PROC_CFG = {"patch_size": 14, "merge_kernel_size": 2, "in_patch_limit": 1024, "patch_limit_on_one_side": 64,
                  "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
TEXT = {  # DeepseekV3, tiny: MLA at DeepSeek's own latent sizes, 8 dense layers
    "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 512,
    "intermediate_size": 1024, "moe_intermediate_size": 256, "num_hidden_layers": 8, "num_attention_heads": 4,
    "num_key_value_heads": 4, "q_lora_rank": 192, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 8, "n_shared_experts": 1,
    "num_experts_per_tok": 2, "first_k_dense_replace": 8, "moe_layer_freq": 1, "n_group": 1, "topk_group": 1,
    "routed_scaling_factor": 1.0, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
    "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 50000.0,
    "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 1,
    "eos_token_id": 2, "pad_token_id": 0, "attention_bias": False, "num_nextn_predict_layers": 0}
VISION = {  # one MoonViT block; KimiK25VisionConfig reads hidden_size, the projector vt_hidden_size
    "patch_size": 14, "init_pos_emb_height": 64, "init_pos_emb_width": 64, "init_pos_emb_time": 4,
    "pos_emb_type": "divided_fixed", "num_attention_heads": 2, "num_hidden_layers": 1, "hidden_size": 64,
    "intermediate_size": 128, "vt_hidden_size": 64, "vt_num_attention_heads": 2, "vt_num_hidden_layers": 1,
    "vt_intermediate_size": 128, "merge_kernel_size": [2, 2], "video_attn_type": "spatial_temporal",
    "merge_type": "sd2_tpool", "mm_projector_type": "patchmerger", "mm_hidden_size": 64,
    "projector_hidden_act": "gelu", "projector_ln_eps": 1e-5, "text_hidden_size": 512}
# The tiny model's own flags: random weights, no FA3 (its kernels are not carried) for text or vision,
# a small KV pool so that the starts share the GPU.
KIMI_FLAGS = ("--load-format", "dummy", "--attention-backend", "triton", "--sampling-backend", "pytorch",
              "--grammar-backend", "none", "--mm-attention-backend", "sdpa", "--max-total-tokens", "16384")
LLAMA_FLAGS = (*acceptance.TINY_MODEL_FLAGS, "--max-total-tokens", "16384")
SHARED = {"mem_fraction_static": 0.85,  # of what is free at each start's profiling; the pool is capped above
          "cuda_graph_max_bs": 8, "gate_warmup_s": 420}
READY_S = 420.0
STOP_RESERVE_S = 130.0  # a stop may take TimeoutStopSec (120 s) before its SIGKILL
SERVERS: list = []  # every started server, for the run's own SIGTERM
PROMPT = "The capital of France is"


# --- the model --------------------------------------------------------------------------


def kimi_vocab(size: int) -> dict[str, int]:
    """Kimi's special tokens, then the words of ``acceptance.word_vocab``: ``size`` in all."""
    words = list(SPECIAL) + [word for word in acceptance.word_vocab(size) if word not in SPECIAL]
    return {word: index for index, word in enumerate(words[:size])}


def write_kimi(folder: Path, vocab_size: int = 1024) -> tuple[Path, Path]:
    """The tiny Kimi K2.5 (config, tokenizer, chat template, processor) and its EAGLE-3 draft; no weights."""
    vocab = kimi_vocab(vocab_size)
    added = [{"id": vocab[token], "content": token, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for token in SPECIAL]
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                 "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
                 "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                        "unk_token": "<unk>", "pad_token": "<pad>", "model_max_length": 4096,
                        "chat_template": CHAT_TEMPLATE}
    text = {**TEXT, "vocab_size": vocab_size}
    target = {"architectures": [KIMI], "model_type": "kimi_k25", "text_config": text, "vision_config": VISION,
              "media_placeholder_token_id": vocab["<|media_pad|>"], "pad_token_id": 0, "bos_token_id": 1,
              "eos_token_id": 2, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    draft = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 512,
             "intermediate_size": 1024, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 128,
             "num_hidden_layers": 1, "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
             "rope_theta": 50000.0, "vocab_size": vocab_size, "draft_vocab_size": vocab_size,
             "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16"}
    processor = {"processor_class": "TinyKimiProcessor",
                 "auto_map": {"AutoProcessor": "processing_tiny_kimi.TinyKimiProcessor"},
                 "media_proc_cfg": MEDIA_PROC_CFG}
    files = {
        "tiny-kimi-k25": {"config.json": target, "processor_config.json": processor},
        "tiny-kimi-k25-eagle3": {"config.json": draft},
    }
    for name, extra in files.items():
        model = folder / name
        model.mkdir(parents=True, exist_ok=True)
        for file, data in {**extra, "tokenizer.json": tokenizer, "tokenizer_config.json": tokenizer_config,
                           "generation_config.json": {"bos_token_id": 1, "eos_token_id": 2}}.items():
            (model / file).write_text(json.dumps(data, indent=1) + "\n")
    shutil.copy(HERE / "tiny_kimi_processor.py", folder / "tiny-kimi-k25" / "processing_tiny_kimi.py")
    return folder / "tiny-kimi-k25", folder / "tiny-kimi-k25-eagle3"


# --- the variants of kimi_k25.py --------------------------------------------------------


def without_methods(source: bytes, names=DELEGATION) -> bytes:
    """``source`` with the named methods (and the blank line before each) taken out of the Kimi class."""
    tree = ast.parse(source)
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == KIMI)
    drop = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            drop.update(range(first, node.end_lineno + 1))
    lines = source.splitlines(keepends=True)
    for row in sorted(drop):  # a blank line right before a dropped method goes with it
        if row - 1 not in drop and row - 1 >= 1 and not lines[row - 2].strip():
            drop.add(row - 1)
    return b"".join(line for row, line in enumerate(lines, 1) if row not in drop)


def appended(source: bytes, dedent: bool) -> bytes:
    """The patch's methods appended after ``EntryClass``: as indented in the patch file, or as functions."""
    text = patcher.DEFAULT_PATCH.read_text().splitlines()
    methods = text[text.index(f"class {KIMI}:") + 1:]
    if dedent:
        methods = [line[4:] if line.startswith("    ") else line for line in methods]
    return source.rstrip(b"\n") + b"\n\n" + "\n".join(methods).rstrip().encode() + b"\n"


def kimi_variants(shipped: bytes) -> dict[str, bytes]:
    """``VARIANTS``, each the bytes of a ``kimi_k25.py``."""
    removed = without_methods(shipped)
    return {"shipped": shipped, "removed": removed, "patched": patcher.apply(removed, patcher.load_patch()),
            "appended": appended(removed, dedent=False), "appended_dedented": appended(removed, dedent=True)}


def describe(variants: dict[str, bytes]) -> dict:
    """For each variant: its hash, lines, whether it parses, the methods its class lacks, its diff from shipped."""
    found = {}
    for name, text in variants.items():
        entry = {"sha256": hashlib.sha256(text).hexdigest(), "lines": text.count(b"\n")}
        try:
            entry["class_lacks"] = patcher.missing_methods(text, patcher.load_patch())
        except patcher.PatchRefused as error:
            entry["parse_error"] = f"{type(error).__name__}: {error}"
        entry["diff_from_shipped"] = patcher.unified_diff(variants["shipped"], text, "kimi_k25.py").splitlines()[:80]
        found[name] = entry
    return found


# --- one start --------------------------------------------------------------------------


def config_for(server: str, model: Path, draft: Path, flags, port: int, **overrides):
    """The acceptance run's host data for this model and port."""
    return acceptance.bench_config(server, model, draft, flags=flags, listen_port=port, **{**SHARED, **overrides})


def ending_lines(path: Path, limit: int = 60) -> list[str]:
    """The log's lines that say why a start ended: errors, exceptions, warnings, and the traceback's."""
    keys = ("Error", "error", "Exception", "Traceback", "WARNING", "Warning", "raise ", "  File ", "sigquit",
            "not supported", "Ignore import", "killed", "Killed", "exit")
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return [line[:400] for line in lines if any(key in line for key in keys)
            and "server_args=" not in line][-limit:]


def read_trace(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def one_start(name: str, source: bytes | None, config, root: Path, site: str, out: Path,
              ready_s: float = READY_S, after=None) -> dict:
    """
    Stage the release, start it with its own ``sitecustomize``, watch ``/health``, send one
    ``/generate``, run ``after(base, key)`` when ready, stop. A failure is recorded, not raised.
    """
    layout = BenchLayout(root=str(root / name), service="sglang", etc=str(root / name / "etc"))
    release = acceptance.stage(config, layout, sys.executable)
    unit = render_unit(config, layout=layout)
    hook = root / name / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    if source is not None:
        shutil.copy(HERE / "kimi_trace_hook.py", hook / "sitecustomize.py")
        (hook / "kimi_k25_variant.py").write_bytes(source)
    base = base_url(host_releases.read(release.release_id, "release.json", layout))
    key = api_key(layout)
    record: dict = {"started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "launch_args": list(release.args)}
    server = acceptance.start(layout, unit, f"{hook}:{site}", config.server, out / f"{name}.log")
    SERVERS.append(server)
    exited: list[float] = []
    threading.Thread(target=lambda: (server.proc.wait(), exited.append(time.monotonic() - server.started)),
                     daemon=True).start()
    watch = HealthWatch(base, server)
    watch.start()
    try:
        watch.join(ready_s)
        record.update(health=watch.sequence, listen_s=watch.first(), ready_s=watch.first("200"))
        if record["ready_s"] is not None:
            started = time.monotonic()
            status, text = request(f"{base}/generate", {"text": PROMPT, "sampling_params": {
                "max_new_tokens": 32, "temperature": 0, "ignore_eos": True}}, timeout=180.0, key=key)
            answer = json.loads(text) if status == 200 else {}
            meta = answer.get("meta_info", {})
            record["generate"] = {"status": status, "seconds": round(time.monotonic() - started, 3),
                                  "body": text[:300] if status != 200 else None,
                                  "meta_info": {k: v for k, v in meta.items()
                                                if isinstance(v, (int, float, str, type(None)))},
                                  "meta_info_keys": sorted(meta)}
            if after is not None:
                record["after"] = after(base, key)
        time.sleep(0.5)
        record["exited_on_its_own"] = bool(exited)
        record["exit_s"] = round(exited[0], 3) if exited else None
        record["exit_status_on_its_own"] = server.proc.returncode if exited else None
    except Exception as error:  # a record with the error beats no record
        record["bench_error"] = f"{type(error).__name__}: {error}"
    finally:
        record["stop"] = acceptance.stop(server, float(acceptance.unit_setting(unit, "TimeoutStopSec")[0]))
        record["ending_lines"] = ending_lines(server.log)
        record["log_milestones"] = acceptance.milestones(server.log)
        record["trace"] = read_trace(hook / "trace.jsonl")
        shutil.copy(hook / "trace.jsonl", out / f"{name}.trace.jsonl") if (hook / "trace.jsonl").exists() else None
    return record


def summary(record: dict) -> dict:
    """One line's worth of a start."""
    meta = (record.get("generate") or {}).get("meta_info") or {}
    return {"listen_s": record.get("listen_s"), "ready_s": record.get("ready_s"),
            "health": [entry["state"] for entry in record.get("health", [])],
            "generate_status": (record.get("generate") or {}).get("status"),
            "spec_verify_ct": meta.get("spec_verify_ct"), "completion_tokens": meta.get("completion_tokens"),
            "exit_status_on_its_own": record.get("exit_status_on_its_own"), "exit_s": record.get("exit_s"),
            "stop_exit_status": (record.get("stop") or {}).get("exit_status"),
            "calls": [f"{event['event']} {event['class']}.{event['method']}".strip(".")
                      for event in record.get("trace", []) if event["event"] in ("call", "missing")]}


# --- the run ----------------------------------------------------------------------------


def run(args) -> int:
    root, out = Path(args.root), Path(args.out)

    def ended(signum, frame):  # a timeout: kill every server's session (each is its own), keep the logs
        for server in SERVERS:
            for pid in [server.proc.pid, *acceptance.session_processes(server.proc.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        pack_logs(out)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, ended)
    deadline = time.monotonic() + args.budget_s
    shutil.rmtree(root, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    site = str(Path(args.site).resolve())
    shipped = (Path(site) / "sglang" / "srt" / "models" / "kimi_k25.py").read_bytes()
    variants = kimi_variants(shipped)
    model, draft = write_kimi(root / "models")
    transcript = Transcript(out / "kimi.json")
    transcript.save(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        what="tiny Kimi K2.5 + EAGLE-3 on real sglang, one start per kimi_k25.py (bench/gpu_kimi.py)",
        versions=acceptance.versions(site), variants=describe(variants),
        model={"target": json.loads((model / "config.json").read_text()),
               "draft": json.loads((draft / "config.json").read_text()),
               "processor_config": json.loads((model / "processor_config.json").read_text()),
               "chat_template": CHAT_TEMPLATE})
    if args.dry:
        return dry(model, site)
    lock = threading.Lock()
    names = [name for name in VARIANTS if not args.only or name in args.only]

    def start(name: str, port: int) -> None:
        config = config_for(args.server, model, draft, [*KIMI_FLAGS], port, served_model_name="tiny-kimi-k25")
        log(f"{name}: starting on port {port}")
        record = one_start(name, variants[name], config, root, site, out,
                           ready_s=min(READY_S, deadline - time.monotonic() - STOP_RESERVE_S))
        with lock:
            transcript.setdefault("starts", {})[name] = record
            transcript.setdefault("summary", {})[name] = summary(record)
            transcript.save()
        log(f"{name}: {json.dumps(summary(record))}")

    threads = [threading.Thread(target=start, args=(name, FIRST_PORT + i), daemon=True)
               for i, name in enumerate(names)]
    if args.openai:
        threads.append(threading.Thread(target=openai_start, args=(args, root, site, out, deadline), daemon=True))
    if args.openai_kimi:
        threads.append(threading.Thread(target=openai_start, args=(args, root, site, out, deadline),
                                        kwargs={"kimi": (model, draft, variants["shipped"])}, daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pack_logs(out)
    return 0


def openai_start(args, root: Path, site: str, out: Path, deadline: float, kimi=None) -> None:
    """
    The OpenAI surface recorded: of the acceptance run's tiny Llama (given a chat template),
    or with ``kimi`` (model, draft, ``kimi_k25.py``) of the tiny Kimi with its reasoning and tool-call parsers.
    """
    import gpu_openai

    if kimi is None:
        name, port, source, what = "openai-llama", OPENAI_PORT, None, "the acceptance run's tiny Llama"
        model, draft = acceptance.write_models(root / "llama-models")
        tokenizer_config = json.loads((model / "tokenizer_config.json").read_text())
        tokenizer_config["chat_template"] = ("{%- for message in messages -%}{{ message['role'] }}: "
                                             "{{ message['content'] }}\n{%- endfor -%}"
                                             "{%- if add_generation_prompt -%}assistant:{%- endif -%}")
        (model / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1) + "\n")
        config = config_for(args.server, model, draft, [*LLAMA_FLAGS], port)
    else:
        name, port, what = "openai-kimi", OPENAI_PORT + 1, "the tiny Kimi K2.5 (as shipped), kimi_k2 parsers"
        model, draft, source = kimi
        config = config_for(args.server, model, draft, [*KIMI_FLAGS, *KIMI_PARSERS], port,
                            served_model_name="tiny-kimi-k25")
    result: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "what": f"sglang's OpenAI surface, raw (bench/gpu_openai.py), on {what}",
                    "versions": acceptance.versions(site)}

    def after(base, key):
        try:
            return gpu_openai.record("127.0.0.1", port, key, config.launch.served_model_name, 4096)
        except Exception as error:
            return {"error": f"{type(error).__name__}: {error}"}

    log(f"{name}: starting {what}")
    record = one_start(name, source, config, root, site, out, after=after,
                       ready_s=min(READY_S, deadline - time.monotonic() - STOP_RESERVE_S))
    result["exchanges"] = record.pop("after", None)
    result["server"] = record
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    log(f"{name}: recorded, ready at {record.get('ready_s')} s")


def pack_logs(out: Path) -> None:
    """The servers' logs and traces in one archive: the device gives back 8 files at most."""
    files = sorted(out.glob("*.log")) + sorted(out.glob("*.trace.jsonl"))
    files = [path for path in files if path.name != "bench.log"]
    with tarfile.open(out / "kimi-logs.tar.xz", "w:xz") as archive:
        for path in files:
            archive.add(path, arcname=path.name)
    for path in files:
        path.unlink()


def dry(model: Path, site: str) -> int:
    """Without a GPU: the config through sglang's KimiK25Config, the processor, the chat template with an image."""
    sys.path.insert(0, site)
    from transformers import AutoConfig, AutoProcessor
    import importlib.util

    spec = importlib.util.spec_from_file_location("kimi_k25_config", Path(site) / "sglang/srt/configs/kimi_k25.py")
    configs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(configs)
    AutoConfig.register("kimi_k25", configs.KimiK25Config)
    config = AutoConfig.from_pretrained(model)
    log(f"config: {type(config).__name__}, text {type(config.text_config).__name__} "
        f"{config.text_config.num_hidden_layers} layers, vision {config.vision_config.num_hidden_layers} block(s)")
    processor = AutoProcessor.from_pretrained(model, trust_remote_code=True, use_fast=True)
    rendered = processor.tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image."}]}],
        tokenize=False, add_generation_prompt=True)
    ids = processor.tokenizer(rendered)["input_ids"]
    log(f"processor {type(processor).__name__}: template renders {rendered!r} -> {ids}")
    assert config.media_placeholder_token_id in ids
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", required=True, help="the folder of the server's packages (the unpacked carry)")
    parser.add_argument("--out", default=str(PROJECT_ROOT / ".cache" / "bench" / "gpu-kimi"))
    parser.add_argument("--root", default="/tmp/sglfleet-gpu-kimi", help="the bench hosts' folder (emptied)")
    parser.add_argument("--server", choices=("sglang", "standin"), default="sglang")
    parser.add_argument("--only", nargs="*", help="these variants alone")
    parser.add_argument("--openai", action="store_true", help="also the tiny Llama's OpenAI record")
    parser.add_argument("--openai-kimi", action="store_true", help="also the tiny Kimi's, with kimi_k2 parsers")
    parser.add_argument("--dry", action="store_true", help="write the model and check it, start nothing")
    parser.add_argument("--budget-s", type=float, default=520.0, help="the whole run's seconds, stops included")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
