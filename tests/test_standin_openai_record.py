"""
The stand-in's OpenAI surface held to real sglang's (issue 29, item 5): the records of
``bench/gpu_openai.py`` on an H200 (tests/data/gpu/openai-*-sglang-0.5.14.json), replayed on
the stand-in with the same recorder, so the same bodies in the same order on one kept-alive
connection, read off the socket with their chunked framing.

What is compared is the shape, not the text: status, content type, header names, framing (one
``data:`` event per chunk, ``data: [DONE]``, the zero chunk), each event's keys in order with
their value types, ``object`` and ``finish_reason``, the usage chunk, error bodies (their
messages with numbers and file paths blanked), and whether the connection survived.

The stand-in imitates 0.5.9; the record is 0.5.14 (0.5.9 needs torch 2.9.1, which the GPU
machine cannot run). Where they differ, ``VERSION`` names the difference with the lines of both
wheels; where the stand-in's model says other words than random weights did, ``MODEL`` names
it. Both are asserted exactly: a difference not in them fails, and so does one that went away.
"""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from sglfleet import PROJECT_ROOT
from test_standin import KIMI_PATH, get, launch, sglang_059, wait_for  # noqa: F401  (fixtures)
from test_standin_openai import staged

RECORDS = PROJECT_ROOT / "tests" / "data" / "gpu"
KEY = "sk-record"  # the record's requests carried a key; the stand-in asks for one too


def recorder():
    """bench/gpu_openai.py, the recorder the GPU run used (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("gpu_openai", PROJECT_ROOT / "bench" / "gpu_openai.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the shape of an answer --------------------------------------------------------------------

KEPT_VALUES = {"object", "finish_reason", "type", "code", "detail", "role"}  # compared as values


def blank(message: str) -> str:
    """An error message with its numbers and the server's file paths blanked."""
    return re.sub(r"\d+", "N", re.sub(r'File "[^"]*"', 'File "..."', message))


