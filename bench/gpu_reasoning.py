"""
Where a real sglang server puts a chat answer's thinking (issue 44's remnants): thinking turned
off per request, and a thinking that closes, with ``usage.reasoning_tokens`` beside each.

Two servers, each ``python -m sglang.launch_server`` in a session of its own (``gpu_pd.start``),
random weights (``--load-format dummy``), ``--enable-custom-logit-processor``:

- ``kimi`` (port 30521): the tiny Kimi K2.5 of ``gpu_kimi.write_kimi`` (no EAGLE-3 draft),
  ``--reasoning-parser kimi_k2 --tool-call-parser kimi_k2``, ``--trust-remote-code``;
- ``llama`` (30522): the acceptance run's tiny Llama with the surface record's chat template and
  flags (``gpu_http_surface.FLAGS``: ``--reasoning-parser qwen3``).

Each model's word-level tokenizer gets ``<think>`` and ``</think>`` (``add_think_tokens``): its
last two filler words' ids become those, as added tokens that are not special (so they stay in
the decoded text, as Kimi K2's and Qwen3's do). Without them ``</think>`` is three pieces of the
whitespace pre-tokenizer and sglang's ``think_end_id`` (the first id of its encoding,
``scheduler.py:725-732``) is ``<unk>``'s.

The model is made to close its thinking with a custom logit processor (``FORCER_SOURCE``,
serialised by dill on the device as sglang's ``CustomLogitProcessor.to_str`` does): the request's
``custom_params.forced`` lists the token ids it samples, one a step (counted per request by the
processor itself, so the overlap scheduler's lag in ``output_ids`` does not shift them). The
forced answer mirrors the stand-in's model: ``THOUGHT`` words, ``</think>``, then answer words,
16 tokens in all. ``logit_bias`` (+100 on ``</think>``) is the plain OpenAI way: every token is
the end token.

For each server, over one HTTP/1.1 connection kept alive (``gpu_openai.Connection``: status line,
headers, framing and every chunk as they came), greedy, ``max_tokens`` 16 (``cases``):

- ``default``: no ``chat_template_kwargs`` (the parser's default: thinking on);
- ``off`` / ``off_stream``: the toggle this parser reads set to false (``kimi_k2``: ``thinking``,
  ``qwen3``: ``enable_thinking``; ``serving_chat.py:1725-1770`` over ``reasoning_default``,
  ``reasoning_parser.py:334`` for kimi_k2 and 266 for qwen3), not streamed and streamed with usage;
- ``other_key_off``: the other parser's toggle set to false (not read by this parser);
- ``closed`` / ``closed_stream``: the forced answer (thinking, end token, answer);
- ``closed_off``: the forced answer with thinking turned off;
- ``opened_closed``: ``<think>``, 8 words, ``</think>``, then answer words (a model that opens
  its thinking itself);
- ``end_bias`` / ``end_bias_stream``: ``logit_bias`` on ``</think>``;
- ``generate_closed``: ``/generate`` with the forced answer: its ``output_ids`` (what the
  processor made the model say) and ``meta_info.reasoning_tokens`` (``/generate`` asks for none).
  The recorded run (2026-12-05) sent the processor inside ``sampling_params`` as well, which
  0.5.14 answers with a plain-text 500 (``SamplingParams.__init__() got an unexpected keyword
  argument 'custom_logit_processor'``); it goes at the top alone since.

``summary`` says of each where the text went (per streamed event: which delta field, its text)
and the usage. The transcript (``reasoning.json``) is written after each server; the two logs are
packed into ``reasoning-logs.tar.xz``.

**Example** (the run of ``tests/data/gpu/http-surface-reasoning-h200-sglang-0.5.14.json``, 2026-12-05:
133 s on a cold machine, in one device call beside ``bench/gpu_weight_timing.py``, whose timed part
waits for this bench's end; that bench's docstring gives the whole command and the carry):

.. code:: shell

    # on the device, carry [".cache/bench/gpu-records-carry"], the site unpacked, in the carry's repo/:
    (timeout 300 python3 bench/gpu_reasoning.py --site /tmp/site --out $OUT > $OUT/reasoning-bench.log 2>&1;
     touch /tmp/reasoning-done) &

    # back here
    cp <files_at>/reasoning.json tests/data/gpu/http-surface-reasoning-h200-sglang-0.5.14.json
    mkdir -p /tmp/rs && tar -xJf <files_at>/reasoning-logs.tar.xz -C /tmp/rs &&
      for s in kimi llama; do cp /tmp/rs/$s.log tests/data/gpu/http-surface-reasoning-h200-sglang-0.5.14-$s.log; done
    cp <files_at>/reasoning-bench.log tests/data/gpu/http-surface-reasoning-h200-sglang-0.5.14-bench.log

    # a rehearsal without a GPU, against the stand-in (no dill here: the processor is left out)
    .venv/bin/python bench/gpu_reasoning.py --site .cache/standin/sglang-0.5.14-py --out /tmp/rs --standin
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import signal
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside gpu_acceptance
import gpu_acceptance as acceptance  # noqa: E402
import gpu_http_surface  # noqa: E402
import gpu_kimi  # noqa: E402
import gpu_pd  # noqa: E402
from gpu_acceptance import PROJECT_ROOT, Transcript  # noqa: E402
from gpu_openai import CHAT, Connection  # noqa: E402
from gpu_weight_updates import exchange, tail  # noqa: E402

MAX_TOKENS = 16
THOUGHT = 9  # the stand-in's model thinks 9 words (standin_openai.REASONING), then closes
KIMI_FLAGS = (*gpu_kimi.KIMI_FLAGS, *gpu_kimi.KIMI_PARSERS, "--trust-remote-code",
              "--served-model-name", "tiny-kimi-k25", "--mem-fraction-static", "0.3", "--cuda-graph-max-bs", "8",
              "--max-running-requests", "16", "--host", "127.0.0.1", "--enable-custom-logit-processor")
LLAMA_FLAGS = (*gpu_http_surface.FLAGS, "--enable-custom-logit-processor")
SERVERS = {  # name: port, served name, flags, the toggle its parser reads, the other one
    "kimi": (30521, "tiny-kimi-k25", KIMI_FLAGS, "thinking", "enable_thinking"),
    "llama": (30522, gpu_http_surface.SERVED, LLAMA_FLAGS, "enable_thinking", "thinking"),
}
THINK = ("<think>", "</think>")
FORCER_SOURCE = '''
class ForcedTokens:
    """sglang's custom logit processor protocol: the n-th token sampled for a request is
    custom_params["forced"][n] (the last one once the list is used up). It counts its own
    calls per request (its rid): one a sampled token without speculative decoding."""

    steps = {}

    def __call__(self, logits, custom_param_list=None):
        for row, params in enumerate(custom_param_list or []):
            if not params or "forced" not in params:
                continue
            key = getattr(params.get("__req__"), "rid", None)
            step = type(self).steps.get(key, 0)
            type(self).steps[key] = step + 1
            forced = params["forced"]
            logits[row, :] = float("-inf")
            logits[row, forced[min(step, len(forced) - 1)]] = 0.0
        return logits
'''
STARTED: list[dict] = []


def log(message: str) -> None:
    print(f"[gpu-reasoning {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the models -------------------------------------------------------------------------


def add_think_tokens(model: Path) -> dict[str, int]:
    """``<think>`` and ``</think>`` in place of the vocabulary's last two words, added, not special."""
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    by_id = {index: word for word, index in vocab.items()}
    size = len(vocab)
    ids = {}
    for offset, token in enumerate(THINK):
        index = size - len(THINK) + offset
        del vocab[by_id[index]]
        vocab[token] = index
        tokenizer["added_tokens"].append({"id": index, "content": token, "single_word": False, "lstrip": False,
                                          "rstrip": False, "normalized": False, "special": False})
        ids[token] = index
    (model / "tokenizer.json").write_text(json.dumps(tokenizer, indent=1) + "\n")
    return ids


