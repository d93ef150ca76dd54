"""
A stand-in for the SGLang server process, for GPU-less hosts of the local fleet.

Real SGLang needs GPUs; the local fleet has none. This one process takes the
place of ``python -m sglang.launch_server <flags>`` and nothing else is
simulated: the unit, the venv, the installed sglang wheel and its patched
``kimi_k25.py`` are all real. It is a test double and never belongs in a
production inventory.

    <venv>/bin/python /opt/sglfleet/standin/sglang_standin.py <sglang flags...>

What it does, faithful to sglang 0.5.9 where it matters to a deploy:

- **Flags**: exactly those of the installed sglang, read from its own
  ``sglang/srt/server_args.py`` (``server_flags``), found without importing
  sglang. An unknown flag exits 2 with argparse's message, as SGLang does.
- **EAGLE-3 check**: with ``--speculative-algorithm EAGLE3`` and a Kimi K2.5
  target, it loads the installed ``kimi_k25.py`` with its heavy imports
  stubbed (``stub_import``) and calls the target model's
  ``set_eagle3_layers_to_capture`` then ``get_embed_and_head`` as the model
  runner and the EAGLE worker do. A class without the delegation methods
  exits 1 with the AttributeError the real server dies of. The target is
  Kimi K2.5 when ``<model-path>/config.json`` says ``architectures:
  ["KimiK25ForConditionalGeneration"]``, or when there is no config.json
  (no weights on these hosts; the fleet serves Kimi K2.5). Another
  architecture in config.json skips the check.
- **HTTP** on ``--host``/``--port``: ``/health`` and ``/health_generate`` 503
  during the warm-up, then 200 with an empty body; ``/model_info``,
  ``/server_info`` (and their ``/get_`` names); ``/metrics`` only with
  ``--enable-metrics``; ``/generate``, ``/v1/completions``, ``/v1/models``.
  With ``--api-key`` every path but ``/health*`` and ``/metrics*`` needs
  ``Authorization: Bearer <key>`` (401 otherwise).
- **SIGTERM** exits 0. Logs go to stderr (journald); the API key never does.

Environment:

- ``SGLFLEET_STANDIN_WARMUP``: warm-up seconds (float, default 5).
- ``SGLFLEET_STANDIN_FAULT_FILE``: the fault file (default
  ``/etc/sglfleet/standin-fault``), read once at start. A mode, then
  optionally ``spare <release-id>``: starts of that release (``current``
  under ``SGLFLEET_ROOT``, default ``/opt/sglfleet``) are spared. Modes:
  ``crash`` (exit 1 shortly after start, as a CUDA error while loading),
  ``hang`` (the port accepts connections but nothing is ever answered),
  ``unready`` (``/health`` stays 503), ``slow`` (warm-up x10, or
  ``SGLFLEET_STANDIN_SLOW_WARMUP`` seconds, and each generation takes
  ``SGLFLEET_STANDIN_SLOW_GENERATE`` seconds, default 2).
- ``SGLFLEET_STANDIN_SPEC_ACCEPT_LENGTH``: the ``sglang:spec_accept_length``
  reported once a generation has run with speculative decoding (default 2.8,
  capped at the number of draft tokens).

Standard library only (python3.11 on the hosts).

**Example:**

.. code:: shell

    SGLFLEET_STANDIN_WARMUP=0.5 python3 sglang_standin.py --model-path /models/kimi --port 30000
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:  # on a host: shipped beside this file
    import server_flags
    import stub_import
except ImportError:  # in the repository: files/standin/ -> the root holding sglfleet/
    sys.path.insert(1, str(Path(__file__).resolve().parents[2]))
    from sglfleet import server_flags, stub_import

logger = logging.getLogger("sglang.standin")

DEFAULT_FAULT_FILE = "/etc/sglfleet/standin-fault"
FAULTS = ("crash", "hang", "unready", "slow")
KIMI_K25 = "KimiK25ForConditionalGeneration"
# sglang 0.5.9 logs "[2025-01-01 12:00:00] message" (and "... TP0] ..." in the scheduler).
LOG_FORMAT = "[%(asctime)s] %(message)s"
SECRET_FIELDS = ("api_key", "admin_api_key")


# --------------------------------------------------------------------------
# The installed sglang, found without importing it
# --------------------------------------------------------------------------


def find_sglang() -> Path:
    """The installed ``sglang`` package directory (nothing of it is imported)."""
    spec = importlib.util.find_spec("sglang")  # locates the top-level package only
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if (Path(location) / "srt" / "server_args.py").is_file():
                return Path(location)
    for entry in sys.path:
        candidate = Path(entry or ".") / "sglang"
        if (candidate / "srt" / "server_args.py").is_file():
            return candidate
    raise FileNotFoundError("sglang is not installed in this Python environment "
                            f"({sys.executable}); install the stack's sglang wheel")


def sglang_version(package: Path) -> str:
    """The installed version, from its dist-info or ``_version.py``, never by import."""
    for meta in sorted(package.parent.glob("sglang-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    for name in ("_version.py", "version.py"):
        path = package / name
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and any(
                    isinstance(t, ast.Name) and t.id in ("__version__", "version")
                    for t in node.targets):
                return str(node.value.value)
    return "0.0.0.dev0"


# --------------------------------------------------------------------------
# Start-up: arguments, fault, the EAGLE-3 check
# --------------------------------------------------------------------------


def server_args(flagset, parsed) -> dict:
    """ServerArgs as the real server holds it after ``__post_init__`` (the parts gates read)."""
    values = dict(flagset.fields)
    namespace = vars(parsed)
    for spec in flagset.flags:  # spec.field: 0.5.9's tensor_parallel_size feeds tp_size
        if spec.field is not None and spec.dest in namespace:
            values[spec.field] = namespace[spec.dest]
    if values.get("tokenizer_path") is None:
        values["tokenizer_path"] = values.get("model_path")
    if values.get("served_model_name") is None:
        values["served_model_name"] = values.get("model_path")
    algorithm = values.get("speculative_algorithm")
    if algorithm == "NEXTN":
        values["speculative_algorithm"] = algorithm = "EAGLE"
    if algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
        if values.get("max_running_requests") is None:
            values["max_running_requests"] = 48  # 0.5.9: forced with speculative decoding
        steps = ("speculative_num_steps", "speculative_eagle_topk",
                 "speculative_num_draft_tokens")
        if all(values.get(k) is None for k in steps):
            values.update(zip(steps, (3, 1, 4)))  # 0.5.9's auto choice
        if values.get("speculative_eagle_topk") == 1 and values.get("speculative_num_steps"):
            values["speculative_num_draft_tokens"] = values["speculative_num_steps"] + 1
    return values


def redacted(args: dict) -> str:
    shown = {k: ("<redacted>" if k in SECRET_FIELDS and v else v) for k, v in args.items()}
    return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


def serving_release() -> str | None:
    """The release this start belongs to: sglang.service starts through /opt/sglfleet/current."""
    current = Path(os.environ.get("SGLFLEET_ROOT", "/opt/sglfleet")) / "current"
    return current.resolve().name if current.is_symlink() else None


def read_fault() -> str | None:
    path = Path(os.environ.get("SGLFLEET_STANDIN_FAULT_FILE", DEFAULT_FAULT_FILE))
    try:
        word, *rest = path.read_text().split() or [""]
    except OSError:
        return None
    # "spare <release-id>": the release that served when the fault was set
    # stays healthy, so a host fails on its new release and a rollback serves.
    if rest[:1] == ["spare"] and rest[1:2] == [serving_release()]:
        return None
    if word and word not in FAULTS:
        logger.warning(f"stand-in: ignoring unknown fault {word!r} in {path} "
                       f"(one of {', '.join(FAULTS)})")
        return None
    return word or None


def model_config(model_path: str | None) -> dict:
    try:
        return json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        # No weights on a GPU-less host: the fleet serves Kimi K2.5.
        return {"architectures": [KIMI_K25], "model_type": "kimi_k25"}


class _LanguageModel:
    """The target's text model (DeepseekV3ForCausalLM), which has the EAGLE-3 methods."""

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.layers_to_capture = layer_ids

    def get_embed_and_head(self):
        return object(), object()

    def set_embed_and_head(self, embed, head):
        pass


