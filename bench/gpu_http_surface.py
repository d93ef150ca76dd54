"""
What a real sglang server says on the wire where its HTTP surface meets a client or a
stop (issue 44): routes and errors byte for byte, an idle keep-alive connection's end,
and SIGTERM, idle and with requests in flight, timed to the process's end.

Two servers of the acceptance run's tiny Llama (``gpu_acceptance.write_models``, random
weights, ``--load-format dummy``; the chat template ``gpu_kimi.openai_start`` gives it),
``--reasoning-parser qwen3`` (a text parser for ``<think>``/``</think>``, which the word-level
vocabulary lacks; 0.5.14's Qwen3 detector assumes the thinking has begun, so every generated
token of a chat answer comes as ``reasoning_content``), each ``python -m
sglang.launch_server`` in a session of its own (``gpu_pd.start``): ``surface`` (port 30511)
and ``idle`` (30512). Recorded, in order:

1. **The surface** (``surface``), over one HTTP/1.1 connection kept alive where the server
   lets it (``gpu_openai.Connection``: the status line, each header in order, the framing,
   every chunk of a chunked body): ``GET /v1/models``, ``/v1/models/<served id>``,
   ``/v1/models/does-not-exist``, ``/health``, ``/model_info``; 405s (``GET /generate``,
   ``PUT /v1/models``, ``DELETE /v1/chat/completions``); a chat completion without
   ``messages``; a chat and a completions stream without ``stream_options`` (where usage
   comes, if at all); chat and completions, streamed and not, with ``max_tokens`` beyond
   the context length; an HTTP/1.0 request without keep-alive. ``facts`` sums up each
   answer's headers.
2. **Idle keep-alive** (``idle_close``), three sockets at once: after a JSON answer, after
   a streamed answer, and one that never sends a request. Each waits (``select``, 50 ms)
   for the server's FIN (``recv`` gives ``b""``) or RST, from the answer's last byte (or
   the connect), at most ``KEEPALIVE_CAP_S``.
3. **SIGTERM while idle** (``idle``, nothing in flight) and **SIGTERM with requests in
   flight** (``surface``: a streamed ``/generate`` of ``INFLIGHT_TOKENS`` tokens with
   ``INFLIGHT_EVENTS`` events already come, and a ``/v1/completions`` of
   ``INFLIGHT_TOKENS // 2`` not streamed; after the signal, a new ``/generate`` and a new
   ``GET /v1/models``). SIGTERM goes to the server's main process alone (what sglfleet's
   launch script passes on: ``KillMode=mixed``). ``sigterm_timeline`` probes every 0.1 s:
   ``/health`` (its status, or the error), a TCP connect (accepted or refused), the main
   process (its exit and status) and the session's processes (each one's end), until all
   are gone (at most ``SIGTERM_CAP_S``, then SIGKILL to the session).

The transcript (``http-surface.json``) is written after each step; the two logs are packed
into ``http-surface-logs.tar.xz``.

**Example** (the run of ``tests/data/gpu/http-surface-h200-sglang-0.5.14.json``, 2026-12-04: 182 s on
a cold machine, in one device call beside a first run of ``bench/gpu_weight_updates.py``, whose
four servers shared the GPU; its docstring says how the carry is made):

.. code:: shell

    # on the device, through the run tool: carry [".cache/bench/gpu-records-carry"], timeout_s 600:
    set -o pipefail; C=$PWD/.cache/bench/gpu-records-carry; ls $C >/dev/null || exit 3; mkdir -p /tmp/site &&
      tar -xJf $C/sglang-0.5.14-site.tar.xz -C /tmp/site && cd $C/repo && export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 &&
      nvidia-smi --query-gpu=name,memory.used,driver_version --format=csv;
      timeout 530 python3 bench/gpu_weight_updates.py --site /tmp/site --out $OUT > $OUT/weight-bench.log 2>&1 & P=$!;
      timeout 530 python3 bench/gpu_http_surface.py --site /tmp/site --out $OUT 2>&1 | tee $OUT/http-bench.log; wait $P

    # this record alone (the same carry):
    ... && timeout 530 python3 bench/gpu_http_surface.py --site /tmp/site --out $OUT 2>&1 | tee $OUT/http-bench.log

    # back here: the transcript, and each server's log out of the archive
    cp <files_at>/http-surface.json tests/data/gpu/http-surface-h200-sglang-0.5.14.json
    mkdir -p /tmp/hs && tar -xJf <files_at>/http-surface-logs.tar.xz -C /tmp/hs &&
      for s in surface idle; do cp /tmp/hs/$s.log tests/data/gpu/http-surface-h200-sglang-0.5.14-$s.log; done

    # a rehearsal without a GPU, against the stand-in
    .venv/bin/python bench/gpu_http_surface.py --site .cache/standin/sglang-0.5.14-py --out /tmp/hs --standin
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import select
import signal
import socket
import sys
import tarfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside gpu_acceptance
import gpu_acceptance as acceptance  # noqa: E402
import gpu_pd  # noqa: E402
from gpu_acceptance import PROJECT_ROOT, Transcript  # noqa: E402
from gpu_openai import CHAT, Connection  # noqa: E402
from gpu_weight_updates import Counting, exchange, tail  # noqa: E402

SERVED = "tiny-llama"
PORTS = {"surface": 30511, "idle": 30512}
CONTEXT = 4096  # the tiny Llama's max_position_embeddings
FLAGS = (*acceptance.TINY_MODEL_FLAGS, "--mem-fraction-static", "0.3", "--max-total-tokens", "16384",
         "--cuda-graph-max-bs", "8", "--max-running-requests", "16", "--host", "127.0.0.1",
         "--served-model-name", SERVED, "--reasoning-parser", "qwen3")
CHAT_TEMPLATE = ("{%- for message in messages -%}{{ message['role'] }}: {{ message['content'] }}\n{%- endfor -%}"
                 "{%- if add_generation_prompt -%}assistant:{%- endif -%}")  # gpu_kimi.openai_start's
KEEPALIVE_CAP_S = 30.0
SIGTERM_CAP_S = 45.0
PROBE_S = 0.1
INFLIGHT_TOKENS = 3000
INFLIGHT_EVENTS = 100
STARTED: list[dict] = []


def log(message: str) -> None:
    print(f"[gpu-http-surface {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def facts(answer: dict) -> dict:
    """The headers that matter of one answer, and its body's framing."""
    headers = answer.get("headers") or []
    named = {name.lower(): value for name, value in headers}
    return {"status": answer.get("status"), "content_type": named.get("content-type"),
            "connection": named.get("connection"), "content_length": named.get("content-length"),
            "transfer_encoding": named.get("transfer-encoding"), "server": named.get("server"),
            "date_present": "date" in named, "allow": named.get("allow"), "framing": answer.get("framing"),
            "header_names": [name for name, _ in headers], "error": answer.get("error")}


