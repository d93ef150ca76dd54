"""
The stand-in's HTTP surface held to real sglang 0.5.14's, case by case (issue 44): the record of
``bench/gpu_http_surface.py`` on an H200 (tests/data/gpu/http-surface-h200-sglang-0.5.14.json),
replayed with the bench's own code (``surface``, ``idle_close``, ``sigterm_timeline``) against a
stand-in over 0.5.14's files, started as the bench started sglang: the same tiny Llama's config
and chat template, the same flags, sglang's own timing (no ``SGLFLEET_STANDIN_*`` knob but the
warm-up and, for the stops, the record's pace of a forward pass).

Compared exactly, not by type: every exchange's status line, header names (``date`` aside) and
the values that matter (content type, ``Allow``, ``Connection``, ``Transfer-Encoding``), its
framing and the connection it came on, and its body or each event of its stream. Set aside,
and only these: the clock (``created``) and the request ids; the paths of the model and of the
installed sglang, which are each server's own; the words the model said, which the stand-in's
model chooses (``MODEL`` names where its choice shows beyond the words); the number of tokens a
chat prompt makes (the stand-in counts words, the tiny Llama's tokenizer splits ``user:`` in
two), with the sums that hold it checked. Then when an idle kept-alive connection is closed,
and how; and the two SIGTERM stops, phase by phase.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sglfleet import PROJECT_ROOT
from test_standin import STANDIN, free_port, wait_for

sys.path.insert(0, str(PROJECT_ROOT / "bench"))
import gpu_acceptance  # noqa: E402  (the record's tiny Llama)
import gpu_http_surface as bench  # noqa: E402  (the code that made the record)

RECORD = json.loads((PROJECT_ROOT / "tests" / "data" / "gpu" / "http-surface-h200-sglang-0.5.14.json").read_text())
SURFACE = RECORD["surface"]
STOPS = {"idle": RECORD["sigterm_idle"], "in_flight": RECORD["sigterm_in_flight"]}
EXCHANGES = [name for name, answer in SURFACE.items() if isinstance(answer, dict)]


def start_recorded(folder: Path, **env) -> tuple[subprocess.Popen, Path]:
    """The record's server, a stand-in over 0.5.14's files: the bench's model and flags, its own session."""
    from test_server_flags import python_tree

    model, _ = gpu_acceptance.write_models(folder / "models")
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": bench.CHAT_TEMPLATE}))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SGLFLEET_STANDIN_")}
    environ.update(PYTHONPATH=str(python_tree("0.5.14")), PYTHONUNBUFFERED="1", SGLFLEET_STANDIN_WARMUP="0.5",
                   SGLFLEET_STANDIN_FAULT_FILE=str(folder / "fault"), SGLFLEET_CACHE=str(folder / "cache"),
                   TRITON_CACHE_DIR=str(folder / "triton"), FLASHINFER_WORKSPACE_BASE=str(folder / "compile"), **env)
    port = free_port()
    log = folder / "server.log"
    with open(log, "w") as out:  # a session of its own, as gpu_pd.start starts sglang
        proc = subprocess.Popen([sys.executable, str(STANDIN), "--model-path", str(model), "--port", str(port),
                                 *bench.FLAGS], stdout=out, stderr=subprocess.STDOUT, env=environ,
                                start_new_session=True)
    proc.url, proc.port, proc.model = f"http://127.0.0.1:{port}", port, model
    try:
        wait_for(proc, timeout=30)  # its own warm-up generation ran: the SIGTERM watchdog looks every 5 s
    except BaseException:
        proc.kill()
        raise
    return proc, log


