"""
The stand-in's OpenAI surface and its HTTP connection handling, as a real process over the
real sglang 0.5.9 package files (fixtures of test_standin). What each answer imitates is cited
in files/standin/standin_http.py and standin_openai.py.
"""

import http.client
import json

import pytest

from test_standin import KIMI_PATH, launch, sglang_059, wait_for  # noqa: F401  (fixtures)


@pytest.fixture
def server(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, "--skip-server-warmup", SGLFLEET_STANDIN_STEP_S="0.001")
    wait_for(proc, "/model_info")
    return proc


def exchange(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None,
             headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    return response.status, dict(response.getheaders()), response.read()


@pytest.mark.parametrize("method, path, status, detail", [
    ("POST", "/v1/no/such/route", 404, "Not Found"),
    ("GET", "/v1/no/such/route", 404, "Not Found"),
    ("DELETE", "/v1/no/such/route", 404, "Not Found"),
    ("POST", "/model_info", 405, "Method Not Allowed"),
    ("PUT", "/health", 405, "Method Not Allowed"),
])
def test_a_route_not_served_leaves_the_connection_usable(server, method, path, status, detail):
    """FastAPI's answer, and its body read: the next request on the same connection is served."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    body = json.dumps({"model": "x", "prompt": "a body nobody reads " * 50}).encode()
    code, headers, text = exchange(conn, method, path, body)
    assert (code, json.loads(text)) == (status, {"detail": detail})
    if status == 405:
        assert "Allow" in headers
    generate = json.dumps({"text": "Hi", "sampling_params": {"max_new_tokens": 3}}).encode()
    code, _, text = exchange(conn, "POST", "/generate", generate)
    assert code == 200, text
    assert json.loads(text)["meta_info"]["completion_tokens"] == 3
    conn.close()


def test_a_refused_key_leaves_the_connection_usable(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, "--skip-server-warmup", "--api-key", "k")
    wait_for(proc, "/health")
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=30)
    generate = json.dumps({"text": "Hi", "sampling_params": {"max_new_tokens": 2}}).encode()
    assert exchange(conn, "POST", "/generate", generate)[0] == 401
    assert exchange(conn, "POST", "/generate", generate, {"Authorization": "Bearer k"})[0] == 200
    conn.close()
