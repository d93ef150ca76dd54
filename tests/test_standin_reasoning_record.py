"""
The stand-in's chat answers held to real sglang 0.5.14's where the thinking is turned off or
closes (issue 44's remnants): the record of ``bench/gpu_reasoning.py`` on an H200
(tests/data/gpu/http-surface-reasoning-h200-sglang-0.5.14.json), replayed with the bench's own
code (``record``) against a stand-in over 0.5.14's files, started as the bench started sglang:
the tiny Kimi K2.5 (``kimi_k2``) and the tiny Llama (``qwen3``), their flags, their models.

The record's closing answers were forced (a custom logit processor) to say what the stand-in's
model says: 9 words of thinking, the end token, then the answer, 16 tokens in all. So they are
compared exactly, not by type: status line, framing, header names and the values that matter,
the connection, and each answer's body or each event of its stream, with only the clock, the
request ids and the words set aside (a word is the model's, ``""`` and null are the server's),
a run of identical events taken as one, and the prompt's token count (the stand-in counts
words) with its sum checked. ``usage.reasoning_tokens`` and ``completion_tokens`` are compared
as numbers. What the stand-in's model cannot say (a thinking that never ends, a ``logit_bias``)
is named in ``MODEL``; a difference not named fails, and so does a named one that went away.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglfleet import PROJECT_ROOT
from test_standin import STANDIN, free_port, get, launch, sglang_059, wait_for  # noqa: F401  (fixtures)

sys.path.insert(0, str(PROJECT_ROOT / "bench"))
sys.path.insert(0, str(PROJECT_ROOT / "files" / "standin"))
import gpu_reasoning as bench  # noqa: E402  (the code that made the record)
from standin_engine import Req  # noqa: E402
from standin_openai import thinking  # noqa: E402

RECORD = json.loads((PROJECT_ROOT / "tests" / "data" / "gpu" / "http-surface-reasoning-h200-sglang-0.5.14.json")
                    .read_text())
PARSERS = {"kimi": "kimi_k2", "llama": "qwen3"}
# Each case of each server, as the bench sends them; /generate's run sent its processor in
# sampling_params too (a 500 for the bench's own mistake, bench/gpu_reasoning.py says), so it is not replayed.
CASES = [name for name, _, _ in bench.cases("m", "k", "o", {"vocab": {f"w{n}": n for n in range(300)},
                                                            "think_ids": {"<think>": 1, "</think>": 2}}, None)]
CHAT_CASES = [name for name in CASES if name != "generate_closed"]
# Where the stand-in's model shows beyond its words: the record's model never closed its thinking
# unless forced (all 16 tokens thinking, content ""), and the stand-in's model is not steered by
# logit_bias (the record's: the end token at every step, so 1 reasoning token, then the rest as content).
MODEL = {(server, case) for server in PARSERS for case in ("default", "other_key_off", "end_bias", "end_bias_stream")}


def start_recorded(folder: Path, name: str) -> tuple[subprocess.Popen, dict]:
    """The record's server, a stand-in over 0.5.14's files: the bench's model and flags, its own session."""
    from test_server_flags import python_tree

    models = bench.write_models(folder / "models")
    port, _, flags, _, _ = bench.SERVERS[name]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SGLFLEET_STANDIN_")}
    environ.update(PYTHONPATH=str(python_tree("0.5.14")), PYTHONUNBUFFERED="1", SGLFLEET_STANDIN_WARMUP="0.5",
                   SGLFLEET_STANDIN_STEP_S="0.001", SGLFLEET_CACHE=str(folder / "cache"),
                   TRITON_CACHE_DIR=str(folder / "triton"), FLASHINFER_WORKSPACE_BASE=str(folder / "compile"))
    port = free_port()
    with open(folder / "server.log", "w") as out:
        proc = subprocess.Popen([sys.executable, str(STANDIN), "--model-path", models[name]["path"], "--port",
                                 str(port), *flags], stdout=out, stderr=subprocess.STDOUT, env=environ,
                                start_new_session=True)
    proc.url, proc.port = f"http://127.0.0.1:{port}", port
    try:
        wait_for(proc, timeout=30)
    except BaseException:
        proc.kill()
        raise
    return proc, models[name]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """Each server's cases, replayed once on a stand-in started as the record's server."""
    found = {}
    for name in PARSERS:
        proc, model = start_recorded(tmp_path_factory.mktemp(name), name)
        try:
            _, served, _, key, other = bench.SERVERS[name]
            found[name] = bench.record(proc.port, served, key, other, model, None)
        finally:
            proc.kill()
            proc.wait(10)
    return found


