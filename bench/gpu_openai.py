"""
What a real sglang server says on its OpenAI surface, byte for byte: the record behind
the stand-in's ``/v1/chat/completions`` and ``/v1/completions`` (issue 29).

``record`` sends, over one HTTP/1.1 connection kept alive where it can:

- a streamed ``/v1/chat/completions`` with ``stream_options: {include_usage: true}``;
- the same, not streamed;
- a streamed and a not-streamed ``/v1/completions`` (the stream with usage too);
- the failures: an unknown model name, a prompt longer than the context length, a
  malformed body, and a POST to an unknown route followed by a request on the same
  connection (does the connection survive it?).

Each answer is kept as it came over the socket: the status line, the headers in
their order, and the body's framing. A chunked body keeps each chunk (its size line
and bytes), and an SSE stream its ``data:`` events in order, each parsed where it is
JSON. ``http.client`` would undo the chunking; a socket keeps it.

**Example:**

.. code:: python

    record("127.0.0.1", 30010, "sk-key", "tiny-llama-eagle3", context_length=4096)
"""

from __future__ import annotations

import json
import socket
import time

CHAT = [{"role": "user", "content": "The capital of France is"}]


class Connection:
    """One HTTP/1.1 connection: send a request, read one whole answer, keep the socket."""

    def __init__(self, host: str, port: int, timeout: float = 120.0):
        self.host, self.port, self.timeout = host, port, timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buffer = b""
        self.requests = 0

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError("closed before a line ended")
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self._fill():
                raise ConnectionError(f"closed after {len(self.buffer)} of {size} bytes")
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def send(self, method: str, path: str, body: bytes | None, headers: dict) -> dict:
        """One request and its whole answer, with its framing and timing."""
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", *(f"{k}: {v}" for k, v in headers.items())]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        wire = ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")
        started = time.monotonic()
        self.sock.sendall(wire)
        self.requests += 1
        status_line = self._line().decode("latin-1")
        first_byte_s = round(time.monotonic() - started, 4)
        header_list = []
        while (line := self._line()):
            name, _, value = line.decode("latin-1").partition(":")
            header_list.append([name, value.strip()])
        named = {name.lower(): value for name, value in header_list}
        shown = {k: ("Bearer <redacted>" if k == "Authorization" else v) for k, v in headers.items()}
        answer = {"request": {"method": method, "path": path, "headers": shown,
                              "body": (body or b"").decode("latin-1")[:2000],
                              "body_bytes": len(body or b"")},
                  "status_line": status_line, "status": int(status_line.split()[1]),
                  "headers": header_list, "first_byte_s": first_byte_s}
        if named.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size_line = self._line()
                size = int(size_line.split(b";")[0], 16)
                data = self._take(size)
                chunks.append({"size_line": size_line.decode("latin-1"), "at_s": round(time.monotonic() - started, 4),
                               "data": data.decode("utf-8", errors="replace")})
                if size:
                    self._take(2)  # the CRLF after a chunk's data
                else:  # the last chunk: trailer lines up to an empty one
                    trailer = []
                    while (line := self._line()):
                        trailer.append(line.decode("latin-1"))
                    answer["trailer"] = trailer
                    break
            answer["framing"] = "chunked"
            answer["chunks"] = chunks
            raw = "".join(chunk["data"] for chunk in chunks)
        elif "content-length" in named:
            answer["framing"] = "content-length"
            raw = self._take(int(named["content-length"])).decode("utf-8", errors="replace")
        else:  # read to the close
            answer["framing"] = "until close"
            while self._fill():
                pass
            raw, self.buffer = self.buffer.decode("utf-8", errors="replace"), b""
        answer["body"] = raw
        answer["seconds"] = round(time.monotonic() - started, 4)
        if named.get("content-type", "").startswith("text/event-stream"):
            answer["events"] = sse_events(raw)
        else:
            try:
                answer["json"] = json.loads(raw)
            except ValueError:
                pass
        answer["connection_header"] = named.get("connection")
        return answer

    def close(self) -> None:
        self.sock.close()


def sse_events(raw: str) -> list[dict]:
    """An SSE body's events in order: each ``data:`` payload, parsed where it is JSON, with its chunk's keys."""
    events = []
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            event = {"field": field, "raw": line}
            try:
                data = json.loads(value)
                event["json"] = data
                event["keys"] = sorted(data) if isinstance(data, dict) else None
                choices = data.get("choices") if isinstance(data, dict) else None
                if choices:
                    event["choice_keys"] = sorted(choices[0])
                    delta = choices[0].get("delta")
                    event["delta_keys"] = sorted(delta) if isinstance(delta, dict) else None
            except ValueError:
                pass
            events.append(event)
    return events


def post(conn: Connection, path: str, payload, key: str | None, raw: bytes | None = None) -> dict:
    headers = {"Content-Type": "application/json", "Accept": "*/*"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = raw if raw is not None else json.dumps(payload).encode()
    try:
        return conn.send("POST", path, body, headers)
    except (OSError, ConnectionError) as error:
        return {"request": {"path": path}, "error": f"{type(error).__name__}: {error}"}


def record(host: str, port: int, key: str | None, model: str, context_length: int, max_tokens: int = 16) -> dict:
    """
    Every exchange of the record, in the order sent; each names the connection it went on.

    + host, port: the server
    + key: its API key, or None
    + model: the served model name
    + context_length: the server's, to build a prompt longer than it
    """
    results: dict = {"server": f"{host}:{port}", "model": model, "context_length": context_length}
    conn = Connection(host, port)
    number = 1

    def step(name, path, payload=None, raw=None, model_name=None):
        nonlocal conn, number
        answer = post(conn, path, payload, key, raw)
        answer["connection"] = number
        answer["request_on_connection"] = conn.requests
        results[name] = answer
        if "error" in answer or (answer.get("connection_header") or "").lower() == "close":
            conn.close()
            conn, number = Connection(host, port), number + 1
        return answer

    greedy = {"temperature": 0, "max_tokens": max_tokens}
    step("chat_stream", "/v1/chat/completions", {"model": model, "messages": CHAT, "stream": True,
                                                 "stream_options": {"include_usage": True}, **greedy})
    step("chat", "/v1/chat/completions", {"model": model, "messages": CHAT, **greedy})
    step("completions_stream", "/v1/completions", {"model": model, "prompt": "The capital of France is",
                                                   "stream": True, "stream_options": {"include_usage": True},
                                                   **greedy})
    step("completions", "/v1/completions", {"model": model, "prompt": "The capital of France is", **greedy})
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}, "required": ["city"]}}}]
    step("chat_tools_stream", "/v1/chat/completions", {"model": model, "messages": CHAT, "tools": tools,
                                                       "stream": True, "stream_options": {"include_usage": True},
                                                       **greedy})
    step("chat_tools", "/v1/chat/completions", {"model": model, "messages": CHAT, "tools": tools, **greedy})
    step("unknown_model", "/v1/chat/completions", {"model": "no-such-model", "messages": CHAT, **greedy})
    long_prompt = " ".join(["sea"] * (context_length + 100))
    step("too_long", "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": long_prompt}],
                                              **greedy})
    step("too_long_completions", "/v1/completions", {"model": model, "prompt": long_prompt, **greedy})
    step("malformed", "/v1/chat/completions", raw=b'{"model": "' + model.encode() + b'", "messages": [')
    step("unknown_route", "/v1/nope", {"model": model, "messages": CHAT, **greedy})
    step("after_unknown_route", "/v1/chat/completions", {"model": model, "messages": CHAT, **greedy})
    conn.close()
    results["connections_used"] = number
    return results