def usage_events(answer: dict) -> dict:
    """Where a stream's ``usage`` came: the indexes of its JSON events with a non-null usage, of how many."""
    events = [e for e in answer.get("events", []) if isinstance(e.get("json"), dict)]
    with_usage = [i for i, e in enumerate(events) if e["json"].get("usage")]
    last = events[-1]["json"] if events else {}
    return {"json_events": len(events), "events_with_usage": with_usage,
            "last_event_keys": sorted(last), "last_event_usage": last.get("usage"),
            "last_event_finish_reason": ((last.get("choices") or [{}])[0] or {}).get("finish_reason"),
            "done_marker": any(e.get("raw", "").strip() == "data: [DONE]" for e in answer.get("events", []))}


def surface(port: int) -> dict:
    """Step 1: every exchange, in order, on as few connections as the server allows."""
    results: dict = {"server": f"127.0.0.1:{port}", "model": SERVED, "context_length": CONTEXT}
    state = {"conn": Connection("127.0.0.1", port), "number": 1}

    def step(name: str, method: str, path: str, payload=None, raw: bytes | None = None, headers=None):
        conn = state["conn"]
        if raw is None:
            answer = exchange(port, method, path, payload, conn=conn)
        else:  # a malformed or odd request: the bytes as given
            answer = send_raw(port, raw)
        answer["connection"] = state["number"]
        answer["request_on_connection"] = conn.requests
        answer["facts"] = facts(answer)
        if answer.get("events") is not None:
            answer["usage_where"] = usage_events(answer)
        results[name] = answer
        if raw is None and ("error" in answer or (answer.get("connection_header") or "").lower() == "close"):
            conn.close()
            state["conn"], state["number"] = Connection("127.0.0.1", port), state["number"] + 1
        log(f"surface {name}: {answer.get('status_line') or answer.get('error')}")
        return answer

    greedy = {"temperature": 0, "max_tokens": 16}
    step("models", "GET", "/v1/models")
    step("model_served", "GET", f"/v1/models/{SERVED}")
    step("model_missing", "GET", "/v1/models/does-not-exist")
    step("health", "GET", "/health")
    step("model_info", "GET", "/model_info")
    step("get_generate_405", "GET", "/generate")
    step("put_models_405", "PUT", "/v1/models", {"model": SERVED})
    step("delete_chat_405", "DELETE", "/v1/chat/completions")
    step("after_405s", "GET", "/v1/models")
    step("chat_without_messages", "POST", "/v1/chat/completions", {"model": SERVED, **greedy})
    step("chat_stream_no_stream_options", "POST", "/v1/chat/completions",
         {"model": SERVED, "messages": CHAT, "stream": True, **greedy})
    step("completions_stream_no_stream_options", "POST", "/v1/completions",
         {"model": SERVED, "prompt": "The capital of France is", "stream": True, **greedy})
    step("chat_stream_with_usage", "POST", "/v1/chat/completions",
         {"model": SERVED, "messages": CHAT, "stream": True, "stream_options": {"include_usage": True}, **greedy})
    beyond = {"temperature": 0, "max_tokens": CONTEXT + 1000}
    step("chat_stream_beyond_context", "POST", "/v1/chat/completions",
         {"model": SERVED, "messages": CHAT, "stream": True, "stream_options": {"include_usage": True}, **beyond})
    step("completions_stream_beyond_context", "POST", "/v1/completions",
         {"model": SERVED, "prompt": "The capital of France is", "stream": True,
          "stream_options": {"include_usage": True}, **beyond})
    step("chat_beyond_context", "POST", "/v1/chat/completions", {"model": SERVED, "messages": CHAT, **beyond})
    step("after_beyond_context", "GET", "/v1/models")
    state["conn"].close()
    results["http10_models"] = send_raw(port, f"GET /v1/models HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    results["http10_models"]["facts"] = facts(results["http10_models"])
    results["connections_used"] = state["number"]
    for name, answer in results.items():  # chunks kept whole for the streams, trimmed for long ones
        if isinstance(answer, dict) and len(answer.get("chunks", [])) > 40:
            chunks = answer["chunks"]
            answer["chunks"] = chunks[:20] + [{"left_out": len(chunks) - 40}] + chunks[-20:]
            answer["events"] = answer["events"][:20] + [{"left_out": len(answer["events"]) - 40}] + answer["events"][-20:]
            answer["body"] = answer["body"][:2000] + "..." + answer["body"][-2000:]
    return results


def send_raw(port: int, raw: bytes, cap_s: float = 30.0) -> dict:
    """Bytes as given on a new connection; everything read back until the server closes (or ``cap_s``)."""
    started = time.monotonic()
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=cap_s)
        sock.sendall(raw)
        data = b""
        while True:
            part = sock.recv(65536)
            if not part:
                break
            data += part
        sock.close()
    except OSError as error:
        return {"request_raw": raw.decode("latin-1"), "error": f"{type(error).__name__}: {error}"}
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    return {"request_raw": raw.decode("latin-1"), "status_line": lines[0] if lines else None,
            "status": int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else None,
            "headers": [list(map(str.strip, line.split(":", 1))) for line in lines[1:] if ":" in line],
            "body": body.decode("utf-8", errors="replace")[:2000], "framing": "until close",
            "closed_by_server_after_s": round(time.monotonic() - started, 4)}


