"""
Weights updated in place on a real sglang server (issue 43): ``POST /update_weights_from_disk``
on sglang 0.5.14, without speculative decoding and with EAGLE-3, against fresh servers.

The model: the acceptance run's tiny Llama (``gpu_acceptance.write_models``: 8 layers,
hidden 256, a word-level tokenizer) with real weights this time, written on the device
in two revisions of the same shapes (``write_weights``: torch's generator, seeds 1 and 2,
one ``model.safetensors`` each) into ``/tmp/rev-a`` and ``/tmp/rev-b``, and its one-layer
EAGLE-3 draft (``LlamaForCausalLMEagle3``, seed 3, HF EAGLE-3 names: ``midlayer.*``, ``fc``)
into ``/tmp/rev-draft``. No ``--load-format dummy``: an update reads the file.

Four servers start at once on the one GPU (``SERVERS``), each ``python -m sglang.launch_server``
in a session of its own (``gpu_pd.start``), ``--served-model-name tiny-llama``:

- ``plain``: rev A, no speculative decoding, no API key;
- ``eagle``: rev A with the draft (EAGLE-3 3/1/4, prod's), ``--api-key``;
- ``fresh_b``: rev B, plain, never updated: the greedy reference for rev B;
- ``fresh_b_eagle``: rev B with the draft, ``--api-key`` and ``--admin-api-key``: the
  EAGLE-3 reference for rev B, then (last) the update's key rules with an admin key.

For ``plain`` and ``eagle`` in turn (``exercise``), each answer kept with its status line,
headers and body as they came over a socket (``gpu_openai.Connection``):

1. what ``/model_info``, ``/server_info``, ``/get_server_info``, ``/weight_version`` and
   ``/v1/models`` say (``snapshot``); greedy generations of ``PROMPTS`` (32 tokens,
   temperature 0, ``ignore_eos``) and one of ``STREAM_TOKENS`` tokens (the references);
2. (``eagle``) the update without the key;
3. the update to rev B *while a streamed ``/generate`` of ``STREAM_TOKENS`` tokens is in
   flight* (``in_flight_update``): sent once the stream has ``UPDATE_AFTER_EVENTS`` events,
   with a short ``/generate`` sent 50 ms after it; every event's arrival time and token
   count, when the update was sent and answered, when the late request was answered, and
   the stream's words against rev A's and rev B's references (where they part);
4. the snapshot and the greedy generations again, against ``fresh_b`` (and ``fresh_b_eagle``);
   on the plain server also every input token's logprob of ``PROMPTS`` followed by
   ``CONTINUATION`` (``scores``, teacher-forced), before and after each update, against
   ``fresh_b``'s: greedy choices part at near ties between decode paths even on one server
   (``fresh_b`` against itself), the teacher-forced logprobs do not;
5. an update back to rev A with ``abort_all_requests: true``, again mid-stream;
6. an update to a path that does not exist; the snapshot and greedy generations after it;
   then an update to rev B with nothing in flight (how long the load itself takes);
7. whether the process still runs, ``/health``; when it ended and its log's last lines if not
   (an update whose connection breaks waits up to 20 s for the process's end).

Then ``fresh_b_eagle`` (``admin_rules``): the update without a key and with the API key,
``/generate`` with the admin key, then with the admin key an update to the draft's own
folder, and one to rev B.
The transcript (``weight-updates.json``) is written after every step; the servers' logs
are packed into ``weight-updates-logs.tar.xz`` (the device gives back 8 files at most).

**Example** (the run of ``tests/data/gpu/weight-updates-h200-sglang-0.5.14.json``, 2026-12-04:
206 s on a cold machine, the servers' start 147 s of it):

.. code:: shell

    # here: the acceptance run's carry (bench/gpu_acceptance.py prepare writes .whl/), and this
    # checkout's files, in one folder under the shared cache. The run tool sends the checkout its
    # session began in (it was not this worktree), so the bench travels inside the carry.
    C=.cache/bench/gpu-records-carry; mkdir -p $C/repo && mv .whl/sglang-0.5.14-site.tar.xz $C/ &&
      (git ls-files bench sglfleet files inventory pyproject.toml; git ls-files -o --exclude-standard bench) |
      tar -cf - -T - | tar -xf - -C $C/repo

    # on the device, through the run tool: carry [".cache/bench/gpu-records-carry"], timeout_s 560:
    set -o pipefail; C=$PWD/.cache/bench/gpu-records-carry; ls $C >/dev/null || exit 3; mkdir -p /tmp/site &&
      tar -xJf $C/sglang-0.5.14-site.tar.xz -C /tmp/site && cd $C/repo && export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 &&
      timeout 500 python3 bench/gpu_weight_updates.py --site /tmp/site --out $OUT --budget-s 480 2>&1 |
      tee $OUT/weight-bench.log | grep -v "^\\[gpu-pd"

    # back here: the transcript, and each server's log out of the archive
    cp <files_at>/weight-updates.json tests/data/gpu/weight-updates-h200-sglang-0.5.14.json
    mkdir -p /tmp/wu && tar -xJf <files_at>/weight-updates-logs.tar.xz -C /tmp/wu &&
      for s in plain eagle fresh_b fresh_b_eagle; do
        cp /tmp/wu/$s.log tests/data/gpu/weight-updates-h200-sglang-0.5.14-$s.log; done

    # a rehearsal without a GPU, against the stand-in (no torch here: configs only; no update route: 404s)
    .venv/bin/python bench/gpu_weight_updates.py --site .cache/standin/sglang-0.5.14-py --out /tmp/wu --standin
"""

