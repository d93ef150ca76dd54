"""
The stand-in's HTTP surface, as sglang 0.5.9's ``srt/entrypoints/http_server.py`` answers.

- ``/health`` and ``/health_generate`` (http_server.py:463-540): 503 at once
  while shutting down (``gracefully_exit``) or while ``server_status`` is
  ``Starting``; otherwise a one-token generation (``HEALTH_CHECK_...``, not
  counted in the tokenizer metrics, but a prefill, so it re-publishes the
  scheduler gauges), then 200 as soon as any output reached the tokenizer
  after the check began, looked at once a second (so never under ~1 s; both times ``TIME_SCALE``), or 503
  and ``UnHealthy`` after ``SGLANG_HEALTH_CHECK_TIMEOUT`` (20) seconds.
  ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false`` makes ``/health`` answer
  200 without generating (environ.py:462).
- **The server's own warm-up** (``_wait_and_warmup``/``_execute_server_warmup``,
  http_server.py:1667-1845): started as the listener opens; polls
  ``/model_info`` once a second, then posts ``/generate`` with
  ``"The capital city of France is"`` and ``max_new_tokens`` 8; its 200 sets
  ``server_status`` to ``Up`` and logs "The server is fired up and ready to
  roll!". A failed warm-up kills the process. The warm-up is an ordinary
  request: it shows in the counters and histograms.
- ``/generate`` (650-683), ``/v1/completions`` and ``/v1/chat/completions``
  (1343-1358, answered by ``standin_openai``) serve whatever the status
  (0.5.9 does not refuse generations while ``Starting``); a streaming
  ``/generate`` sends one event per output (cumulative text), an OpenAI stream
  the chunks of each output (incremental), chunked as uvicorn sends a
  ``StreamingResponse``. A request being answered, streamed or not, is in
  flight for the SIGTERM drain until its last byte (``engine.answered``). A client that
  disconnects from a request in flight aborts it
  (``num_aborted_requests_total``, tokenizer_manager.py:1100-1210, 1428-1440).
- ``/server_info`` answers the API keys as the installed release does: in plain text, or
  redacted where sglfleet's ``server_info_keys_redacted*`` patched it (``standin_secrets``).
- ``/model_info``, ``/server_info`` (and their ``/get_`` names), ``/v1/models`` and
  ``/v1/models/{id}`` (the served model's card; another id gets an OpenAI-style 404, ``model_not_found``);
  ``/metrics`` only with ``--enable-metrics`` (404 otherwise), with the HTTP
  request/response counters of ``add_prometheus_track_response_middleware``.
- **0.5.14's stop** (``sglang_standin.sigterm_watchdog``): once ``loop_blocked`` is set, as
  uvicorn's event loop is while 0.5.14's watchdog waits for its schedulers, the port still takes
  connections and nothing is read or answered on any, nor an idle one closed, until the process
  SIGKILLs itself.
- With ``--api-key`` every path but ``/health*`` and ``/metrics*`` needs
  ``Authorization: Bearer <key>`` (401 otherwise; ``srt/utils/auth.py``).
- A route it does not serve is answered as FastAPI (Starlette's router) answers
  it: 404 ``{"detail":"Not Found"}``, or 405 ``{"detail":"Method Not Allowed"}``
  with ``Allow`` for a known path. **Every reply leaves a keep-alive connection
  usable**: the request's body is read (per ``Content-Length``) before anything
  is answered, or the connection is closed; a body left unread would be parsed
  as the next request on that connection (a gateway in front then answers 501
  to another client's request).

**Example:**

.. code:: python

    standin = Standin(args, version, config, engine, registry, fault=None)
    server = serve(standin, "127.0.0.1", 30000)  # raises OSError when the port is taken
"""

from __future__ import annotations

import json
import logging
import os
import queue
import select
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import standin_auth as auth
import standin_openai as openai
import standin_secrets as secrets
import standin_weights
from standin_chat import ChatTemplate
from standin_engine import Engine, Req
from standin_tls import server_context, warmup_context

logger = logging.getLogger("sglang.standin")