# --- keep-alive ---------------------------------------------------------------------------


def wait_close(sock: socket.socket, since: float, cap_s: float) -> dict:
    """Wait for the server's FIN or RST on ``sock``: seconds from ``since``, how, any bytes that came first."""
    sock.setblocking(False)
    extra = b""
    while time.monotonic() - since < cap_s:
        readable, _, _ = select.select([sock], [], [], 0.05)
        if not readable:
            continue
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return {"closed": "RST", "after_s": round(time.monotonic() - since, 3), "bytes_before": extra.decode("latin-1")}
        except BlockingIOError:
            continue
        if not data:
            return {"closed": "FIN", "after_s": round(time.monotonic() - since, 3), "bytes_before": extra.decode("latin-1")}
        extra += data
    return {"closed": None, "still_open_after_s": cap_s, "bytes_before": extra.decode("latin-1")}


def idle_close(port: int, kind: str, cap_s: float = KEEPALIVE_CAP_S) -> dict:
    """One keep-alive socket of ``kind`` (json, stream, no_request) left idle until the server closes it."""
    conn = Connection("127.0.0.1", port)
    record: dict = {"kind": kind}
    if kind == "json":
        answer = exchange(port, "GET", "/v1/models", conn=conn)
    elif kind == "stream":
        answer = exchange(port, "POST", "/v1/chat/completions", {"model": SERVED, "messages": CHAT, "stream": True,
                                                                 "temperature": 0, "max_tokens": 16}, conn=conn)
    else:
        answer = None
    since = time.monotonic()
    if answer is not None:
        record.update(status_line=answer.get("status_line"), facts=facts(answer), leftover_bytes=len(conn.buffer))
    record.update(wait_close(conn.sock, since, cap_s))
    conn.close()
    return record