from __future__ import annotations

import argparse
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
import gpu_pd  # noqa: E402
from gpu_acceptance import PROJECT_ROOT, Transcript  # noqa: E402
from gpu_openai import Connection, sse_events  # noqa: E402

REV_A, REV_B, DRAFT = Path("/tmp/rev-a"), Path("/tmp/rev-b"), Path("/tmp/rev-draft")
MISSING = "/tmp/rev-does-not-exist"
SEEDS = {"rev-a": 1, "rev-b": 2, "draft": 3}
LM_HEAD_STD = 0.25  # logits of std ~4: greedy choices far apart, not at bf16's mercy
API_KEY = "sk-gpu-weight-updates"  # throwaway keys, on loopback, for servers that live as long as the run
ADMIN_KEY = "sk-gpu-weight-updates-admin"
SERVED = "tiny-llama"
# Real weights (no dummy), no FA3, no xgrammar; four servers share the GPU: a small KV pool,
# CUDA graphs up to batch 8 (prod keeps them; an update must leave them right).
FLAGS = ("--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
         "--mem-fraction-static", "0.3", "--max-total-tokens", "16384", "--cuda-graph-max-bs", "8",
         "--max-running-requests", "16", "--host", "127.0.0.1", "--served-model-name", SERVED)
EAGLE = ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(DRAFT),
         "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
SERVERS = {  # name: (port, model, extra flags)
    "plain": (30501, REV_A, ()),
    "eagle": (30502, REV_A, (*EAGLE, "--api-key", API_KEY)),
    "fresh_b": (30503, REV_B, ()),
    "fresh_b_eagle": (30504, REV_B, (*EAGLE, "--api-key", API_KEY, "--admin-api-key", ADMIN_KEY)),
}
KEYS = {"plain": None, "eagle": API_KEY, "fresh_b": None, "fresh_b_eagle": API_KEY}
PROMPTS = ("The capital of France is", "Write a long story about a lighthouse keeper.",
           "Tell me about the sea.", "Answer with one word:")
GREEDY_TOKENS = 32
# Teacher-forced scoring: each prompt followed by the same words, every input token's logprob
# (``return_logprob``, ``logprob_start_len`` 0): equal weights give equal logprobs up to bf16
# noise, whatever the greedy choices do at near ties.
CONTINUATION = " ".join(f"w{n}" for n in range(200, 232))
STREAM_PROMPT = "Write a long story about a lighthouse keeper."
STREAM_TOKENS = 512
UPDATE_AFTER_EVENTS = 64
INFO_KEYS = ("weight_version", "model_path", "served_model_name", "load_format", "tokenizer_path",
             "speculative_algorithm", "speculative_draft_model_path", "speculative_draft_load_format", "version")
STARTED: list[dict] = []