def write_models(root: Path) -> dict[str, dict]:
    """Both models, each with its think tokens; what the cases need of each (path, ids, words)."""
    kimi, _draft = gpu_kimi.write_kimi(root / "kimi")
    llama, _draft = acceptance.write_models(root / "llama")
    config = json.loads((llama / "tokenizer_config.json").read_text())
    config["chat_template"] = gpu_http_surface.CHAT_TEMPLATE
    (llama / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    found = {}
    for name, model in (("kimi", kimi), ("llama", llama)):
        ids = add_think_tokens(model)
        vocab = json.loads((model / "tokenizer.json").read_text())["model"]["vocab"]
        found[name] = {"path": str(model), "think_ids": ids, "vocab": vocab}
    return found


# --- the cases --------------------------------------------------------------------------


def forcer() -> str | None:
    """``FORCER_SOURCE``'s class as sglang's ``CustomLogitProcessor.to_str`` writes one (dill, by value:
    its module cannot be imported where it is loaded); None without dill (a rehearsal)."""
    try:
        import dill
    except ImportError:
        return None
    namespace = {"__name__": "sglfleet_bench_forced_tokens"}
    exec(FORCER_SOURCE, namespace)
    return json.dumps({"callable": dill.dumps(namespace["ForcedTokens"]).hex()})


def forced_answers(model: dict) -> dict[str, list[int]]:
    """The token ids the processor makes the model say: filler words w100.. (thinking), w200.. (answer)."""
    vocab = model["vocab"]
    start, end = model["think_ids"]["<think>"], model["think_ids"]["</think>"]
    thought = [vocab[f"w{100 + n}"] for n in range(THOUGHT)]
    answer = [vocab[f"w{200 + n}"] for n in range(MAX_TOKENS)]
    closed = (thought + [end] + answer)[:MAX_TOKENS]
    opened = ([start] + thought[:THOUGHT - 1] + [end] + answer)[:MAX_TOKENS]
    return {"closed": closed, "opened_closed": opened}


def cases(served: str, key: str, other: str, model: dict, processor: str | None) -> list[tuple[str, str, dict]]:
    """(name, path, body) in the order sent."""
    base = {"model": served, "messages": CHAT, "temperature": 0, "max_tokens": MAX_TOKENS}
    usage = {"stream": True, "stream_options": {"include_usage": True}}
    forced = forced_answers(model)
    end = model["think_ids"]["</think>"]

    def forcing(name: str) -> dict:
        body = {"custom_params": {"forced": forced[name]}}
        if processor is not None:
            body["custom_logit_processor"] = processor
        return body

    return [
        ("default", "/v1/chat/completions", base),
        ("off", "/v1/chat/completions", {**base, "chat_template_kwargs": {key: False}}),
        ("off_stream", "/v1/chat/completions", {**base, **usage, "chat_template_kwargs": {key: False}}),
        ("other_key_off", "/v1/chat/completions", {**base, "chat_template_kwargs": {other: False}}),
        ("closed", "/v1/chat/completions", {**base, **forcing("closed")}),
        ("closed_stream", "/v1/chat/completions", {**base, **usage, **forcing("closed")}),
        ("closed_off", "/v1/chat/completions", {**base, **forcing("closed"), "chat_template_kwargs": {key: False}}),
        ("opened_closed", "/v1/chat/completions", {**base, **forcing("opened_closed")}),
        ("end_bias", "/v1/chat/completions", {**base, "logit_bias": {str(end): 100}}),
        ("end_bias_stream", "/v1/chat/completions", {**base, **usage, "logit_bias": {str(end): 100}}),
        ("generate_closed", "/generate", {
            "text": "The capital of France is", **({"custom_logit_processor": processor} if processor else {}),
            "sampling_params": {"max_new_tokens": MAX_TOKENS, "temperature": 0,
                                "custom_params": {"forced": forced["closed"]}}}),
    ]


def summary(answer: dict) -> dict:
    """Where an answer's text went: per streamed event its delta's fields with text (in order), or the
    message's content and reasoning_content; the usage; the finish reason."""
    if answer.get("events") is not None:
        went, usage, finish = [], None, None
        for event in answer["events"]:
            data = event.get("json")
            if not isinstance(data, dict):
                continue
            usage = data.get("usage") or usage
            for choice in data.get("choices") or []:
                delta = choice.get("delta") or {}
                went.append({k: delta[k] for k in delta if k in ("role", "content", "reasoning_content")})
                finish = choice.get("finish_reason") or finish
        return {"status": answer.get("status"), "deltas": went, "usage": usage, "finish_reason": finish,
                "reasoning": "".join(d.get("reasoning_content") or "" for d in went),
                "content": "".join(d.get("content") or "" for d in went)}
    body = answer.get("json") if isinstance(answer.get("json"), dict) else {}
    if "meta_info" in body:
        meta = body["meta_info"]
        return {"status": answer.get("status"), "text": body.get("text"), "output_ids": body.get("output_ids"),
                "meta_info": {k: meta.get(k) for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens",
                                                        "finish_reason", "weight_version") if k in meta}}
    choice = (body.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    return {"status": answer.get("status"), "content": message.get("content"),
            "reasoning_content": message.get("reasoning_content"), "usage": body.get("usage"),
            "finish_reason": choice.get("finish_reason"), "error": None if body.get("choices") else body}


def record(port: int, served: str, key: str, other: str, model: dict, processor: str | None) -> dict:
    """Every case on one kept-alive connection (a new one where the server closed it)."""
    results: dict = {"server": f"127.0.0.1:{port}", "model": served, "toggle_read": key, "toggle_not_read": other,
                     "think_ids": model["think_ids"], "forced": forced_answers(model),
                     "words": {str(i): w for w, i in model["vocab"].items()
                               if i in set(sum(forced_answers(model).values(), []))}}
    conn, number = Connection("127.0.0.1", port), 1
    for name, path, body in cases(served, key, other, model, processor):
        answer = exchange(port, "POST", path, body, conn=conn, timeout=120.0)
        answer["connection"], answer["request_on_connection"] = number, conn.requests
        if processor and "request" in answer:  # the processor's dill bytes (FORCER_SOURCE's class) set aside
            answer["request"]["body"] = json.dumps(body).replace(json.loads(processor)["callable"], "<dill hex>")
        answer["summary"] = summary(answer)
        results[name] = answer
        log(f"{served} {name}: {answer.get('status_line') or answer.get('error')}: "
            f"{json.dumps(answer['summary'].get('usage') or answer['summary'].get('meta_info'))}")
        if "error" in answer or (answer.get("connection_header") or "").lower() == "close":
            conn.close()
            conn, number = Connection("127.0.0.1", port), number + 1
    conn.close()
    results["connections_used"] = number
    return results


# --- the run ----------------------------------------------------------------------------


def kill_all() -> None:
    for server in STARTED:
        for pid in [server["proc"].pid, *acceptance.session_processes(server["proc"].pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def pack_logs(out: Path) -> None:
    files = [out / f"{name}.log" for name in SERVERS if (out / f"{name}.log").exists()]
    with tarfile.open(out / "reasoning-logs.tar.xz", "w:xz") as archive:
        for path in files:
            archive.add(path, arcname=path.name)
    for path in files:
        path.unlink()


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def ended(signum, frame):
        kill_all()
        pack_logs(out)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, ended)
    began = time.monotonic()
    deadline = began + args.budget_s
    site = str(Path(args.site).resolve())
    models = write_models(Path(args.root))
    processor = forcer()
    transcript = Transcript(out / "reasoning.json")
    transcript.save(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    what="chat answers' thinking turned off and closed, raw (bench/gpu_reasoning.py)",
                    versions=acceptance.versions(site), processor_source=FORCER_SOURCE,
                    processor_serialised=processor is not None,
                    flags={name: list(flags) for name, (_, _, flags, _, _) in SERVERS.items()},
                    chat_templates={"kimi": gpu_kimi.CHAT_TEMPLATE, "llama": gpu_http_surface.CHAT_TEMPLATE},
                    models={name: {k: v for k, v in m.items() if k != "vocab"} for name, m in models.items()})
    servers = {}
    for name, (port, _, flags, _, _) in SERVERS.items():
        entry = ([sys.executable, str(PROJECT_ROOT / "files" / "standin" / "sglang_standin.py")] if args.standin
                 else [sys.executable, "-m", "sglang.launch_server"])
        servers[name] = gpu_pd.start(name, [*entry, "--model-path", models[name]["path"], "--port", str(port), *flags],
                                     site, out)
        STARTED.append(servers[name])
    try:
        ready = {name: gpu_pd.wait_health(f"http://127.0.0.1:{SERVERS[name][0]}", deadline - 30, servers[name]["proc"])
                 for name in SERVERS}
        for name in ready:
            ready[name]["since_start_s"] = round(time.monotonic() - servers[name]["started"], 2)
        log(f"ready: {ready}")
        transcript.save(ready=ready)
        for name, (port, served, _, key, other) in SERVERS.items():
            if ready[name]["ready"]:
                transcript.save(**{name: record(port, served, key, other, models[name], processor)})
            else:
                transcript.save(**{f"{name}_log_tail": tail(servers[name]["log"], 60)})
    finally:
        stops = {name: gpu_pd.stop(server) for name, server in servers.items()}
        transcript.save(stops=stops, seconds=round(time.monotonic() - began, 1))
        pack_logs(out)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", required=True, help="the folder of the server's packages (the unpacked carry)")
    parser.add_argument("--out", required=True, help="where reasoning.json and the logs go")
    parser.add_argument("--root", default="/tmp/gpu-reasoning", help="where the models are written")
    parser.add_argument("--budget-s", type=float, default=280.0, help="the whole run's seconds, stops included")
    parser.add_argument("--standin", action="store_true", help="the stand-in instead of sglang (a rehearsal)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
