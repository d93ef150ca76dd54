"""
The stand-in's HTTP surface held to real sglang 0.5.14's, case by case (issue 44): the record of
``bench/gpu_http_surface.py`` on an H200 (tests/data/gpu/http-surface-h200-sglang-0.5.14.json).

Compared exactly, not by type: the status line, the header names (``date`` aside, whose value is
the clock's), the content type and framing, and the body, with the one value that is a clock
(``created``) set aside; and when an idle kept-alive connection is closed, and how.
"""

import http.client
import json
import socket
import time

import pytest

from sglfleet import PROJECT_ROOT
from test_standin import KIMI_PATH, launch, sglang_059, wait_for  # noqa: F401  (fixtures)

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