def log(message: str) -> None:
    print(f"[gpu-weight-updates {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the model, in two revisions ---------------------------------------------------------


def write_weights(folder: Path, config: dict, seed: int, draft: bool = False) -> dict:
    """
    Random weights of ``config``'s shapes from torch's generator seeded with ``seed``, as one
    bf16 ``model.safetensors``: the target's HF Llama names, or (``draft``) an EAGLE-3 draft's
    (``midlayer.*`` with a 2 x hidden input, ``fc`` from 3 x hidden, its own ``lm_head``; the
    embedding comes from the target). Without torch (a rehearsal), the configs alone.
    """
    try:
        import torch
        from safetensors.torch import save_file
    except ImportError:
        return {"folder": str(folder), "weights": None, "why": "no torch here"}
    g = torch.Generator().manual_seed(seed)
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv, hd = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]

    def lin(out: int, inp: int):
        return torch.randn(out, inp, generator=g) / inp ** 0.5

    def layer(prefix: str, inp: int) -> dict:
        return {f"{prefix}.self_attn.q_proj.weight": lin(heads * hd, inp),
                f"{prefix}.self_attn.k_proj.weight": lin(kv * hd, inp),
                f"{prefix}.self_attn.v_proj.weight": lin(kv * hd, inp),
                f"{prefix}.self_attn.o_proj.weight": lin(h, heads * hd),
                f"{prefix}.mlp.gate_proj.weight": lin(inter, h), f"{prefix}.mlp.up_proj.weight": lin(inter, h),
                f"{prefix}.mlp.down_proj.weight": lin(h, inter),
                f"{prefix}.input_layernorm.weight": torch.ones(h),
                f"{prefix}.post_attention_layernorm.weight": torch.ones(h)}

    if draft:
        tensors = {**layer("midlayer", 2 * h), "midlayer.hidden_norm.weight": torch.ones(h),
                   "fc.weight": lin(h, 3 * h), "norm.weight": torch.ones(h),
                   "lm_head.weight": torch.randn(vocab, h, generator=g) * LM_HEAD_STD}
    else:
        tensors = {"model.embed_tokens.weight": torch.randn(vocab, h, generator=g),
                   "model.norm.weight": torch.ones(h),
                   "lm_head.weight": torch.randn(vocab, h, generator=g) * LM_HEAD_STD}
        for index in range(config["num_hidden_layers"]):
            tensors.update(layer(f"model.layers.{index}", h))
    tensors = {name: value.to(torch.bfloat16).contiguous() for name, value in tensors.items()}
    path = folder / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    return {"folder": str(folder), "seed": seed, "tensors": len(tensors), "bytes": path.stat().st_size,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "lm_head_row0_first4": [round(float(x), 4) for x in tensors["lm_head.weight"][0, :4]]}


def write_revisions(root: Path) -> dict:
    """The tiny Llama's configs and tokenizer (``write_models``), copied to rev A, rev B and the draft, each with its weights."""
    model, draft = acceptance.write_models(root)
    for folder in (REV_A, REV_B, DRAFT):
        shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(model, REV_A)
    shutil.copytree(model, REV_B)
    shutil.copytree(draft, DRAFT)
    target = json.loads((model / "config.json").read_text())
    return {"rev-a": write_weights(REV_A, target, SEEDS["rev-a"]),
            "rev-b": write_weights(REV_B, target, SEEDS["rev-b"]),
            "draft": write_weights(DRAFT, json.loads((draft / "config.json").read_text()), SEEDS["draft"], draft=True),
            "target_config": target, "draft_config": json.loads((draft / "config.json").read_text())}


# --- HTTP, raw -------------------------------------------------------------------------


class Counting(Connection):
    """A connection that counts the SSE events it has received, and says when there are ``wanted``."""

    def __init__(self, host: str, port: int, wanted: int = 0, timeout: float = 300.0):
        super().__init__(host, port, timeout)
        self.events, self.wanted, self.reached = 0, wanted, threading.Event()

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        self.events += data.count(b"data:")
        if self.wanted and self.events >= self.wanted:
            self.reached.set()
        return bool(data)


def exchange(port: int, method: str, path: str, payload=None, key: str | None = None, timeout: float = 300.0,
             conn: Connection | None = None) -> dict:
    """One request on a new connection (or ``conn``): its answer as it came (``Connection.send``), or the error."""
    headers = {"Accept": "*/*"}
    if payload is not None:
        headers["Content-Type"] = "application/json"
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = json.dumps(payload).encode() if payload is not None else None
    started = time.monotonic()
    own = conn is None
    try:
        conn = conn or Connection("127.0.0.1", port, timeout)
        answer = conn.send(method, path, body, headers)
    except (OSError, ConnectionError, ValueError, IndexError) as error:
        return {"request": {"method": method, "path": path, "body": (body or b"").decode()[:500]},
                "error": f"{type(error).__name__}: {error}", "seconds": round(time.monotonic() - started, 4)}
    finally:
        if own and conn is not None:
            conn.close()
    return answer


def brief(answer: dict) -> dict:
    """An answer without its chunks: status line, headers, body (or the error), seconds."""
    keep = ("request", "status_line", "status", "headers", "framing", "body", "json", "seconds", "error",
            "first_byte_s")
    out = {key: answer[key] for key in keep if key in answer}
    if isinstance(out.get("body"), str) and len(out["body"]) > 3000:
        out["body"] = out["body"][:3000] + "..."
        out.pop("json", None)
    return out