# -- the answers, compared ---------------------------------------------------------------------------

def blank(value, key=None):
    """A JSON value with the clock, the ids and the words set aside ("" and null kept: the server's)."""
    if isinstance(value, dict):
        return {k: blank(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [blank(v) for v in value]
    if key == "created":
        return "<clock>"
    if key == "id" and isinstance(value, str) and re.fullmatch(r"[0-9a-f]{32}", value):
        return "<rid>"
    if key in ("content", "reasoning_content") and value:
        return "<words>"
    return value


def counted(usage: dict | None) -> dict | None:
    """A usage with its sum checked and the prompt's count set aside (the stand-in counts words)."""
    if usage is None:
        return None
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
    return {**usage, "prompt_tokens": "N", "total_tokens": "N"}


def compared(answer: dict) -> dict:
    """One exchange as compared: its HTTP, and its body, or its stream's events (a run of the same as one)."""
    named = {name.lower(): value for name, value in answer["headers"]}
    out = {"status_line": answer["status_line"], "framing": answer["framing"],
           "header_names": sorted(named.keys() - {"date", "content-length"}),
           "values": {k: named.get(k) for k in ("content-type", "connection", "transfer-encoding")},
           "on": (answer["connection"], answer["request_on_connection"])}
    if answer.get("events") is None:
        body = answer["json"]
        out["body"] = blank({**body, "usage": counted(body.get("usage"))})
        return out
    assert answer["chunks"][-2]["data"] == "data: [DONE]\n\n" and answer["trailer"] == []
    assert all(c["data"].startswith("data: ") and c["data"].endswith("\n\n") for c in answer["chunks"][:-1])
    shapes = []
    for event in answer["events"]:
        data = event.get("json")
        if not isinstance(data, dict):
            continue
        shape = blank({**data, **({"usage": counted(data["usage"])} if data.get("usage") else {})})
        if not shapes or shapes[-1] != shape:
            shapes.append(shape)
    out["events"] = shapes
    return out


def test_the_record_is_the_bench_s_requests_and_its_forced_answers():
    """The bodies the record sent are what the bench sends (the processor's dill bytes aside), and the
    forced answers came out as forced: thinking words, ``</think>``, answer words."""
    for name in PARSERS:
        record = RECORD[name]
        _, served, _, key, other = bench.SERVERS[name]
        model = {"vocab": {word: int(i) for i, word in record["words"].items()} | {
            f"w{n}": -1 for n in range(300) if f"w{n}" not in record["words"].values()},
            "think_ids": record["think_ids"]}
        sent = {case: json.loads(record[case]["request"]["body"]) for case in CHAT_CASES}
        for case, path, body in bench.cases(served, key, other, model, None):
            if case in sent:
                sent[case].pop("custom_logit_processor", None)
                assert sent[case] == body, (name, case)
        words = record["words"]
        said = [" ".join(words[str(i)] for i in record["forced"][case]) for case in ("closed", "opened_closed")]
        closed = record["closed"]["summary"]
        assert said[0] == "w100 w101 w102 w103 w104 w105 w106 w107 w108 </think> w200 w201 w202 w203 w204 w205"
        # the text before the end token is the thinking (the tokenizer joins tokens with a space)
        assert " " + said[0] == closed["reasoning_content"] + "</think>" + closed["content"]
        opened = record["opened_closed"]["summary"]
        assert " " + said[1] == opened["reasoning_content"] + "</think>" + opened["content"]
        assert opened["reasoning_content"].startswith(" <think>")  # a leading space: kept, not stripped


@pytest.mark.parametrize("server", sorted(PARSERS))
def test_each_case_answers_as_the_recorded_server(replayed, server):
    ours, real = replayed[server], RECORD[server]
    assert ours["connections_used"] == real["connections_used"] == 1
    differences = []
    for case in CHAT_CASES:
        want, got = compared(real[case]), compared(ours[case])
        if want != got:
            differences.append((server, case))
            if (server, case) not in MODEL:
                assert got == want, case
    assert set(differences) == {pair for pair in MODEL if pair[0] == server}


# -- usage.reasoning_tokens and the toggles, case by case ----------------------------------------------

def usage_of(summary: dict) -> dict:
    return summary.get("usage") or {}


def test_reasoning_tokens_count_up_to_the_end_token_included_as_recorded():
    """
    0.5.14 counts a request's output tokens while it asks for reasoning, up to and including the
    parser's end token (``Req.update_reasoning_tokens``, schedule_batch.py:1557-1569;
    usage_processor.py:34-37 sums them): the record's forced answers say 10 for 9 words and the end
    (and for ``<think>``, 8 words and the end), 1 where the end came first (``logit_bias``), 16 of 16
    where it never came, 0 with thinking off whatever the model said. The stand-in's count
    (``standin_engine.Req.reasoning_tokens``) over the same tokens gives the same.
    """
    for name, parser in PARSERS.items():
        record = RECORD[name]
        words = {int(i): w for i, w in record["words"].items()}
        assert words[record["think_ids"]["</think>"]] == "</think>"
        said = {case: [words[i] for i in record["forced"][case.removesuffix("_stream").removesuffix("_off")]]
                for case in ("closed", "closed_stream", "closed_off", "opened_closed")}
        said["end_bias"] = said["end_bias_stream"] = ["</think>"] * bench.MAX_TOKENS
        for case in CHAT_CASES:
            usage = usage_of(record[case]["summary"])
            assert usage["completion_tokens"] == bench.MAX_TOKENS, (name, case)
            kwargs = json.loads(record[case]["request"]["body"]).get("chat_template_kwargs")
            asks = thinking(parser, kwargs)  # the stand-in's _get_reasoning_from_request
            assert asks == (case not in ("off", "off_stream", "closed_off")), (name, case)
            req = Req("r", 8, bench.MAX_TOKENS)
            req.tokens = said.get(case, [f"w{n}" for n in range(bench.MAX_TOKENS)])  # no end: the model's words
            req.output_ids = list(range(bench.MAX_TOKENS))
            req.think_end = "</think>" if asks else None
            assert usage["reasoning_tokens"] == req.reasoning_tokens(), (name, case)
        assert [usage_of(record[c]["summary"])["reasoning_tokens"] for c in CHAT_CASES] == [
            16, 0, 0, 16, 10, 10, 0, 10, 1, 1]


def test_thinking_off_puts_everything_in_content_and_only_the_parsers_own_toggle_turns_it_off():
    """kimi_k2 reads ``thinking`` (reasoning_default "thinking", reasoning_parser.py:334), qwen3
    ``enable_thinking`` (266); serving_chat.py:1757-1760 reads that key alone when the template says
    nothing of it. Off: ``reasoning_content`` null (1329), every token ``content``, the stream's deltas
    ``{"reasoning_content": null, "content": ...}``; the other parser's key changes nothing."""
    assert {name: RECORD[name]["toggle_read"] for name in PARSERS} == {"kimi": "thinking", "llama": "enable_thinking"}
    for name in PARSERS:
        off, other = RECORD[name]["off"]["summary"], RECORD[name]["other_key_off"]["summary"]
        assert off["reasoning_content"] is None and off["content"] and usage_of(off)["reasoning_tokens"] == 0
        assert other["content"] == "" and other["reasoning_content"] and usage_of(other)["reasoning_tokens"] == 16
        stream = RECORD[name]["off_stream"]["summary"]
        assert stream["deltas"][0] == {"reasoning_content": None, "role": "assistant", "content": ""}
        assert all(d == {"reasoning_content": None, "content": d["content"]} and d["content"]
                   for d in stream["deltas"][1:-1]) and stream["deltas"][-1] == {"reasoning_content": None}
        assert stream["content"] == off["content"] and usage_of(stream)["reasoning_tokens"] == 0
        closed = RECORD[name]["closed_stream"]["summary"]["deltas"]
        # the thinking word by word, the end token's delta (its leading space) as thinking, then the answer
        assert [sorted(k for k in d if d[k]) for d in closed[1:-1]] == [["reasoning_content"]] * 10 + [["content"]] * 6


def test_a_message_without_text_has_content_empty_from_0513_and_null_in_059(launch, sglang_059):
    """The record's ``default``: all of it thinking, ``content`` "" (0.5.14 serving_chat.py:1327;
    0.5.12's 1190 wrote null). The stand-in cut inside its thinking says the same per release."""
    from test_server_flags import python_tree

    assert all(RECORD[name]["default"]["json"]["choices"][0]["message"]["content"] == "" for name in PARSERS)
    ask = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}
    for site, content in ((python_tree("0.5.14"), ""), (sglang_059, None)):
        proc = launch(site, "--model-path", "/models/kimi", "--reasoning-parser", "kimi_k2", "--skip-server-warmup",
                      SGLFLEET_STANDIN_STEP_S="0.001")
        wait_for(proc, "/health")
        answer = json.loads(get(proc.url + "/v1/chat/completions", {"Content-Type": "application/json"}, ask)[1])
        message = answer["choices"][0]["message"]
        assert message["reasoning_content"] and message["content"] == content, site