def keepalive(port: int) -> dict:
    found: dict = {}

    def one(kind: str) -> None:
        try:
            found[kind] = idle_close(port, kind)
        except Exception as error:  # a record with the error beats none
            found[kind] = {"error": f"{type(error).__name__}: {error}"}

    threads = [threading.Thread(target=one, args=(kind,), daemon=True) for kind in ("json", "stream", "no_request")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(KEEPALIVE_CAP_S + 30)
    return found


# --- SIGTERM -------------------------------------------------------------------------------


class Transitions:
    """A probe's answers as changes: [answer, first seen at s, last seen at s, count], on one clock."""

    def __init__(self, t0: float):
        self.t0, self.changes, self.lock = t0, [], threading.Lock()

    def add(self, answer) -> None:
        at = round(time.monotonic() - self.t0, 3)
        with self.lock:
            if self.changes and self.changes[-1][0] == answer:
                self.changes[-1][2] = at
                self.changes[-1][3] += 1
            else:
                self.changes.append([answer, at, at, 1])

    def first(self, test) -> float | None:
        return next((entry[1] for entry in self.changes if test(entry[0])), None)


def probe_health(port: int) -> str:
    answer = gpu_pd.http("GET", f"http://127.0.0.1:{port}/health", timeout=1.0)
    return str(answer["status"]) if "status" in answer else answer.get("error", "?").split(":")[0]


def probe_connect(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return "accepted"
    except ConnectionRefusedError:
        return "refused"
    except OSError as error:
        return type(error).__name__


def sigterm_timeline(server: dict, port: int, in_flight: bool) -> dict:
    """SIGTERM to the main process alone; probes every ``PROBE_S`` until every process of its session is gone."""
    proc, session = server["proc"], server["proc"].pid
    record: dict = {"in_flight": in_flight, "processes_before": acceptance.session_processes(session)}
    holder: dict = {}
    threads = []
    conn = None
    if in_flight:
        conn = Counting("127.0.0.1", port, INFLIGHT_EVENTS, timeout=120.0)

        def streaming() -> None:
            holder["stream_sent"] = time.monotonic()
            holder["stream"] = exchange(port, "POST", "/generate", {
                "text": "Write a long story about a lighthouse keeper.", "stream": True,
                "sampling_params": {"max_new_tokens": INFLIGHT_TOKENS, "temperature": 0, "ignore_eos": True}},
                conn=conn)
            holder["stream_ended"] = time.monotonic()

        def completion() -> None:
            holder["completion_sent"] = time.monotonic()
            holder["completion"] = exchange(port, "POST", "/v1/completions", {
                "model": SERVED, "prompt": "Tell me about the sea.", "temperature": 0,
                "max_tokens": INFLIGHT_TOKENS // 2, "ignore_eos": True}, timeout=120.0)
            holder["completion_ended"] = time.monotonic()

        threads = [threading.Thread(target=streaming, daemon=True), threading.Thread(target=completion, daemon=True)]
        for thread in threads:
            thread.start()
        conn.reached.wait(60)
        record["stream_events_at_sigterm"] = conn.events
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    health, connect, done = Transitions(t0), Transitions(t0), threading.Event()
    gone: dict[int, float] = {}
    seen = dict(record["processes_before"])

    def prober(probe, transitions) -> None:
        while not done.is_set():
            began = time.monotonic()
            transitions.add(probe(port))
            time.sleep(max(0.0, PROBE_S - (time.monotonic() - began)))

    probers = [threading.Thread(target=prober, args=(probe_health, health), daemon=True),
               threading.Thread(target=prober, args=(probe_connect, connect), daemon=True)]
    for thread in probers:
        thread.start()
    late: dict = {}

    def after(delay: float, name: str, method: str, path: str, payload=None) -> None:
        time.sleep(delay)
        sent = round(time.monotonic() - t0, 3)
        answer = exchange(port, method, path, payload, timeout=60.0)
        late[name] = {"sent_s": sent, "answered_s": round(time.monotonic() - t0, 3), **facts(answer),
                      "status_line": answer.get("status_line"), "body": (answer.get("body") or "")[:400]}

    if in_flight:
        for args in ((0.5, "generate_after_sigterm", "POST", "/generate",
                      {"text": "Tell me about the sea.", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}),
                     (1.0, "models_after_sigterm", "GET", "/v1/models")):
            threads.append(threading.Thread(target=after, args=args, daemon=True))
            threads[-1].start()
    main_exit, killed = None, []
    while True:
        now = time.monotonic() - t0
        if main_exit is None and proc.poll() is not None:
            main_exit = round(now, 3)
        alive = acceptance.session_processes(session)
        seen.update(alive)
        for pid in alive:  # a scan that missed a live process does not count as its end
            gone.pop(pid, None)
        for pid in seen:
            if pid not in alive and pid not in gone:
                gone[pid] = round(now, 3)
        if main_exit is not None and not alive and connect.changes and connect.changes[-1][0] == "refused":
            break
        if now > SIGTERM_CAP_S:
            for pid in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed.append(alive[pid])
            with contextlib.suppress(ProcessLookupError):
                os.killpg(session, signal.SIGKILL)
            proc.wait(30)
            main_exit = main_exit if main_exit is not None else round(time.monotonic() - t0, 3)
            break
        time.sleep(0.02)
    time.sleep(2 * PROBE_S)
    done.set()
    for thread in probers + threads:
        thread.join(60)
    if conn is not None:
        conn.close()
    record.update(
        main_exit_s=main_exit, exit_status=proc.returncode, sigkilled_by_bench_after_cap=killed,
        health=health.changes, connect=connect.changes,
        health_first_not_200_s=health.first(lambda a: a != "200"),
        health_first_503_s=health.first(lambda a: a == "503"),
        health_first_failure_s=health.first(lambda a: not a.isdigit()),
        port_first_refused_s=connect.first(lambda a: a == "refused"),
        processes=[{"pid": pid, "name": name, "gone_s": gone.get(pid)} for pid, name in
                   sorted(seen.items(), key=lambda item: gone.get(item[0]) or 0.0)],
        all_gone_s=max(gone.values(), default=None), after_sigterm=late)
    if in_flight:
        stream = holder.get("stream", {})
        chunks = stream.get("chunks", [])
        offset = holder.get("stream_sent", t0) - t0
        times = [round(c["at_s"] + offset, 3) for c in chunks]
        last_json = None
        for chunk in chunks:
            for line in chunk["data"].splitlines():
                if line.startswith("data: {"):
                    with contextlib.suppress(ValueError):
                        last_json = json.loads(line[6:])
        meta = (last_json or {}).get("meta_info", {})
        record["stream"] = {
            "status": stream.get("status"), "error": stream.get("error"), "framing": stream.get("framing"),
            "ended_with_last_chunk": stream.get("trailer") is not None, "chunks": len(chunks),
            "chunks_after_sigterm": sum(t > 0 for t in times), "first_chunk_s": times[0] if times else None,
            "last_chunk_s": times[-1] if times else None,
            "ended_s": round(holder["stream_ended"] - t0, 3) if "stream_ended" in holder else None,
            "completion_tokens": meta.get("completion_tokens"), "finish_reason": meta.get("finish_reason"),
            "raw_last_chunks": [c["data"][:400] for c in chunks[-3:]]}
        completion = holder.get("completion", {})
        body = completion.get("json") if isinstance(completion.get("json"), dict) else {}
        record["completion"] = {
            "sent_s": round(holder["completion_sent"] - t0, 3) if "completion_sent" in holder else None,
            "answered_s": round(holder["completion_ended"] - t0, 3) if "completion_ended" in holder else None,
            **facts(completion), "status_line": completion.get("status_line"),
            "usage": body.get("usage"), "finish_reason": ((body.get("choices") or [{}])[0] or {}).get("finish_reason"),
            "body": None if body else (completion.get("body") or "")[:400]}
    record["log_lines"] = [line for line in tail(server["log"], 60)
                           if any(k in line for k in ("SIGTERM", "Gracefully", "xiting", "kill", "Shutdown",
                                                      "shutdown", "Finished server process", "Waiting for",
                                                      "Error", "rror", "Health check"))]
    return record


# --- the run ----------------------------------------------------------------------------


def kill_all() -> None:
    for server in STARTED:
        for pid in [server["proc"].pid, *acceptance.session_processes(server["proc"].pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def pack_logs(out: Path) -> None:
    files = [out / f"{name}.log" for name in PORTS if (out / f"{name}.log").exists()]
    with tarfile.open(out / "http-surface-logs.tar.xz", "w:xz") as archive:
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
    model, _draft = acceptance.write_models(Path(args.root))
    tokenizer_config = json.loads((model / "tokenizer_config.json").read_text())
    tokenizer_config["chat_template"] = CHAT_TEMPLATE
    (model / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1) + "\n")
    transcript = Transcript(out / "http-surface.json")
    transcript.save(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    what="sglang's HTTP surface, keep-alive and SIGTERM, raw (bench/gpu_http_surface.py)",
                    versions=acceptance.versions(site), flags=list(FLAGS), chat_template=CHAT_TEMPLATE)
    servers = {}
    for name, port in PORTS.items():
        entry = ([sys.executable, str(PROJECT_ROOT / "files" / "standin" / "sglang_standin.py")] if args.standin
                 else [sys.executable, "-m", "sglang.launch_server"])
        servers[name] = gpu_pd.start(name, [*entry, "--model-path", str(model), "--port", str(port), *FLAGS],
                                     site, out)
        STARTED.append(servers[name])
    try:
        ready = {name: gpu_pd.wait_health(f"http://127.0.0.1:{port}", deadline - 150, servers[name]["proc"])
                 for name, port in PORTS.items()}
        for name in ready:
            ready[name]["since_start_s"] = round(time.monotonic() - servers[name]["started"], 2)
        log(f"ready: {ready}")
        transcript.save(ready=ready)
        if ready["surface"]["ready"]:
            transcript.save(surface=surface(PORTS["surface"]))
            log("keep-alive: three idle sockets")
            transcript.save(keepalive=keepalive(PORTS["surface"]))
            log(f"keep-alive: {json.dumps({k: v.get('after_s', v.get('still_open_after_s')) for k, v in transcript['keepalive'].items()})}")
        if ready["idle"]["ready"]:
            log("SIGTERM, idle")
            transcript.save(sigterm_idle=sigterm_timeline(servers["idle"], PORTS["idle"], in_flight=False))
            log(f"SIGTERM idle: exit {transcript['sigterm_idle']['exit_status']} at {transcript['sigterm_idle']['main_exit_s']} s")
        if ready["surface"]["ready"] and time.monotonic() < deadline - SIGTERM_CAP_S - 20:
            log("SIGTERM, requests in flight")
            transcript.save(sigterm_in_flight=sigterm_timeline(servers["surface"], PORTS["surface"], in_flight=True))
            log(f"SIGTERM in flight: exit {transcript['sigterm_in_flight']['exit_status']} "
                f"at {transcript['sigterm_in_flight']['main_exit_s']} s")
    finally:
        stops = {name: gpu_pd.stop(server) for name, server in servers.items()}
        transcript.save(stops=stops, seconds=round(time.monotonic() - began, 1))
        pack_logs(out)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", required=True, help="the folder of the server's packages (the unpacked carry)")
    parser.add_argument("--out", required=True, help="where http-surface.json and the logs go")
    parser.add_argument("--root", default="/tmp/gpu-http-surface", help="where write_models writes")
    parser.add_argument("--budget-s", type=float, default=510.0, help="the whole run's seconds, stops included")
    parser.add_argument("--standin", action="store_true", help="the stand-in instead of sglang (a rehearsal)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