def generate(port: int, key: str | None, text: str, tokens: int, timeout: float = 120.0) -> dict:
    """One greedy ``/generate`` (temperature 0, ``ignore_eos``): text, output ids, the meta_info that matters."""
    answer = exchange(port, "POST", "/generate", {"text": text, "sampling_params": {
        "max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}, key, timeout)
    body = answer.get("json") if isinstance(answer.get("json"), dict) else {}
    meta = body.get("meta_info", {})
    return {"status": answer.get("status"), "error": answer.get("error"), "seconds": answer.get("seconds"),
            "text": body.get("text"), "output_ids": body.get("output_ids"),
            "meta_info": {k: meta.get(k) for k in ("completion_tokens", "finish_reason", "weight_version",
                                                    "spec_verify_ct", "spec_accept_length") if k in meta},
            "body": None if body else (answer.get("body") or "")[:500]}


def greedy(port: int, key: str | None) -> list[dict]:
    return [dict(prompt=prompt, **generate(port, key, prompt, GREEDY_TOKENS)) for prompt in PROMPTS]


def same_outputs(a: list[dict], b: list[dict]) -> dict:
    """Whether two greedy sets are equal, prompt by prompt (output ids where both have them, else text)."""
    per = []
    for x, y in zip(a, b):
        if x.get("output_ids") is not None and y.get("output_ids") is not None:
            per.append(x["output_ids"] == y["output_ids"])
        else:
            per.append(x.get("text") is not None and x.get("text") == y.get("text"))
    return {"all_equal": bool(per) and all(per), "per_prompt": per}


def first_difference(a: list[dict], b: list[dict]) -> list[int | None]:
    """Per prompt, the index of the first output id where two greedy sets differ (None: equal)."""
    found = []
    for x, y in zip(a, b):
        p, q = x.get("output_ids") or [], y.get("output_ids") or []
        index = next((i for i, (u, v) in enumerate(zip(p, q)) if u != v), None)
        found.append(index if index is not None or len(p) == len(q) else min(len(p), len(q)))
    return found


def compare(a: list[dict], b: list[dict]) -> dict:
    """Two greedy sets: equal per prompt, and where each pair parts."""
    return {**same_outputs(a, b), "first_different_token": first_difference(a, b)}


def scores(port: int, key: str | None) -> list[dict]:
    """Each prompt with ``CONTINUATION``, teacher-forced: every input token's logprob (4 decimals)."""
    found = []
    for prompt in PROMPTS:
        answer = exchange(port, "POST", "/generate", {
            "text": f"{prompt} {CONTINUATION}", "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": True, "logprob_start_len": 0}, key, 120.0)
        body = answer.get("json") if isinstance(answer.get("json"), dict) else {}
        values = body.get("meta_info", {}).get("input_token_logprobs")
        found.append({"status": answer.get("status"), "error": answer.get("error"),
                      "logprobs": [None if v[0] is None else round(v[0], 4) for v in values] if values else None,
                      "body": None if values else (answer.get("body") or "")[:300]})
    return found


def distance(a: list[dict], b: list[dict]) -> dict:
    """The largest absolute difference of two scorings' logprobs, per prompt and overall (None: not comparable)."""
    per = []
    for x, y in zip(a, b):
        p, q = x.get("logprobs"), y.get("logprobs")
        diffs = [abs(u - v) for u, v in zip(p, q) if u is not None and v is not None] if p and q and len(p) == len(q) else []
        per.append(round(max(diffs), 4) if diffs else None)
    return {"max_abs_logprob_diff_per_prompt": per, "max": max((d for d in per if d is not None), default=None)}


def parting(a: str | None, b: str | None) -> int | None:
    """The index of the first word where two texts differ (None: equal; the shorter's length if one is a prefix)."""
    if a is None or b is None:
        return None
    x, y = a.split(), b.split()
    for index, (p, q) in enumerate(zip(x, y)):
        if p != q:
            return index
    return None if len(x) == len(y) else min(len(x), len(y))


def snapshot(port: int, key: str | None) -> dict:
    """What the server says of its model and weight version, and whether it answers."""
    found: dict = {}
    for path in ("/model_info", "/server_info", "/get_server_info", "/weight_version", "/v1/models", "/health"):
        answer = exchange(port, "GET", path, key=key, timeout=30.0)
        entry = {"status": answer.get("status"), "error": answer.get("error"), "seconds": answer.get("seconds")}
        body = answer.get("json")
        if path in ("/server_info", "/get_server_info") and isinstance(body, dict):
            entry["fields"] = {name: body.get(name) for name in INFO_KEYS if name in body}
        elif body is not None:
            entry["json"] = body
        else:
            entry["body"] = (answer.get("body") or "")[:300]
        found[path] = entry
    return found


# --- an update with a stream in flight --------------------------------------------------


def stream_summary(answer: dict, offset: float, marks: dict[str, float | None]) -> dict:
    """
    A streamed ``/generate`` as it arrived: each event's time (on the run's clock) and token
    count, the longest pause and where, how many tokens came before, during and after each
    span of ``marks`` (name -> time), how it ended.
    """
    timeline, done, final = [], None, None
    for chunk in answer.get("chunks", []):
        at = round(chunk["at_s"] + offset, 4)
        for event in sse_events(chunk["data"]):
            data = event.get("json")
            if isinstance(data, dict):
                meta = data.get("meta_info", {})
                timeline.append([at, meta.get("completion_tokens")])
                final = data
            elif event.get("raw", "").strip() == "data: [DONE]":
                done = at
    gaps = [(round(b[0] - a[0], 4), a[0], b[0]) for a, b in zip(timeline, timeline[1:])]
    longest = max(gaps, default=None)
    meta = (final or {}).get("meta_info", {})
    out = {"events": len(timeline), "first_event_s": timeline[0][0] if timeline else None,
           "last_event_s": timeline[-1][0] if timeline else None, "done_event_s": done,
           "status": answer.get("status"), "error": answer.get("error"), "framing": answer.get("framing"),
           "ended_with_last_chunk": answer.get("trailer") is not None,
           "completion_tokens": meta.get("completion_tokens"), "finish_reason": meta.get("finish_reason"),
           "weight_version": meta.get("weight_version"),
           "longest_pause": {"seconds": longest[0], "from_s": longest[1], "to_s": longest[2]} if longest else None,
           "text": (final or {}).get("text"), "timeline": timeline}
    for name, at in marks.items():
        if at is not None:
            before = [t for t in timeline if t[0] <= at]
            out[f"tokens_by_{name}"] = before[-1][1] if before else 0
            out[f"events_after_{name}"] = len(timeline) - len(before)
    return out


def in_flight_update(port: int, key: str | None, body: dict, stream_tokens: int = STREAM_TOKENS) -> dict:
    """
    A streamed ``/generate`` (greedy, ``ignore_eos``), the update sent once it has
    ``UPDATE_AFTER_EVENTS`` events, a short ``/generate`` 50 ms after the update; every time on one clock.
    """
    t0 = time.monotonic()
    result: dict = {"update_body": body}
    try:
        conn = Counting("127.0.0.1", port, UPDATE_AFTER_EVENTS)
    except OSError as error:
        return {**result, "error": f"{type(error).__name__}: {error}", "stream": {}, "late_request": {},
                "update": {"error": "not sent: the stream could not connect"}, "update_sent_s": 0.0,
                "update_answered_s": 0.0}
    stream_payload = {"text": STREAM_PROMPT, "stream": True,
                      "sampling_params": {"max_new_tokens": stream_tokens, "temperature": 0, "ignore_eos": True}}
    holder: dict = {}

    def streaming() -> None:
        holder["offset"] = round(time.monotonic() - t0, 4)
        holder["answer"] = exchange(port, "POST", "/generate", stream_payload, key, conn=conn)
        holder["ended_s"] = round(time.monotonic() - t0, 4)

    def late() -> None:
        holder["late_sent_s"] = round(time.monotonic() - t0, 4)
        holder["late"] = generate(port, key, PROMPTS[0], GREEDY_TOKENS)
        holder["late_answered_s"] = round(time.monotonic() - t0, 4)

    stream_thread = threading.Thread(target=streaming, daemon=True)
    stream_thread.start()
    reached = conn.reached.wait(60)
    result["stream_events_when_update_sent"] = conn.events
    result["update_sent_s"] = round(time.monotonic() - t0, 4)
    late_thread = threading.Timer(0.05, late)
    late_thread.daemon = True
    late_thread.start()
    update = exchange(port, "POST", "/update_weights_from_disk", body, key, timeout=300.0)
    result["update_answered_s"] = round(time.monotonic() - t0, 4)
    result["update"] = brief(update)
    stream_thread.join(300)
    late_thread.join(300)
    conn.close()
    answer = holder.get("answer", {"error": "the stream did not end within 300 s"})
    result["stream"] = stream_summary(answer, holder.get("offset", 0.0), {
        "update_sent": result["update_sent_s"], "update_answered": result["update_answered_s"]})
    result["stream"]["reached_update_point"] = reached
    result["stream"]["ended_s"] = holder.get("ended_s")
    result["stream"]["raw_first_chunks"] = [c["data"][:600] for c in answer.get("chunks", [])[:2]]
    result["stream"]["raw_last_chunks"] = [c["data"][:600] for c in answer.get("chunks", [])[-3:]]
    result["late_request"] = {"sent_s": holder.get("late_sent_s"), "answered_s": holder.get("late_answered_s"),
                              **holder.get("late", {})}
    return result


# --- the run ----------------------------------------------------------------------------


def alive(server: dict) -> dict:
    status = server["proc"].poll()
    return {"running": status is None, "exit_status": status}


def tail(path: Path, lines: int = 30) -> list[str]:
    return [line[:400] for line in path.read_text(errors="replace").splitlines()[-lines:]] if path.exists() else []


def ended_within(server: dict, seconds: float) -> dict:
    """Wait up to ``seconds`` for the server's process to end: whether and when it did, its status."""
    started = time.monotonic()
    try:
        server["proc"].wait(seconds)
    except Exception:  # still running (subprocess.TimeoutExpired)
        pass
    status = server["proc"].poll()
    return {"ended": status is not None, "exit_status": status,
            "waited_s": round(time.monotonic() - started, 3)}


def exercise(name: str, server: dict, port: int, key: str | None, refs: dict, transcript: Transcript) -> dict:
    """Steps 1-7 of the docstring on one server; the record grows in the transcript after each."""
    record: dict = {}
    body_b = {"model_path": str(REV_B), "weight_version": "rev-b"}
    score = key is None  # teacher-forced logprobs on the plain servers only (not asked of EAGLE-3)

    def save(**entries) -> bool:
        record.update(entries)
        record["process"] = alive(server)
        transcript.setdefault("servers", {})[name] = record
        transcript.save()
        if not record["process"]["running"]:
            record["log_tail"] = tail(server["log"], 60)
            transcript.save()
            log(f"{name}: the server ended ({record['process']['exit_status']})")
        return record["process"]["running"]

    def settled(answer: dict) -> bool:
        """After an update: if its connection broke, wait for the process's end; whether it still runs."""
        if answer.get("error") or answer.get("status") is None:
            return save(end_after_update=ended_within(server, 20.0))
        time.sleep(0.5)
        return save()

    log(f"{name}: before")
    before = greedy(port, key)
    if not save(before=snapshot(port, key), greedy_before=before,
                greedy_before_vs_fresh_b=compare(before, refs["fresh_b"]),
                long_before=generate(port, key, STREAM_PROMPT, STREAM_TOKENS)):
        return record
    if score:
        record["scores_before"] = scores(port, key)
        record["scores_before_vs_fresh_b"] = distance(record["scores_before"], refs["scores_b"])
    if key:
        save(update_without_key=brief(exchange(port, "POST", "/update_weights_from_disk", body_b, None)))
    log(f"{name}: the update to rev B with a stream in flight")
    update = in_flight_update(port, key, body_b)
    stream = update["stream"]
    stream["parts_from_rev_a_at_word"] = parting(stream.get("text"), record["long_before"]["text"])
    stream["parts_from_rev_b_at_word"] = parting(stream.get("text"), refs["long_b"].get("text"))
    late = update["late_request"]
    late["vs_rev_a"] = compare([late], before[:1]) if late.get("output_ids") else None
    late["vs_rev_b"] = compare([late], refs["fresh_b"][:1]) if late.get("output_ids") else None
    log(f"{name}: update {update['update'].get('status')} in "
        f"{round(update['update_answered_s'] - update['update_sent_s'], 3)} s: "
        f"{update['update'].get('body') or update['update'].get('error')}")
    save(update_in_flight=update)
    if not settled(update["update"]):
        return record
    after = greedy(port, key)
    save(after=snapshot(port, key), greedy_after=after,
         greedy_after_vs_fresh_b=compare(after, refs["fresh_b"]),
         greedy_after_vs_fresh_b_eagle=compare(after, refs["fresh_b_eagle"]),
         greedy_after_vs_before=compare(after, before),
         long_after=generate(port, key, STREAM_PROMPT, STREAM_TOKENS),
         served_name_after={"old_name": brief(exchange(port, "POST", "/v1/completions", {
             "model": SERVED, "prompt": PROMPTS[0], "max_tokens": 4, "temperature": 0}, key)),
             "path_as_name": brief(exchange(port, "POST", "/v1/completions", {
                 "model": str(REV_B), "prompt": PROMPTS[0], "max_tokens": 4, "temperature": 0}, key))})
    record["long_after_parts_from_fresh_b_at_word"] = parting(record["long_after"]["text"], refs["long_b"].get("text"))
    if score:
        record["scores_after"] = scores(port, key)
        record["scores_after_vs_fresh_b"] = distance(record["scores_after"], refs["scores_b"])
        record["scores_after_vs_before"] = distance(record["scores_after"], record["scores_before"])
    if not save():
        return record
    log(f"{name}: back to rev A with abort_all_requests, a stream in flight")
    back = in_flight_update(port, key, {"model_path": str(REV_A), "weight_version": "rev-a-again",
                                        "abort_all_requests": True})
    back["stream"]["parts_from_rev_b_at_word"] = parting(back["stream"].get("text"), refs["long_b"].get("text"))
    save(update_back_aborting=back)
    if not settled(back["update"]):
        return record
    back_greedy = greedy(port, key)
    save(after_back=snapshot(port, key), greedy_after_back=back_greedy,
         greedy_after_back_vs_before=compare(back_greedy, before))
    if score:
        record["scores_after_back"] = scores(port, key)
        record["scores_after_back_vs_before"] = distance(record["scores_after_back"], record["scores_before"])
    log(f"{name}: an update to a path that does not exist")
    started = time.monotonic()
    missing = exchange(port, "POST", "/update_weights_from_disk",
                       {"model_path": MISSING, "weight_version": "missing"}, key, timeout=300.0)
    save(update_missing_path={"answer": brief(missing), "seconds": round(time.monotonic() - started, 4)})
    if not settled(missing):
        return record
    bad_greedy = greedy(port, key)
    save(after_missing=snapshot(port, key), greedy_after_missing=bad_greedy,
         greedy_after_missing_vs_before=compare(bad_greedy, before))
    if score:
        record["scores_after_missing"] = scores(port, key)
        record["scores_after_missing_vs_before"] = distance(record["scores_after_missing"], record["scores_before"])
    log(f"{name}: an update to rev B with nothing in flight")
    started = time.monotonic()
    idle = exchange(port, "POST", "/update_weights_from_disk",
                    {"model_path": str(REV_B), "weight_version": "rev-b-idle"}, key, timeout=300.0)
    save(update_idle={"answer": brief(idle), "seconds": round(time.monotonic() - started, 4)})
    if not settled(idle):
        return record
    if score:
        record["scores_after_idle_update"] = scores(port, key)
        record["scores_after_idle_update_vs_fresh_b"] = distance(record["scores_after_idle_update"], refs["scores_b"])
    save(after_idle_update=snapshot(port, key), health_at_end=brief(exchange(port, "GET", "/health", timeout=10.0)))
    return record


def admin_rules(server: dict, port: int, refs: dict) -> dict:
    """
    ``fresh_b_eagle`` (``--api-key`` and ``--admin-api-key``): the update without a key and
    with the API key; ``/generate`` with the admin key; with the admin key, an update to the
    draft's own folder, then to rev B (the target's, as the server was started).
    """
    found: dict = {"without_key": brief(exchange(port, "POST", "/update_weights_from_disk",
                                                 {"model_path": str(REV_B), "weight_version": "x"}, None)),
                   "with_api_key": brief(exchange(port, "POST", "/update_weights_from_disk",
                                                  {"model_path": str(REV_B), "weight_version": "x"}, API_KEY)),
                   "generate_with_admin_key": generate(port, ADMIN_KEY, PROMPTS[0], 8)}
    found["draft_path_update"] = brief(exchange(port, "POST", "/update_weights_from_disk", {
        "model_path": str(DRAFT), "weight_version": "draft-folder"}, ADMIN_KEY, 300.0))
    time.sleep(0.5)
    found["after_draft_path_update"] = {"process": alive(server)}
    if found["after_draft_path_update"]["process"]["running"]:
        after = greedy(port, API_KEY)
        found["after_draft_path_update"].update(
            model_info=brief(exchange(port, "GET", "/model_info", key=API_KEY, timeout=10.0)),
            greedy=after, vs_fresh_b=compare(after, refs["fresh_b"]),
            vs_fresh_b_eagle_before=compare(after, refs["fresh_b_eagle"]))
    found["rev_b_update"] = brief(exchange(port, "POST", "/update_weights_from_disk", {
        "model_path": str(REV_B), "weight_version": "rev-b-admin"}, ADMIN_KEY, 300.0))
    found["after_rev_b_update"] = ended_within(server, 20.0) if (
        found["rev_b_update"].get("error") or found["rev_b_update"].get("status") is None) else {"process": alive(server)}
    if server["proc"].poll() is None:
        found["after_rev_b_update"]["generate"] = generate(port, API_KEY, PROMPTS[0], GREEDY_TOKENS)
    else:
        found["log_tail"] = tail(server["log"], 60)
    return found


def kill_all() -> None:
    for server in STARTED:
        for pid in [server["proc"].pid, *acceptance.session_processes(server["proc"].pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def pack_logs(out: Path, name: str = "weight-updates-logs.tar.xz") -> None:
    """The servers' logs in one archive: the device gives back 8 files at most."""
    files = [out / f"{server}.log" for server in SERVERS if (out / f"{server}.log").exists()]
    with tarfile.open(out / name, "w:xz") as archive:
        for path in files:
            archive.add(path, arcname=path.name)
    for path in files:
        path.unlink()


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def ended(signum, frame):  # a timeout: kill every server's session, keep the logs
        kill_all()
        pack_logs(out)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, ended)
    deadline = time.monotonic() + args.budget_s
    site = str(Path(args.site).resolve())
    transcript = Transcript(out / "weight-updates.json")
    transcript.save(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    what="POST /update_weights_from_disk on sglang, plain and EAGLE-3 (bench/gpu_weight_updates.py)",
                    versions=acceptance.versions(site))
    models = write_revisions(Path(args.root))
    transcript.save(models=models, flags=list(FLAGS), eagle_flags=list(EAGLE), prompts=list(PROMPTS),
                    greedy_tokens=GREEDY_TOKENS, continuation=CONTINUATION, stream_prompt=STREAM_PROMPT, stream_tokens=STREAM_TOKENS,
                    update_after_events=UPDATE_AFTER_EVENTS)
    log(f"weights written: {json.dumps({k: models[k].get('sha256') for k in ('rev-a', 'rev-b', 'draft')})}")
    servers = {}
    for name, (port, model, extra) in SERVERS.items():
        entry = ([sys.executable, str(PROJECT_ROOT / "files" / "standin" / "sglang_standin.py")] if args.standin
                 else [sys.executable, "-m", "sglang.launch_server"])
        argv = [*entry, "--model-path", str(model), "--port", str(port), *FLAGS, *extra]
        servers[name] = gpu_pd.start(name, argv, site, out)
        STARTED.append(servers[name])
    transcript.save(argv={name: [a if a not in (API_KEY, ADMIN_KEY) else "<key>" for a in s["argv"][1:]]
                          for name, s in servers.items()})
    try:
        ready = {}
        for name, server in servers.items():
            ready[name] = gpu_pd.wait_health(f"http://127.0.0.1:{SERVERS[name][0]}", deadline - 200, server["proc"])
            ready[name]["since_start_s"] = round(time.monotonic() - server["started"], 2)
            log(f"{name}: {ready[name]}")
        transcript.save(ready=ready)
        if not all(r["ready"] for r in ready.values()):
            transcript.save(log_tails={name: tail(s["log"]) for name, s in servers.items()})
        refs: dict = {"fresh_b": [], "fresh_b_eagle": [], "long_b": {}, "scores_b": []}
        if ready["fresh_b"]["ready"]:
            port = SERVERS["fresh_b"][0]
            refs["fresh_b"] = greedy(port, None)
            refs["fresh_b_repeat"] = greedy(port, None)
            refs["fresh_b_repeat_vs_fresh_b"] = compare(refs["fresh_b_repeat"], refs["fresh_b"])
            refs["long_b"] = generate(port, None, STREAM_PROMPT, STREAM_TOKENS)
            refs["fresh_b_snapshot"] = snapshot(port, None)
            refs["scores_b"] = scores(port, None)
            refs["scores_b_repeat_vs_scores_b"] = distance(scores(port, None), refs["scores_b"])
        if ready["fresh_b_eagle"]["ready"]:
            refs["fresh_b_eagle"] = greedy(SERVERS["fresh_b_eagle"][0], API_KEY)
            refs["fresh_b_eagle_vs_fresh_b"] = compare(refs["fresh_b_eagle"], refs["fresh_b"])
        transcript.save(references=refs)
        for name in ("plain", "eagle"):
            if ready[name]["ready"] and time.monotonic() < deadline - 60:
                exercise(name, servers[name], SERVERS[name][0], KEYS[name], refs, transcript)
        if ready["fresh_b_eagle"]["ready"] and time.monotonic() < deadline - 40:
            log("fresh_b_eagle: the update's key rules with an admin key")
            transcript.save(admin_key_rules=admin_rules(servers["fresh_b_eagle"], SERVERS["fresh_b_eagle"][0], refs))
    finally:
        stops = {name: gpu_pd.stop(server) for name, server in servers.items()}
        transcript.save(stops=stops, ending_lines={name: tail(s["log"], 12) for name, s in servers.items()},
                        seconds=round(time.monotonic() - (deadline - args.budget_s), 1))
        pack_logs(out)
        log(f"stops: {stops}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", required=True, help="the folder of the server's packages (the unpacked carry)")
    parser.add_argument("--out", required=True, help="where weight-updates.json and the logs go")
    parser.add_argument("--root", default="/tmp/gpu-weight-updates", help="where write_models writes")
    parser.add_argument("--budget-s", type=float, default=510.0, help="the whole run's seconds, stops included")
    parser.add_argument("--standin", action="store_true", help="the stand-in instead of sglang (a rehearsal)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