def eagle3_check(package: Path, args: dict, architectures: list) -> None:
    """
    Raise what the real server raises when the target model cannot run EAGLE-3.

    The model runner calls ``model.set_eagle3_layers_to_capture(ids)`` at
    start-up, then the EAGLE worker ``model.get_embed_and_head()``.
    """
    if args.get("speculative_algorithm") != "EAGLE3" or KIMI_K25 not in (architectures or []):
        return
    path = package / "srt" / "models" / "kimi_k25.py"
    if not path.is_file():
        raise ValueError(f"Model architectures {architectures} are not supported for now.")
    module = stub_import.load_with_stubs(path, "sglang.srt.models.kimi_k25")
    cls = getattr(module, KIMI_K25)
    model = cls.__new__(cls)
    object.__setattr__(model, "language_model", _LanguageModel())
    draft = model_config(args.get("speculative_draft_model_path")).get("eagle_config") or {}
    model.set_eagle3_layers_to_capture(draft.get("eagle_aux_hidden_state_layer_ids"))
    model.get_embed_and_head()


# --------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------


class Stats:
    """What /metrics reports, updated by requests."""

    TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0,
                    60.0, 80.0, 100.0, 200.0, 400.0)

    def __init__(self):
        self.lock = threading.Lock()
        self.running = 0
        self.requests = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.ttft: list[float] = []
        self.e2e: list[float] = []
        self.recent: list[tuple[float, int]] = []  # (finish time, tokens)