HEALTH_CHECK_TIMEOUT = int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", 20))  # http_server.py:166
# tokenizer_manager.py:123 / environ.py:480: how often a waiting request looks for a disconnect.
REQUEST_STATE_WAIT_TIMEOUT = int(os.getenv("SGLANG_REQUEST_STATE_WAIT_TIMEOUT", 4))
# Multiplies sglang's own fixed waits (each below at 0.5.9's value, cited): 1, the default,
# is sglang's timing; the local fleet runs them shorter, since its suite restarts hosts often.
TIME_SCALE = float(os.getenv("SGLFLEET_STANDIN_TIME_SCALE", "1"))
MODEL_INFO_POLL_S = 1.0 * TIME_SCALE  # http_server.py:1676: time.sleep(1) before each /model_info try
HEALTH_POLL_S = 1.0 * TIME_SCALE      # http_server.py:521: await asyncio.sleep(1) in health_generate


class Standin:
    """The server's state: what 0.5.9 keeps in ``_global_state.tokenizer_manager``."""

    def __init__(self, args: dict, version: str, config: dict, engine: Engine, registry,
                 fault=None):
        self.args, self.version, self.config = args, version, config
        self.engine, self.registry, self.fault = engine, registry, fault
        self.server_status = "Starting"  # ServerStatus, tokenizer_manager.py:2437-2440
        self.gracefully_exit = False
        self.first_request = threading.Event()  # auto_create_handle_loop has run
        self.loop_blocked = threading.Event()  # 0.5.14's stop waits for its schedulers in the event loop
        self.in_flight = 0  # HTTP requests being answered, for a graceful uvicorn stop
        self.in_flight_changed = threading.Condition()
        # /server_info's keys: in plain text, as sglang answers them, unless its files carry
        # sglfleet's server_info_keys_redacted* (standin_secrets.redacts_server_info).
        self.redacts_server_info = False
        # Each route's auth level, as the installed http_server.py declares it (standin_auth.route_levels).
        self.auth_routes = []
        # What /update_weights_from_disk changes (standin_weights): the weights, the name /v1/models
        # lists, and the lock every generation holds while it runs.
        self.weights = standin_weights.Weights()
        self.served_model_name = args.get("served_model_name")
        self.started_model_path = args.get("model_path")
        self.model_update = standin_weights.ModelUpdateLock()

    def url(self) -> str:
        # ServerArgs.url: https with --ssl-certfile (0.5.14 server_args.py:6508-6518)
        host = self.args.get("host") or "127.0.0.1"
        host = "127.0.0.1" if host == "0.0.0.0" else host
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self.args.get('ssl_certfile') else 'http'}://{host}:{self.args.get('port') or 30000}"

    def warmup(self) -> bool:
        """``_wait_and_warmup``: wait for /model_info, then one 8-token generation."""
        if self.args.get("skip_server_warmup"):  # http_server.py:1829-1833
            self.server_status = "Up"
            logger.info("The server is fired up and ready to roll!")
            return True
        headers = {"Content-Type": "application/json"}
        if self.args.get("api_key"):
            headers["Authorization"] = f"Bearer {self.args['api_key']}"
        last = None
        for _ in range(120):
            time.sleep(MODEL_INFO_POLL_S)
            try:
                request = urllib.request.Request(self.url() + "/model_info", headers=headers)
                with urllib.request.urlopen(request, timeout=5, context=warmup_context(self.args)) as response:
                    if response.status == 200:
                        break
            except OSError as error:
                last = error
        else:
            logger.error(f"Initialization failed. warmup error: {last!r}")
            return False
        if self.fault is not None and self.fault.mode == "unready":
            threading.Event().wait()  # the warm-up generation never answers
        disagg = getattr(self, "disagg", None)  # a PD role's warm-up takes sglang's solo path (standin_disagg)
        body = json.dumps({"sampling_params": {"temperature": 0, "max_new_tokens": 8},
                           "text": "The capital city of France is",
                           **(disagg.warmup_fields() if disagg else {})}).encode()
        try:
            request = urllib.request.Request(self.url() + "/generate", data=body, headers=headers)
            with urllib.request.urlopen(request, timeout=600, context=warmup_context(self.args)) as response:
                assert response.status == 200, response.read()
        except (OSError, AssertionError) as error:
            logger.error(f"Initialization failed. warmup error: {error!r}")
            return False
        self.server_status = "Up"
        logger.info("The server is fired up and ready to roll!")
        return True


