"""
The stand-in's HTTP surface held to real sglang 0.5.14's, case by case (issue 44): the record of
``bench/gpu_http_surface.py`` on an H200 (tests/data/gpu/http-surface-h200-sglang-0.5.14.json).

Compared exactly, not by type: the status line, the header names (``date`` aside, whose value is
the clock's), the content type and framing, and the body, with the one value that is a clock
(``created``) set aside; and when an idle kept-alive connection is closed, and how. The record's
two SIGTERM stops are replayed with the bench's own probes (``sigterm_timeline``) against a
stand-in over 0.5.14's files at its default timing, and compared phase by phase.
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from sglfleet import PROJECT_ROOT
from test_standin import KIMI_PATH, STANDIN, free_port, launch, sglang_059, wait_for  # noqa: F401  (fixtures)

RECORD = json.loads((PROJECT_ROOT / "tests" / "data" / "gpu" / "http-surface-h200-sglang-0.5.14.json").read_text())
SURFACE = RECORD["surface"]
SERVED = SURFACE["model"]  # "tiny-llama", and its context length, as the record's server had them


@pytest.fixture
def server(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, "--served-model-name", SERVED,
                  "--context-length", str(SURFACE["context_length"]), "--skip-server-warmup")
    wait_for(proc, "/model_info")
    return proc


def replayed(port: int, case: dict) -> dict:
    """The record's request sent to the stand-in as it was sent to sglang; the answer as the record holds it."""
    request = case["request"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(request["method"], request["path"], body=request["body"].encode() or None,
                 headers=request["headers"])
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return {"status_line": f"HTTP/1.1 {response.status} {response.reason}",
            "header_names": sorted(name.lower() for name, _ in response.getheaders() if name.lower() != "date"),
            "content_type": response.getheader("content-type"), "body": json.loads(body)}


def recorded(case: dict) -> dict:
    return {"status_line": case["status_line"],
            "header_names": sorted(name.lower() for name, _ in case["headers"] if name.lower() != "date"),
            "content_type": dict(case["headers"])["content-type"], "body": json.loads(case["body"])}


def without_clock(answer: dict) -> dict:
    """``created`` is the server's clock: its type is kept, its value set aside."""
    def strip(value):
        if isinstance(value, dict):
            return {k: (type(v).__name__ if k == "created" else strip(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return {**answer, "body": strip(answer["body"])}


@pytest.mark.parametrize("case", ["models", "model_served", "model_missing", "put_models_405"])
def test_the_model_routes_answer_as_the_recorded_server(server, case):
    assert without_clock(replayed(server.port, SURFACE[case])) == without_clock(recorded(SURFACE[case]))


def test_an_idle_kept_alive_connection_closes_when_the_recorded_one_did(server):
    after = RECORD["keepalive"]["json"]
    assert (after["closed"], after["after_s"]) == ("FIN", 5.0)  # the record: an orderly close, 5 s idle
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", "/v1/models")
    conn.getresponse().read()  # the whole answer: nothing is left to read on the socket
    answered = time.monotonic()
    conn.sock.settimeout(after["after_s"] + 5)
    assert conn.sock.recv(1) == b""  # a FIN, nothing more said: what the record saw
    assert abs(time.monotonic() - answered - after["after_s"]) < 1.0
    conn.close()
    untouched = RECORD["keepalive"]["no_request"]
    assert untouched["closed"] is None  # a connection that never asked stayed open in the record
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.settimeout(after["after_s"] + 2)
        with pytest.raises(socket.timeout):  # open past the keep-alive timeout, as the record's
            sock.recv(1)


# -- SIGTERM: the record's two stops replayed with the bench's own probes --------------------------

sys.path.insert(0, str(PROJECT_ROOT / "bench"))
import gpu_http_surface as bench  # noqa: E402  (its sigterm_timeline: the probes that made the record)

STOPS = {"idle": RECORD["sigterm_idle"], "in_flight": RECORD["sigterm_in_flight"]}


@pytest.fixture
def recorded_server(tmp_path):
    """
    A stand-in over 0.5.14's files with the record's flags, at sglang's own timing: no
    ``SGLFLEET_STANDIN_*`` knob but the warm-up and the pace of a forward pass, which is the
    record's (its completion of 1500 tokens took 2.0 s beside the stream: 1.34 ms a step).
    """
    from test_server_flags import python_tree

    completion = STOPS["in_flight"]["completion"]
    step_s = (completion["answered_s"] - completion["sent_s"]) / completion["usage"]["completion_tokens"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLFLEET_STANDIN_")}
    env.update(PYTHONPATH=str(python_tree("0.5.14")), PYTHONUNBUFFERED="1", SGLFLEET_STANDIN_WARMUP="0.5",
               SGLFLEET_STANDIN_STEP_S=f"{step_s:.5f}", SGLFLEET_STANDIN_FAULT_FILE=str(tmp_path / "fault"),
               SGLFLEET_CACHE=str(tmp_path / "cache"), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               FLASHINFER_WORKSPACE_BASE=str(tmp_path / "compile"))
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "w") as out:  # a session of its own, as the bench starts sglang
        proc = subprocess.Popen([sys.executable, str(STANDIN), "--model-path", "/models/tiny-llama",
                                 "--port", str(port), *bench.FLAGS],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    proc.url, proc.port = f"http://127.0.0.1:{port}", port
    try:
        wait_for(proc, timeout=30)  # its own warm-up generation ran: the watchdog looks every 5 s
        yield {"proc": proc, "log": log}, port
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


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