def tree(value, key=None):
    """The shape of a JSON value: dicts as (key, shape) in order, scalars as their type name."""
    if isinstance(value, dict):
        return tuple((k, tree(v, k)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(tree(v) for v in value)
    if key == "message" and isinstance(value, str):
        return blank(value)
    if key in KEPT_VALUES or value is None:
        return value
    return type(value).__name__


def text_went(delta: dict) -> tuple:
    """Which fields of a delta or message carry text."""
    return tuple(k for k in ("content", "reasoning_content", "tool_calls") if delta.get(k))


def aspects(answer: dict) -> dict:
    """One exchange as the aspects compared; a stream's middle is collapsed to its distinct shapes."""
    named = {name.lower(): value for name, value in answer["headers"]}
    out = {"status": answer["status"], "content-type": named.get("content-type"),
           "headers": sorted(named.keys() - {"date", "content-length"}), "framing": answer["framing"],
           "connection": (answer["connection"], answer["request_on_connection"])}
    if "events" not in answer:
        body = answer["json"]
        message = body.get("choices", [{}])[0].get("message") if "choices" in body else None
        out["body"] = tree({k: v for k, v in body.items() if k != "choices"})
        if "choices" in body:
            choice = body["choices"][0]
            out["choice"] = tuple(choice)
            out["message"] = tree(message) if message else tree(choice.get("text"))
            out["finish"] = (choice["finish_reason"], tree(choice["matched_stop"]))
            out["text went"] = text_went(message) if message else ("text",)
        return out
    chunks = answer["chunks"]
    out["one event per chunk"] = (chunks[-1] == {**chunks[-1], "size_line": "0", "data": ""} and all(
        c["data"].startswith("data: ") and c["data"].endswith("\n\n") and c["data"].count("\n\n") == 1
        for c in chunks[:-1]))
    *data, done = answer["events"]
    out["done"] = done["raw"]
    parsed = [event["json"] for event in data]
    keys = [(tuple(p), *(tuple(c) for c in p["choices"])) for p in parsed]
    out["chunk keys"] = sorted(set(keys), key=keys.index)  # never a model difference
    chat = parsed[0]["object"] == "chat.completion.chunk"
    out["last"] = tree(parsed[-1])  # the usage chunk
    if chat:
        out["first"] = tree(parsed[0])
        *middle, out["finish chunk"] = [tree(p) for p in parsed[1:-1]]
        body = parsed[1:-2]
    else:
        middle, body = [tree(p) for p in parsed[:-1]], parsed[:-1]
    out["middle"] = sorted(set(middle), key=middle.index)
    went = [text_went(p["choices"][0]["delta"]) if chat else ("text",) for p in body]
    out["text went"] = sorted(set(went), key=went.index)
    return out


# -- the differences, named ----------------------------------------------------------------------

def as_0514_chunk(chunk: dict) -> dict:
    """A 0.5.9 chat chunk as 0.5.14 writes it: its ``sse_utils.StreamChunk``, whose delta
    keeps ``reasoning_content`` always and first, and drops the rest where null. Its usage chunk
    and tool-call chunks are pydantic's still (serving_chat.py:1197, 1868), as in 0.5.9."""
    if chunk.get("object") != "chat.completion.chunk" or not chunk["choices"] or chunk["choices"][0]["delta"].get(
            "tool_calls"):
        return chunk
    delta = chunk["choices"][0]["delta"]
    out = {k: v for k, v in chunk.items() if not (k == "usage" and v is None)}
    kept = {"reasoning_content": delta["reasoning_content"],
            **{k: delta[k] for k in ("role", "content") if delta[k] is not None}}
    out["choices"] = [{**chunk["choices"][0], "delta": kept}]
    return out


VERSION = {
    # name: (what 0.5.9 does, what 0.5.14 does, how to turn the stand-in's chunk into 0.5.14's)
    "chat chunks omit null fields in 0.5.14": (
        "0.5.9 serving_chat.py:679,713,768,799 yield chunk.model_dump_json() of ChatCompletionStreamResponse "
        "(protocol.py:832-873): every field, usage and the delta's role, content, tool_calls null too",
        "0.5.14 serving_chat.py:377,420,1067,1105 build_sse_content (sse_utils.py:13-99): msgspec omit_defaults, "
        "the delta's reasoning_content always and first, the chunk's usage only when set",
        as_0514_chunk),
}


def as_0514(answer: dict) -> dict:
    """The stand-in's answer with every ``VERSION`` difference applied; the names that changed it."""
    applied = set()
    if "events" not in answer:
        return answer, applied
    events = []
    for event in answer["events"]:
        if "json" in event:
            for name, (_, _, turn) in VERSION.items():
                turned = turn(event["json"])
                if turned != event["json"]:
                    applied.add(name)
                event = {**event, "json": turned}
        events.append(event)
    return {**answer, "events": events}, applied


# What the stand-in's model says where random weights (--load-format dummy) said other words: it
# ends a chat turn with its EOS, calls an offered tool, and closes its reasoning (standin_openai.py
# ``Script``, ``ChatPlan.script``); the tiny models never did in 16 tokens. Not a server difference.
MODEL = {
    "llama": [
        # without a tool-call parser, the call is text; the turn ends at EOS (matched_stop: the eos id)
        ("chat_tools_stream", "finish chunk"),
        ("chat_tools", "finish"),
    ],
    "kimi": [
        # the stand-in's reasoning closes after 9 tokens and the rest is content; the tiny Kimi's
        # 16 tokens were all reasoning (it never wrote the end of its thinking). Either way the
        # kimi_k2 parser puts a turn's first text in reasoning_content, without a <think>.
        ("chat_stream", "middle"), ("chat_stream", "text went"),
        ("chat", "text went"),
        ("chat_tools_stream", "middle"), ("chat_tools_stream", "text went"),
        ("chat_tools", "text went"),
        ("unknown_model", "text went"), ("after_unknown_route", "text went"),
    ],
}

SERVERS = {
    "llama": ("openai-h200-sglang-0.5.14.json", "tiny-llama-eagle3", []),
    "kimi": ("openai-kimi-k25-h200-sglang-0.5.14.json", "tiny-kimi-k25",
             ["--reasoning-parser", "kimi_k2", "--tool-call-parser", "kimi_k2"]),
}


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_the_stand_in_answers_as_the_recorded_server(launch, sglang_059, tmp_path, server):
    name, model, parsers = SERVERS[server]
    record = json.loads((RECORDS / name).read_text())["exchanges"]
    model_path = ["--model-path", staged(tmp_path)] if server == "llama" else KIMI_PATH
    proc = launch(sglang_059, *model_path, *parsers, "--served-model-name", model, "--api-key", KEY,
                  "--context-length", str(record["context_length"]), "--skip-server-warmup",
                  SGLFLEET_STANDIN_STEP_S="0.001")
    wait_for(proc, "/health")
    ours = recorder().record("127.0.0.1", proc.port, KEY, model, context_length=record["context_length"])
    exchanges = [k for k, v in record.items() if isinstance(v, dict)]
    assert [k for k, v in ours.items() if isinstance(v, dict)] == exchanges
    assert ours["connections_used"] == record["connections_used"] == 1  # the 404 kept the connection

    # the request bodies are the record's, byte for byte
    assert [ours[k]["request"]["body"] for k in exchanges] == [record[k]["request"]["body"] for k in exchanges]
    differences, applied = [], set()
    for exchange in exchanges:
        answer, names = as_0514(ours[exchange])
        applied |= names
        real, stand_in = aspects(record[exchange]), aspects(answer)
        assert real.keys() == stand_in.keys(), exchange
        differences += [(exchange, aspect) for aspect in real if real[aspect] != stand_in[aspect]]
    assert differences == MODEL[server], [
        (e, a, aspects(record[e])[a], aspects(as_0514(ours[e])[0])[a]) for e, a in differences]
    assert applied == set(VERSION)  # each named difference is still there


# -- usage.reasoning_tokens, per release ---------------------------------------------------------

def reasoning(answer: dict) -> dict | None:
    """A chat or completion answer's ``usage.reasoning_tokens`` beside what it shows of the reasoning."""
    if "events" in answer:
        parsed = [event["json"] for event in answer["events"] if "json" in event]
        usage = parsed[-1].get("usage")
        said = [c["choices"][0].get("delta", c["choices"][0]) for c in parsed if c.get("choices")]
    else:
        usage = answer["json"].get("usage")
        said = [c.get("message", c) for c in answer["json"].get("choices", [])]
    if not usage:
        return None
    return {"reasoning_tokens": usage["reasoning_tokens"], "completion_tokens": usage["completion_tokens"],
            "thought": "".join(d.get("reasoning_content") or "" for d in said),
            "ended": any(d.get("content") or d.get("tool_calls") for d in said)}  # anything after the thinking


def test_reasoning_tokens_count_the_reasoning_from_0510_and_are_0_in_059(launch, sglang_059, tmp_path):
    """
    0.5.9 never sets ``usage.reasoning_tokens`` (0, UsageInfo's default: protocol.py:137,
    usage_processor.py:73-84) and its ``meta_info`` has none. From 0.5.10 a request that asks
    for reasoning counts its output tokens up to and including the parser's end token, all of
    them when the end never came (0.5.14 schedule_batch.py:1557-1569, batch_result_processor.py:874-881,
    tokenizer_manager.py:1889, usage_processor.py:34-37); completions and /generate ask for none.
    The record holds the second case (the tiny Kimi never closed its thinking: 16 of 16); the
    stand-in's model closes it after 9 words, which with the end token count 10.
    """
    from test_server_flags import python_tree

    name, model, parsers = SERVERS["kimi"]
    record = json.loads((RECORDS / name).read_text())
    recorded = {k: reasoning(v) for k, v in record["exchanges"].items() if isinstance(v, dict) and v["status"] == 200}
    for exchange, seen in recorded.items():
        chat = exchange.startswith(("chat", "unknown_model", "after"))
        assert seen == ({"reasoning_tokens": 16, "completion_tokens": 16, "thought": seen["thought"], "ended": False}
                        if chat else {"reasoning_tokens": 0, "completion_tokens": 16, "thought": "", "ended": False}), exchange
    assert record["server"]["generate"]["meta_info"]["reasoning_tokens"] == 0

    def replayed(site: Path) -> tuple[dict, dict]:
        proc = launch(site, *KIMI_PATH, *parsers, "--served-model-name", model, "--api-key", KEY,
                      "--context-length", str(record["exchanges"]["context_length"]), "--skip-server-warmup",
                      SGLFLEET_STANDIN_STEP_S="0.001")
        wait_for(proc, "/health")
        ours = recorder().record("127.0.0.1", proc.port, KEY, model, context_length=record["exchanges"]["context_length"])
        generated = json.loads(get(proc.url + "/generate", headers={"Authorization": f"Bearer {KEY}"},
                                   body={"text": "Hi", "sampling_params": {"max_new_tokens": 4}})[1])
        return {k: reasoning(ours[k]) for k in recorded}, generated["meta_info"]

    answers, meta = replayed(python_tree("0.5.14"))
    for exchange, seen in answers.items():
        if exchange.startswith("completions"):
            assert seen["reasoning_tokens"] == 0 and not seen["thought"], exchange
        else:  # the thinking, word by word (a word is a token), then its end token, then the answer
            assert seen["ended"] and seen["reasoning_tokens"] == len(seen["thought"].split()) + 1 == 10, exchange
    assert meta["reasoning_tokens"] == 0 and list(meta).index("reasoning_tokens") == list(meta).index("completion_tokens") - 1

    answers, meta = replayed(sglang_059)
    assert all(seen["reasoning_tokens"] == 0 for seen in answers.values()) and "reasoning_tokens" not in meta
    assert answers["chat"]["thought"]  # it did think


def test_reasoning_tokens_are_all_the_output_when_the_thinking_never_ends(launch):
    """The record's case on the stand-in: cut inside its thinking, every token counts (0.5.14);
    with thinking turned off, none (require_reasoning False: serving_chat.py:1725-1795)."""
    from test_server_flags import python_tree

    proc = launch(python_tree("0.5.14"), *KIMI_PATH, "--reasoning-parser", "kimi_k2", "--skip-server-warmup",
                  SGLFLEET_STANDIN_STEP_S="0.001")
    wait_for(proc, "/health")
    ask = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}
    json_body = {"Content-Type": "application/json"}
    cut = json.loads(get(proc.url + "/v1/chat/completions", json_body, ask)[1])
    assert (cut["usage"]["reasoning_tokens"], cut["usage"]["completion_tokens"]) == (5, 5)
    assert cut["choices"][0]["message"]["content"] == ""  # 0.5.13's "" where 0.5.9 says null
    off = json.loads(get(proc.url + "/v1/chat/completions", json_body, {
        **ask, "max_tokens": 16, "chat_template_kwargs": {"thinking": False}})[1])
    assert off["usage"]["reasoning_tokens"] == 0 and off["choices"][0]["message"]["reasoning_content"] is None