class Standin:
    def __init__(self, args: dict, version: str, config: dict, warmup: float, fault: str | None):
        self.args = args
        self.version = version
        self.config = config
        self.fault = fault
        self.warmup = warmup
        self.ready_at: float | None = None
        self.stopping = False
        self.in_flight = 0
        self.in_flight_changed = threading.Condition()
        self.stats = Stats()
        self.generate_delay = 0.0
        if fault == "slow":
            slow = os.environ.get("SGLFLEET_STANDIN_SLOW_WARMUP")
            self.warmup = float(slow) if slow else warmup * 10
            self.generate_delay = float(os.environ.get("SGLFLEET_STANDIN_SLOW_GENERATE", "2"))

    @property
    def ready(self) -> bool:
        return (self.fault != "unready" and not self.stopping and self.ready_at is not None
                and time.monotonic() >= self.ready_at)

    @property
    def spec_on(self) -> bool:
        return bool(self.args.get("speculative_algorithm"))

    def generate(self, prompt: str | list | None, sampling: dict) -> dict:
        n = int(sampling.get("max_new_tokens", 128))  # SGLang's default
        words = ("The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog.")
        text = (" " + " ".join(words[i % len(words)] for i in range(n))) if n > 0 else ""
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(
            str(prompt or "").split()) or 1
        start = time.monotonic()
        with self.stats.lock:
            self.stats.running += 1
        try:
            if self.generate_delay:
                time.sleep(self.generate_delay)
        finally:
            elapsed = time.monotonic() - start
            with self.stats.lock:
                s = self.stats
                s.running -= 1
                s.requests += 1
                s.prompt_tokens += prompt_tokens
                s.generation_tokens += n
                s.ttft.append(elapsed)
                s.e2e.append(elapsed)
                s.recent.append((time.monotonic(), n))
        meta = {"id": uuid.uuid4().hex, "finish_reason": {"type": "length", "length": n},
                "prompt_tokens": prompt_tokens, "weight_version": "default",
                "total_retractions": 0, "completion_tokens": n, "cached_tokens": 0,
                "e2e_latency": elapsed}
        if self.spec_on and n:
            length = self.accept_length()
            meta["spec_verify_ct"] = max(1, round(n / length))
            meta["spec_accept_length"] = n / meta["spec_verify_ct"]
        return {"text": text, "output_ids": list(range(n)), "meta_info": meta}

    def accept_length(self) -> float:
        draft = self.args.get("speculative_num_draft_tokens") or 4
        wanted = float(os.environ.get("SGLFLEET_STANDIN_SPEC_ACCEPT_LENGTH", "2.8"))
        return min(wanted, float(draft))

    def metrics(self) -> str:
        name = self.args.get("served_model_name") or self.args.get("model_path")
        sched = (f'engine_type="unified",model_name="{name}",moe_ep_rank="0",'
                 f'pp_rank="0",tp_rank="0"')
        tok = f'model_name="{name}"'
        now = time.monotonic()
        with self.stats.lock:
            s = self.stats
            s.recent = [(t, n) for t, n in s.recent if now - t < 10]
            throughput = sum(n for _, n in s.recent) / 10.0
            length = rate = 0.0
            if self.spec_on and s.generation_tokens:
                length = self.accept_length()
                rate = length / float(self.args.get("speculative_num_draft_tokens") or 4)
            gauges = [
                ("num_running_reqs", "The number of running requests.", s.running),
                ("num_used_tokens", "The number of used tokens.", 0),
                ("token_usage", "The token usage.", 0.0),
                ("gen_throughput", "The generation throughput (token/s).", throughput),
                ("num_queue_reqs", "The number of requests in the waiting queue.", 0),
                ("cache_hit_rate", "The prefix cache hit rate.", 0.0),
                ("spec_accept_length",
                 "The average acceptance length of speculative decoding.", length),
                ("spec_accept_rate", "The average acceptance rate of speculative decoding "
                 "(`accepted tokens / total draft tokens` in batch).", rate),
            ]
            out = []
            for metric, doc, value in gauges:
                out += [f"# HELP sglang:{metric} {doc}", f"# TYPE sglang:{metric} gauge",
                        f"sglang:{metric}{{{sched}}} {float(value)}"]
            for metric, doc, value in (
                    ("prompt_tokens_total", "Number of prefill tokens processed.",
                     s.prompt_tokens),
                    ("generation_tokens_total", "Number of generation tokens processed.",
                     s.generation_tokens),
                    ("num_requests_total", "The number of requests.", s.requests)):
                out += [f"# HELP sglang:{metric} {doc}", f"# TYPE sglang:{metric} counter",
                        f"sglang:{metric}{{{tok}}} {float(value)}"]
            for metric, doc, samples in (
                    ("time_to_first_token_seconds",
                     "Histogram of time to first token in seconds.", s.ttft),
                    ("e2e_request_latency_seconds",
                     "Histogram of End-to-end request latency in seconds", s.e2e)):
                out += [f"# HELP sglang:{metric} {doc}", f"# TYPE sglang:{metric} histogram"]
                for le in Stats.TTFT_BUCKETS:
                    count = sum(1 for x in samples if x <= le)
                    out.append(f'sglang:{metric}_bucket{{le="{le}",{tok}}} {float(count)}')
                out.append(f'sglang:{metric}_bucket{{le="+Inf",{tok}}} {float(len(samples))}')
                out.append(f"sglang:{metric}_count{{{tok}}} {float(len(samples))}")
                out.append(f"sglang:{metric}_sum{{{tok}}} {float(sum(samples))}")
        return "\n".join(out) + "\n"


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    standin: Standin  # set on the subclass made by serve()

    GET_ROUTES = {"/health", "/health_generate", "/model_info", "/get_model_info",
                  "/server_info", "/get_server_info", "/metrics", "/v1/models", "/generate"}
    POST_ROUTES = {"/generate", "/v1/completions"}

    def log_message(self, format, *args):  # uvicorn's access log line
        logger.info(f'{self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" '
                    f"{args[1] if len(args) > 1 else ''}")

    def do_GET(self):
        self.counted("GET")

    def do_POST(self):
        self.counted("POST")

    def do_PUT(self):
        self.counted("PUT")

    def counted(self, method: str) -> None:
        # Requests in flight finish before the process exits, as uvicorn's graceful shutdown.
        with self.standin.in_flight_changed:
            self.standin.in_flight += 1
        try:
            self.route(method)
        finally:
            with self.standin.in_flight_changed:
                self.standin.in_flight -= 1
                self.standin.in_flight_changed.notify_all()

    def route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        key = self.standin.args.get("api_key")
        # 0.5.9 utils/auth.py: /health* and /metrics* never need the key.
        if key and not path.startswith(("/health", "/metrics")):
            header = self.headers.get("Authorization") or ""
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or token != key:
                return self.reply(401, {"error": "Unauthorized"})
        routes = self.POST_ROUTES if method in ("POST", "PUT") else self.GET_ROUTES
        if path == "/metrics" and not self.standin.args.get("enable_metrics"):
            return self.reply(404, {"detail": "Not Found"})
        if path not in routes:
            known = path in self.GET_ROUTES | self.POST_ROUTES
            return self.reply(405 if known else 404,
                              {"detail": "Method Not Allowed" if known else "Not Found"})
        handler = getattr(self, "route_" + path.strip("/").replace("/", "_"))
        try:
            handler()
        except (TypeError, ValueError) as error:  # a malformed request body
            self.reply(400, {"error": {"message": str(error)}})

    # -- endpoints ----------------------------------------------------------

    def route_health(self):
        if not self.standin.ready:
            return self.reply(503, None)
        if self.standin.generate_delay:
            time.sleep(self.standin.generate_delay)
        self.reply(200, None)

    route_health_generate = route_health

    def route_model_info(self):
        args, config = self.standin.args, self.standin.config
        self.reply(200, {
            "model_path": args.get("model_path"), "tokenizer_path": args.get("tokenizer_path"),
            "is_generation": not args.get("is_embedding"),
            "preferred_sampling_params": args.get("preferred_sampling_params"),
            "weight_version": args.get("weight_version", "default"),
            "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": config.get("model_type"), "architectures": config.get("architectures"),
        })

    route_get_model_info = route_model_info

    def route_server_info(self):
        # 0.5.9: asdict(server_args) + scheduler info + internal states + version.
        args = self.standin.args
        self.reply(200, {**args, "max_total_num_tokens": 0,
                         "max_req_input_len": args.get("context_length") or 0,
                         "internal_states": [{"last_gen_throughput": 0.0}],
                         "version": self.standin.version})

    route_get_server_info = route_server_info

    def route_metrics(self):
        body = self.standin.metrics().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def route_v1_models(self):
        name = self.standin.args.get("served_model_name")
        self.reply(200, {"object": "list", "data": [
            {"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
             "root": name, "max_model_len": self.standin.args.get("context_length")}]})

    def route_generate(self):
        body = self.body()
        if body is None:
            return
        if not self.standin.ready:
            return self.reply(503, {"error": {"message": "The server is not ready yet."}})
        prompt = body.get("text", body.get("input_ids"))
        sampling = body.get("sampling_params") or {}
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            return self.reply(200, [self.standin.generate(p, sampling) for p in prompt])
        out = self.standin.generate(prompt, sampling)
        if body.get("stream"):
            return self.stream([out])
        self.reply(200, out)

    def route_v1_completions(self):
        body = self.body()
        if body is None:
            return
        if not self.standin.ready:
            return self.reply(503, {"object": "error", "message": "The server is not ready yet.",
                                    "type": "Service Unavailable", "code": 503})
        sampling = {"max_new_tokens": body.get("max_tokens", 16),
                    "temperature": body.get("temperature", 1.0)}
        out = self.standin.generate(body.get("prompt"), sampling)
        meta = out["meta_info"]
        self.reply(200, {
            "id": meta["id"], "object": "text_completion", "created": int(time.time()),
            "model": body.get("model") or self.standin.args.get("served_model_name"),
            "choices": [{"index": 0, "text": out["text"], "logprobs": None,
                         "finish_reason": "length", "matched_stop": None}],
            "usage": {"prompt_tokens": meta["prompt_tokens"],
                      "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"],
                      "completion_tokens": meta["completion_tokens"],
                      "prompt_tokens_details": None},
        })

    # -- plumbing -----------------------------------------------------------

    def body(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            data = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(data, dict):
                raise ValueError("expected a JSON object")
            return data
        except ValueError as error:
            self.reply(422, {"detail": [{"type": "json_invalid", "msg": str(error)}]})
            return None

    def reply(self, status: int, payload) -> None:
        body = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status, HTTPStatus(status).phrase)
        if payload is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def stream(self, chunks: list) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def merge_config(argv: list[str], flagset) -> list[str]:
    """
    ``--config FILE`` as sglang 0.5.9's ConfigArgumentMerger reads it: the
    file's keys become flags placed before the command line (CLI > config).
    Only the flat ``key: value`` YAML sglfleet writes is understood (no PyYAML).
    """
    if "--config" not in argv:
        return argv
    at = argv.index("--config")
    path = Path(argv[at + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise SystemExit(f"ValueError: Config file must be YAML format, got: {path.suffix}")
    config_args = []
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if not sep or line.lstrip().startswith("#"):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1].replace("''", "'")
        option = "--" + key.strip().replace("_", "-")
        spec = flagset.spec(option) if option in flagset.options else None
        if spec is not None and spec.action == "store_true":
            config_args += [option] if value.lower() == "true" else []
        else:
            config_args += [option, value]
    return config_args + argv[:at] + argv[at + 2:]


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt="%Y-%m-%d %H:%M:%S",
                        stream=sys.stderr)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    package = find_sglang()
    flagset = server_flags.load_flags(package / "srt" / "server_args.py")
    parser = server_flags.build_parser(flagset, prog=flagset.prog or "launch_server.py")
    argv = merge_config(argv, flagset)
    args = server_args(flagset, parser.parse_args(argv))  # exits 2 on a bad flag
    version = sglang_version(package)
    fault = read_fault()
    warmup = float(os.environ.get("SGLFLEET_STANDIN_WARMUP", "5"))
    logger.info(f"server_args={redacted(args)}")
    logger.info(f"stand-in for sglang {version} (no GPU): {package}"
                + (f"; fault mode {fault}" if fault else ""))

    if fault == "crash":
        time.sleep(0.3)
        logger.error("Scheduler hit an exception: Traceback (most recent call last):\n"
                     '  File "sglang/srt/model_executor/model_runner.py", in load_model\n'
                     "torch.AcceleratorError: CUDA error: an illegal memory access was "
                     "encountered\n(stand-in fault mode: crash)")
        return 1

    config = model_config(args.get("model_path"))
    try:
        eagle3_check(package, args, config.get("architectures"))
    except Exception:
        logger.error("Scheduler hit an exception: " + traceback.format_exc().rstrip())
        return 1
    logger.info("Load weight end. (stand-in: no weights)")

    host, port = args.get("host") or "127.0.0.1", int(args.get("port") or 30000)
    if fault == "hang":
        # The port takes connections into its backlog; nothing ever answers.
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
            logger.info(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
            stop.wait()
        logger.info("Received SIGTERM, exiting.")
        return 0

    standin = Standin(args, version, config, warmup, fault)
    handler = type("BoundHandler", (Handler,), {"standin": standin})
    Server.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        server = Server((host, port), handler)
    except OSError as error:
        logger.error(f"[Errno {error.errno}] error while attempting to bind on address "
                     f"({host!r}, {port}): {error.strerror}")
        return 1
    standin.ready_at = time.monotonic() + standin.warmup
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    logger.info(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    if fault != "unready" and not stop.wait(standin.warmup):
        logger.info("The server is fired up and ready to roll!")
    stop.wait()
    standin.stopping = True
    logger.info("Received SIGTERM, shutting down.")
    server.shutdown()  # no new connections
    with standin.in_flight_changed:
        if not standin.in_flight_changed.wait_for(lambda: standin.in_flight == 0, timeout=30):
            logger.warning(f"{standin.in_flight} requests still in flight after 30 s; exiting")
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