def stopped(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """The record's surface, keep-alive and all, replayed once on one server."""
    proc, _ = start_recorded(tmp_path_factory.mktemp("surface"))
    try:
        yield proc, bench.surface(proc.port)
    finally:
        stopped(proc)


# -- the surface ------------------------------------------------------------------------------------

def site_of(body: str) -> str | None:
    """The installed sglang a FastAPI refusal names (its ``File "..."``, escaped in the JSON body)."""
    found = re.search(r'File \\"([^"\\]*)/srt/entrypoints/http_server.py', body)
    return found.group(1) if found else None


def blank(value, key=None, paths=()):
    """A JSON value with the clock, the ids, the paths and the model's words set aside."""
    if isinstance(value, dict):
        return {k: blank(v, k, paths) for k, v in value.items()}
    if isinstance(value, list):
        return [blank(v, None, paths) for v in value]
    if key == "created":
        return "<clock>"
    if key == "id" and isinstance(value, str) and re.fullmatch(r"[0-9a-f]{32}", value):
        return "<rid>"
    if key in ("text", "content", "reasoning_content") and value:
        return "<words>"
    if isinstance(value, str):
        for path, name in paths:
            value = value.replace(path, name)
        # a chat prompt's tokens (words here, the tokenizer's there): the sum is checked, the count set aside
        asked = re.search(r"a total of (\d+) tokens: (\d+) tokens from the input messages and (\d+) tokens", value)
        if asked:
            assert int(asked[1]) == int(asked[2]) + int(asked[3]), value
            value = value.replace(asked[0], f"a total of N tokens: N tokens from the input messages and {asked[3]} tokens")
    return value


def usage_counted(usage: dict, events: list[dict]) -> dict:
    """A usage object with its sums checked and the prompt's count set aside; reasoning_tokens held to
    what the stream showed: one event a token, the end of the thinking one more (0.5.14's count)."""
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
    deltas = [e["choices"][0]["delta"] for e in events if e.get("choices") and "delta" in e["choices"][0]]
    thought = sum(bool(d.get("reasoning_content")) for d in deltas)
    answered = sum(bool(d.get("content")) for d in deltas[1:])  # the first delta's "" is the role's
    assert usage["reasoning_tokens"] == thought + (1 if thought and answered else 0), (usage, thought, answered)
    return {**usage, "prompt_tokens": "N", "total_tokens": "N", "reasoning_tokens": "as streamed"}


def compared(answer: dict, paths) -> dict:
    """One exchange as compared."""
    named = {name.lower(): value for name, value in answer["headers"]}
    out = {"status_line": answer["status_line"], "framing": answer["framing"],
           "header_names": sorted(named.keys() - {"date"}),
           "values": {k: named.get(k) for k in ("content-type", "allow", "connection", "transfer-encoding")},
           "on": (answer.get("connection"), answer.get("request_on_connection"))}
    if answer.get("chunks") is None:
        out["body"] = blank(json.loads(answer["body"]), paths=paths) if answer["body"] else ""
        return out
    assert all(c["data"].startswith("data: ") and c["data"].endswith("\n\n") for c in answer["chunks"][:-1])
    assert answer["trailer"] == [] and answer["chunks"][-1] == {**answer["chunks"][-1], "size_line": "0", "data": ""}
    events = [json.loads(c["data"][6:]) for c in answer["chunks"][:-1] if c["data"] != "data: [DONE]\n\n"]
    assert answer["chunks"][-2]["data"] == "data: [DONE]\n\n"  # then the zero chunk
    shapes = []
    for event in events:
        if event.get("usage"):
            event = {**event, "usage": usage_counted(event["usage"], events)}
        shape = blank(event, paths=paths)
        if not shapes or shapes[-1] != shape:  # a run of the same event, one token each, as one
            shapes.append(shape)
    out["events"] = shapes
    return out


# Where the stand-in's model shows beyond its words: it closes its thinking after 9 words and
# answers (standin_openai.ChatPlan.script); the tiny Llama's 16 tokens were all thinking.
ANSWERED = {"reasoning_content": None, "content": "<words>"}
MODEL = {"chat_stream_no_stream_options", "chat_stream_with_usage"}


@pytest.mark.parametrize("name", EXCHANGES)
def test_each_exchange_answers_as_the_recorded_server(replay, name):
    proc, ours = replay
    real = SURFACE[name]
    paths = [(str(proc.model), "<model>"), ("/tmp/gpu-http-surface/tiny-llama", "<model>")]
    for answer in (real, ours[name]):
        site = site_of(answer.get("body") or "")
        if site:
            paths.append((site, "<site>"))
    want, got = compared(real, paths), compared(ours[name], paths)
    if name in MODEL:  # its answer's events, one shape, after its thinking: the model's, not the server's
        answers = [shape for shape in got["events"] if shape.get("choices") and shape["choices"][0]["delta"] == ANSWERED]
        assert len(answers) == 1, got["events"]
        got["events"].remove(answers[0])
    assert got == want


def test_the_connection_carried_every_exchange_as_the_recorded_one(replay):
    _, ours = replay
    assert ours["connections_used"] == SURFACE["connections_used"] == 1
    # sglang's line for the chat route in its own http_server.py (FastAPI names it in a 400)
    assert "line 1592, in openai_v1_chat_completions" in ours["chat_without_messages"]["body"]


def test_an_idle_kept_alive_connection_closes_when_the_recorded_one_did(replay):
    """uvicorn's timeout_keep_alive, 5 s after a JSON answer's last byte and a stream's; a
    connection that never asked stays open (the record's waited 30 s; here past 8)."""
    proc, _ = replay
    found = {}

    def one(kind: str) -> None:
        found[kind] = bench.idle_close(proc.port, kind, cap_s=8.0)

    threads = [threading.Thread(target=one, args=(kind,)) for kind in ("json", "stream", "no_request")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for kind in ("json", "stream"):
        want, got = RECORD["keepalive"][kind], found[kind]
        assert (got["closed"], got["leftover_bytes"], got["bytes_before"]) == (want["closed"], 0, "") == ("FIN", 0, "")
        assert abs(got["after_s"] - want["after_s"]) < 0.5, got
    untouched = RECORD["keepalive"]["no_request"]
    assert untouched["closed"] is found["no_request"]["closed"] is None


# -- SIGTERM: the record's two stops replayed with the bench's own probes --------------------------

@pytest.fixture
def recorded_server(tmp_path):
    """The record's server for one stop, at the record's pace of a forward pass (its completion
    of 1500 tokens took 2.0 s beside the stream: 1.34 ms a step)."""
    completion = STOPS["in_flight"]["completion"]
    step_s = (completion["answered_s"] - completion["sent_s"]) / completion["usage"]["completion_tokens"]
    proc, log = start_recorded(tmp_path, SGLFLEET_STANDIN_STEP_S=f"{step_s:.5f}")
    try:
        yield {"proc": proc, "log": log}, proc.port
    finally:
        stopped(proc)


def phases(stop: dict) -> dict:
    """A stop's timeline as its phases: what each probe saw in order, and when each phase ended."""
    health, connect = stop["health"], stop["connect"]
    last_503 = max(entry[2] for entry in health if entry[0] == "503")
    drained = stop["stream"]["last_chunk_s"] if stop["in_flight"] else 0.0
    return {
        "health": [entry[0] for entry in health],  # 503, then no answer, then reset and refused
        "connect": [entry[0] for entry in connect],  # accepted until the port refuses
        "first_answer_503": stop["health_first_not_200_s"] == stop["health_first_503_s"] <= bench.PROBE_S,
        "503_after_drain_s": last_503 - drained,  # the watchdog's first look with nothing in flight
        "silent_s": stop["port_first_refused_s"] - last_503,  # accepted, never answered
        "unanswered_before_refused": (stop["health_first_failure_s"] > last_503
                                      and dict((e[0], e[1]) for e in connect)["refused"] > last_503),
        "exit_status": stop["exit_status"],  # its own SIGKILL
        "exit_near_refusal_s": abs(stop["main_exit_s"] - stop["port_first_refused_s"]),
    }


def ends(stop: dict) -> dict:
    """What the requests in flight at the signal, and those sent after it, got (header names as above)."""
    stream, completion = stop["stream"], stop["completion"]

    def answer(facts: dict) -> dict:
        return {"status_line": facts["status_line"], "framing": facts["framing"],
                "content_type": facts["content_type"], "header_names": sorted(n.lower() for n in facts["header_names"])}

    return {"stream": {k: stream[k] for k in ("status", "error", "framing", "ended_with_last_chunk",
                                              "completion_tokens", "finish_reason")},
            "stream_ends": stream["raw_last_chunks"][-2:],  # [DONE], then the terminating chunk
            "completion": {**answer(completion), "finish_reason": completion["finish_reason"],
                           "completion_tokens": completion["usage"]["completion_tokens"]},
            "after": {name: answer(late) for name, late in stop["after_sigterm"].items()}}


@pytest.mark.parametrize("case", ["idle", "in_flight"])
def test_a_sigterm_stops_the_server_as_the_recorded_one(recorded_server, case):
    """
    0.5.14's stop (tokenizer_manager.py:2612-2655): /health 503 from the signal until the
    watchdog's 5 s look finds nothing in flight, then the event loop blocked while the schedulers
    exit (connections accepted, none answered), then its own SIGKILL: the port refuses, -9.
    In flight, the stream and the completion end whole, and requests sent after the signal are served.
    """
    server, port = recorded_server
    stop = bench.sigterm_timeline(server, port, in_flight=case == "in_flight")
    if case == "in_flight":
        assert ends(stop) == ends(STOPS[case])
    got, want = phases(stop), phases(STOPS[case])
    windows = [phases(recorded)["silent_s"] for recorded in STOPS.values()]  # 3.20 s idle, 2.50 s in flight
    for seen in (want, got):
        assert seen["health"] == ["503", "TimeoutError", "ConnectionResetError", "URLError"]
        assert seen["connect"] == ["accepted", "refused"]
        assert seen["first_answer_503"] and seen["unanswered_before_refused"]
        assert 0 < seen["503_after_drain_s"] <= 5 + bench.PROBE_S  # one watchdog period at most
        assert seen["exit_status"] == -signal.SIGKILL and seen["exit_near_refusal_s"] <= 3 * bench.PROBE_S
    # The silent window as long as the record's two, give or take the probes' period and a busy machine.
    assert min(windows) - 3 * bench.PROBE_S <= got["silent_s"] <= max(windows) + 3 * bench.PROBE_S, got