MODEL_PREFIX = "/v1/models/"
# uvicorn's timeout_keep_alive as sglang sets it: 5 (0.5.9 http_server.py:1972; 0.5.14 :2355, its
# SGLANG_TIMEOUT_KEEP_ALIVE, 5 by default, environ.py:710); uvicorn's, not one of sglang's own waits: unscaled.
KEEP_ALIVE_S = float(os.environ.get("SGLANG_TIMEOUT_KEEP_ALIVE", "5"))


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    outside_cors = True  # the server's own answers (a malformed request line); counted() clears it
    standin: Standin  # set on the subclass made by serve()

    GET_ROUTES = {"/health", "/health_generate", "/model_info", "/get_model_info",
                  "/server_info", "/get_server_info", "/metrics", "/v1/models", "/flush_cache"}
    POST_ROUTES = {"/generate", "/v1/completions", "/v1/chat/completions", "/flush_cache",
                   "/update_weights_from_disk"}
    PUT_ROUTES = {"/generate"}  # methods=["POST", "PUT"] (0.5.9 http_server.py:649, 0.5.14 :764-768)

    def setup(self):
        super().setup()
        self.answered_one = False

    def handle_one_request(self):
        # uvicorn closes a kept-alive connection that stays idle KEEP_ALIVE_S after its last answer:
        # a client or gateway that reuses it later meets a closed connection, here as there.
        idle = self.answered_one and not select.select([self.connection], [], [], KEEP_ALIVE_S)[0]
        if self.standin.loop_blocked.is_set():
            # uvicorn's loop is blocked (sglang_standin.sigterm_watchdog): no request is read, none
            # answered, no idle connection closed, until the process's SIGKILL resets them all.
            threading.Event().wait()
        if idle:
            self.close_connection = True
            return
        self.answered_one = True
        super().handle_one_request()

    def log_message(self, format, *args):  # uvicorn's access log line
        logger.info(f'{self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" '
                    f"{args[1] if len(args) > 1 else ''}")

    def do_GET(self):
        self.counted("GET")

    def do_POST(self):
        self.counted("POST")

    def do_PUT(self):
        self.counted("PUT")

    def do_DELETE(self):
        self.counted("DELETE")

    def do_PATCH(self):
        self.counted("PATCH")

    def do_OPTIONS(self):
        self.counted("OPTIONS")

    def end_headers(self):
        # 0.5.9 wraps its app in CORSMiddleware (http_server.py:366-372), and the stack's Starlette
        # (1.10.0, files/stacks/locks/cu130-sglang-0.5.9/pylock.toml) answers a request without
        # an Origin with "Vary: Origin" (starlette/middleware/cors.py:169-170), as the 0.5.14
        # record shows. The API-key middleware (added at launch, so outside it) and
        # ServerErrorMiddleware's 500 do not pass through it.
        if not self.outside_cors:
            self.send_header("Vary", "Origin")
        if self.close_connection and self.request_version == "HTTP/1.0":
            # h11 under uvicorn says so to an HTTP/1.0 client without keep-alive, then closes.
            self.send_header("Connection", "close")
        super().end_headers()

    def counted(self, method: str) -> None:
        self.outside_cors = False
        standin = self.standin
        with standin.in_flight_changed:
            standin.in_flight += 1
        try:
            self.raw_body = self.read_body()
            self.route(method)
        finally:
            with standin.in_flight_changed:
                standin.in_flight -= 1
                standin.in_flight_changed.notify_all()

    def route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        args = self.standin.args
        # 0.5.9 utils/auth.py's middleware, there where a key is set (http_server.py:1939-1950).
        if args.get("api_key") or args.get("admin_api_key"):
            allowed, status = auth.decide(method, path, self.headers.get("Authorization"), args.get("api_key"),
                                          args.get("admin_api_key"),
                                          auth.level_of(self.standin.auth_routes, method, path))
            if not allowed:
                self.outside_cors = True
                return self.reply(status, {"error": "Unauthorized" if status == 401 else "Forbidden"})
        http = self.standin.engine.http
        if http is not None:  # inside the API-key middleware, as 0.5.9 adds them
            labels = {"endpoint": path, "method": method}
            http.requests.inc(labels)
            http.active.inc(labels)
        self.status = 500
        try:
            self.dispatch(path, method)
        finally:
            if http is not None:
                http.responses.inc({**labels, "status_code": str(self.status)})
                http.active.inc(labels, -1)

    def dispatch(self, path: str, method: str) -> None:
        routes = {"GET": self.GET_ROUTES, "POST": self.POST_ROUTES, "PUT": self.PUT_ROUTES}.get(method, set())
        if path == "/metrics" and self.standin.registry is None:
            return self.reply(404, {"detail": "Not Found"})
        if path.startswith(MODEL_PREFIX) and len(path) > len(MODEL_PREFIX):  # the {model:path} route
            if method != "GET":
                return self.reply(405, {"detail": "Method Not Allowed"}, {"Allow": "GET"})
            return self.route_v1_model(urllib.parse.unquote(path[len(MODEL_PREFIX):]))
        if path not in routes:  # starlette/routing.py: Router.not_found, Route.handle
            allowed = [name for name, paths in (("GET", self.GET_ROUTES), ("POST", self.POST_ROUTES),
                                                ("PUT", self.PUT_ROUTES)) if path in paths]
            if not allowed:
                return self.reply(404, {"detail": "Not Found"})
            return self.reply(405, {"detail": "Method Not Allowed"},
                              {"Allow": ", ".join(allowed)})
        handler = getattr(self, "route_" + path.strip("/").replace("/", "_"))  # PUT /generate is POST's
        try:
            handler()
        except (TypeError, ValueError) as error:  # a malformed request body
            self.reply(400, {"error": {"message": str(error)}})

    # -- endpoints ----------------------------------------------------------

    def route_health(self):
        """http_server.py:463-540."""
        standin = self.standin
        if standin.gracefully_exit:
            logger.info("Health check request received during shutdown. Returning 503.")
            return self.reply(503, None)
        if standin.server_status == "Starting":
            return self.reply(503, None)
        if (os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower()
                in ("0", "false", "no", "n", "off") and self.path.split("?")[0] == "/health"):
            return self.reply(200, None)
        engine = standin.engine
        # greedy: {"max_new_tokens": 1, "temperature": 0.0} (http_server.py:487)
        check = Req(f"HEALTH_CHECK_{time.time()}", 1, 1, log_metrics=False, sampled=False)

        def gen():  # an ordinary request: it waits behind a weight update (standin_weights)
            with standin.model_update.reading():
                engine.submit(check)
                check.outputs.get()
                engine.answered(check)

        tic = time.time()
        threading.Thread(target=gen, daemon=True).start()
        try:
            while time.time() < tic + HEALTH_CHECK_TIMEOUT:
                time.sleep(HEALTH_POLL_S)
                if engine.last_receive_tstamp > tic:
                    standin.server_status = "Up"
                    return self.reply(200, None)
        finally:
            engine.answered(check)  # rid_to_state.pop(rid, None)
        logger.error("Health check failed. Server couldn't get a response from detokenizer for "
                     f"last {HEALTH_CHECK_TIMEOUT} seconds.")
        standin.server_status = "UnHealthy"
        self.reply(503, None)

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
        # 0.5.9: asdict(server_args) + scheduler info + internal states + version; the keys in
        # plain text at the top and in each state (vars of the scheduler's ServerArgs), or redacted.
        args, engine = self.standin.args, self.standin.engine
        shown = secrets.redacted if self.standin.redacts_server_info else dict
        state = {**args, "last_gen_throughput": engine.last_gen_throughput,  # scheduler.py:2650-2674
                 "memory_usage": {"token_capacity": engine.stats["max_total_num_tokens"]},
                 "effective_max_running_requests_per_dp": engine.max_running}
        if engine.spec and engine.spec_total_num_forward_ct > 0:
            state["avg_spec_accept_length"] = (engine.spec_total_num_accepted_tokens
                                               / engine.spec_total_num_forward_ct)
        self.reply(200, {**shown(args), "max_total_num_tokens": engine.stats["max_total_num_tokens"],
                         "max_req_input_len": args.get("context_length") or 0,
                         "internal_states": [shown(state)], "version": self.standin.version})

    route_get_server_info = route_server_info

    def route_flush_cache(self):
        """http_server.py:710-719: the stand-in keeps no radix cache; the answer is sglang's, as text."""
        self.status = 200
        body = (b"Cache flushed.\nPlease check backend logs for more details. "
                b"(When there are running or waiting requests, the operation will not be performed.)\n")
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def route_metrics(self):
        body = self.standin.registry.render().encode()
        self.status = 200
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def model_card(self, name: str) -> dict:
        """protocol.py's ModelCard, as FastAPI dumps it: ``parent`` null for the served model, and
        ``max_model_len`` the model's context length (``model_config.context_len``, 0.5.9
        http_server.py:1433, 0.5.14 :1725): ``--context-length``, else the model config's."""
        return {"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                "root": name, "parent": None, "max_model_len": self.served().context_length()}

    def route_v1_models(self):
        """http_server.py (0.5.9 and 0.5.14): ``ModelList`` of the served model's card."""
        self.reply(200, {"object": "list", "data": [self.model_card(self.standin.served_model_name)]})

    def route_v1_model(self, model: str):
        """``GET /v1/models/{model:path}`` (0.5.9 http_server.py:1453-1473, 0.5.14 :1745-1767): the
        served model's card, else an OpenAI-style 404."""
        if model != self.standin.served_model_name:
            return self.reply(404, {"error": {"message": f"The model '{model}' does not exist",
                                              "type": "invalid_request_error", "param": "model",
                                              "code": "model_not_found"}})
        self.reply(200, self.model_card(model))

    def route_generate(self):
        with self.standin.model_update.reading():  # tokenizer_manager.py:513, until the last byte
            self.generate()

    def generate(self):
        body = self.body()
        if body is None:
            return
        self.standin.first_request.set()  # generate_request -> auto_create_handle_loop
        prompt = body.get("text", body.get("input_ids"))
        sampling = body.get("sampling_params") or {}
        stream = bool(body.get("stream"))
        batch = isinstance(prompt, list) and prompt and isinstance(prompt[0], str)
        reqs = ([Req.make(p, sampling) for p in prompt] if batch
                else [Req.make(prompt, sampling, stream=stream, rid=body.get("rid"))])
        engine = self.standin.engine
        engine.submit(*reqs)
        try:
            if stream and not batch:
                return self.stream(reqs[0])
            outs = [self.wait(req) for req in reqs]
            if None not in outs:
                self.reply(200, outs if batch else outs[0])
        finally:
            for req in reqs:
                engine.answered(req)

    def served(self) -> openai.Served:
        """What the OpenAI answers need; the chat template is read at the first one."""
        standin = self.standin
        if getattr(standin, "openai_served", None) is None:
            args = standin.args
            template = ChatTemplate.load(args.get("tokenizer_path") or args.get("model_path"))
            site = os.path.dirname(os.path.dirname(openai.__file__))
            try:
                from standin_server_args import find_sglang
                site = str(find_sglang())
            except Exception:
                pass
            standin.openai_served = openai.Served(args, standin.config, template, site, standin.version,
                                                  standin.weights.vocabulary)
        return standin.openai_served

    def route_v1_completions(self):
        """``/v1/completions`` (http_server.py:1343-1348, serving_completions.py)."""
        with self.standin.model_update.reading():
            self.openai(openai.completion_plan, openai.prepare_completion)

    def route_v1_chat_completions(self):
        """``/v1/chat/completions`` (http_server.py:1351-1358, serving_chat.py)."""
        with self.standin.model_update.reading():
            self.openai(openai.chat_plan, openai.prepare_chat)

    def route_update_weights_from_disk(self):
        """``POST /update_weights_from_disk`` (http_server.py:914-935): ``standin_weights.answer_update``."""
        body = self.body()
        if body is not None:
            self.reply(*standin_weights.answer_update(self.standin, body))

    def openai(self, read, prepare) -> None:
        """``OpenAIServingBase.handle_request`` (serving_base.py:73-134), then the engine."""
        plan = None
        if (refused := self.admitted_pd()) is not None:  # a PD role's bootstrap fields (standin_disagg)
            status, payload = refused
            kind = "BadRequestError" if status == 400 else "InternalServerError"
            return self.reply(status, openai.OpenAIError(payload["error"]["message"], kind, status).body())
        try:
            plan = read(self.raw_body, self.headers.get("Content-Type"), self.served())
            prepare(plan)
        except openai.OpenAIError as error:
            if plan is not None and plan.generating:  # refused by generate_request itself
                self.standin.first_request.set()
            return self.reply(error.status, error.body())
        except openai.ServerError:  # Starlette's ServerErrorMiddleware
            return self.reply_text(500, "Internal Server Error")
        except Exception as error:  # serving_base.py:127-133
            logger.exception(f"Error in request: {error}")
            failed = openai.OpenAIError(f"Internal server error: {error}", "InternalServerError", 500)
            return self.reply(500, failed.body())
        self.standin.first_request.set()  # generate_request -> auto_create_handle_loop
        if plan.req is None:  # refused inside generate_request, the stream's headers already out
            return self.event_stream([plan.stream_error.stream_event(), "data: [DONE]\n\n"])
        req, engine = plan.req, self.standin.engine
        engine.submit(req)
        try:
            if plan.fields["stream"]:
                return self.openai_stream(plan.stream(), req)
            out = self.wait(req)
            if out is not None:
                self.reply(200, plan.response(out))
        finally:
            engine.answered(req)

    def openai_stream(self, stream, req: Req) -> None:
        """Each engine output as it comes, as chunks; the finish and usage chunks; ``[DONE]``."""
        def events():
            while True:
                out = req.outputs.get()
                if not req.response_sent_to_client_ts:
                    req.response_sent_to_client_ts = time.time()
                    out["meta_info"]["response_sent_to_client_ts"] = req.response_sent_to_client_ts
                for chunk in stream.events(out):
                    yield f"data: {openai.dumps(chunk)}\n\n"
                if out["meta_info"]["finish_reason"] is not None:
                    break
            for chunk in stream.end():
                yield f"data: {openai.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        if not self.event_stream(events()):
            # create_abort_task (tokenizer_manager.py:1428-1440): abort 2 s later if still running.
            threading.Timer(2, self.standin.engine.abort, (req,)).start()

    def event_stream(self, events) -> bool:
        """Starlette's StreamingResponse under uvicorn: ``text/event-stream``, chunked, so the
        connection stays usable after it; False when the client went away."""
        self.status = 200
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                data = event.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return True
        except OSError:
            self.close_connection = True
            return False

    # -- waiting for the engine ----------------------------------------------

    def disconnected(self) -> bool:
        """Starlette's ``request.is_disconnected()``: the client closed its end."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def wait(self, req: Req) -> dict | None:
        """``_wait_one_response`` for a non-streaming request: its final output, or None."""
        while True:
            try:
                out = req.outputs.get(timeout=REQUEST_STATE_WAIT_TIMEOUT)
            except queue.Empty:  # look for a disconnect, type 1
                if self.disconnected():
                    self.standin.engine.abort(req)
                    self.close_connection = True
                    return None
                continue
            if req.finished and out["meta_info"]["finish_reason"] is not None:
                if not req.response_sent_to_client_ts:  # tokenizer_manager.py:1134-1138
                    req.response_sent_to_client_ts = time.time()
                    out["meta_info"]["response_sent_to_client_ts"] = req.response_sent_to_client_ts
                return out
            if self.disconnected():  # type 3
                self.standin.engine.abort(req)
                self.close_connection = True
                return None

    def stream(self, req: Req) -> None:
        """Server-sent events, one per output, then ``[DONE]`` (a ``StreamingResponse``, 0.5.9
        http_server.py:650-676, 0.5.14 :769-805: chunked, the connection kept); a dropped client aborts."""
        def events():
            while True:
                out = req.outputs.get()
                if not req.response_sent_to_client_ts:
                    req.response_sent_to_client_ts = time.time()
                    out["meta_info"]["response_sent_to_client_ts"] = req.response_sent_to_client_ts
                yield f"data: {openai.dumps(out)}\n\n"  # orjson.dumps: compact
                if out["meta_info"]["finish_reason"] is not None:
                    break
            yield "data: [DONE]\n\n"

        if not self.event_stream(events()):
            # create_abort_task (tokenizer_manager.py:1428-1440): abort 2 s later if still running.
            threading.Timer(2, self.standin.engine.abort, (req,)).start()

    # -- plumbing -----------------------------------------------------------

    def read_body(self) -> bytes:
        """The request's whole body, read before any reply so the connection stays in step."""
        length = self.headers.get("Content-Length")
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self.read_chunked()
        if length is None:
            return b""
        try:
            return self.rfile.read(int(length))
        except ValueError:  # a Content-Length that is no number: where the body ends is unknown
            self.close_connection = True
            return b""

    def read_chunked(self) -> bytes:
        """A chunked request body (uvicorn reads those too), its trailers dropped."""
        data = b""
        try:
            while True:
                size = int(self.rfile.readline(65537).split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline(65537)  # the CRLF after the chunk
        except ValueError:  # not chunked after all: where the body ends is unknown
            self.close_connection = True
            return data

    def body(self) -> dict | None:
        try:
            data = json.loads(self.raw_body or b"{}")
            if not isinstance(data, dict):
                raise ValueError("expected a JSON object")
        except ValueError as error:
            self.reply(422, {"detail": [{"type": "json_invalid", "msg": str(error)}]})
            return None
        disagg = getattr(self.standin, "disagg", None)
        refused = disagg.admit(data) if disagg else None  # a PD role's bootstrap fields (standin_disagg)
        if refused:
            self.reply(*refused)
            return None
        return data

    def admitted_pd(self):
        """A PD role's refusal of an OpenAI request ``(status, payload)``, else None (its body as the role has it)."""
        disagg = getattr(self.standin, "disagg", None)
        try:
            data = json.loads(self.raw_body or b"{}") if disagg else None
        except ValueError:
            return None  # not JSON: the OpenAI reader says so
        if not isinstance(data, dict):
            return None
        refused = disagg.admit(data)
        if refused is None:
            self.raw_body = json.dumps(data).encode()
        return refused

    def reply_text(self, status: int, text: str) -> None:
        self.outside_cors = True  # Starlette's ServerErrorMiddleware, outermost
        self.status = status
        body = text.encode()
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply(self, status: int, payload, headers: dict | None = None) -> None:
        """A JSON answer, compact as ORJSONResponse and Starlette's JSONResponse write it."""
        self.status = status
        body = b"" if payload is None else openai.dumps(payload).encode()
        self.send_response(status, HTTPStatus(status).phrase)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if payload is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    tls: ssl.SSLContext | None = None

    def finish_request(self, request, client_address):
        # The handshake in the connection's own thread (standin_tls): a plain-HTTP client is dropped alone.
        if self.tls is not None:
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return  # uvicorn drops it too ("Invalid HTTP request received." at debug level)
        super().finish_request(request, client_address)


def serve(standin: Standin, host: str, port: int) -> Server:
    """Bind and serve in a thread (TLS with ``--ssl-certfile``); raises OSError when the address cannot be bound."""
    handler = type("BoundHandler", (Handler,), {"standin": standin})
    Server.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = Server((host, port), handler)
    server.tls = server_context(standin.args)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
