"""
Bounded client traffic through a gateway or router, shaped like the clients of a
Kimi K2.5 fleet: the official ``openai`` SDK streaming chat completions (some with
long outputs) and asking for plain completions, sglang's native ``/generate``, and
now and then a route the server does not have, from a few threads at once, at a
steady rate, until stopped or a limit. Each request's outcome is kept and reported
by kind: sent, answered in full, streams cut before ``data: [DONE]``, errors by status.

The demo runs it through the fleet's gateway while it rolls a change out; the tests
measure a rollout, a failed canary or a gateway's restart with it.

**Example:**

.. code:: python

    traffic = Traffic("http://10.213.47.14:30080", api_key=os.environ.get("SGLFLEET_API_KEY"))
    ...  # a rollout
    traffic.stop()
    print(traffic.summary())  # "412 requests through http://10.213.47.14:30080 in 61.0 s: 412 as expected" + a line a kind
"""

from __future__ import annotations

import collections
import itertools
import ssl
import threading
import time
from dataclasses import dataclass

import httpx

MAX_REQUESTS = 4000   # the traffic stops by itself at whichever limit comes first
MAX_SECONDS = 240
REQUEST_TIMEOUT_S = 60

# What clients send, in the order each thread cycles through it (each thread starts one further
# on): mostly the OpenAI API, as people reach a Kimi K2.5 fleet, half of it streamed chats, one
# of them with a long output; native /generate; a route no server has.
CLIENT_MIX = ("chat", "completion", "chat", "generate", "chat", "long_chat", "chat", "unknown_route",
              "chat", "completion", "chat", "generate")
GENERATE_ONLY = ("generate",)
KINDS = {  # kind -> how the report names it
    "chat": "chat completions (openai SDK, streamed)",
    "long_chat": "chat completions, long outputs (streamed)",
    "completion": "completions (openai SDK)",
    "generate": "native /generate",
    "unknown_route": "a route no server has (404 expected)",
}


@dataclass
class Request:
    """One request's outcome: ``ok`` when answered in full (the unknown route: with FastAPI's 404)."""

    kind: str
    sent: float                 # time.time() when sent
    status: int | None = None   # the HTTP status, None when no answer came
    complete: bool = False      # a stream ended with its finish chunk and [DONE]; a body was whole
    error: str | None = None    # what went wrong: a cut stream, a refused connection, ...

    @property
    def ok(self) -> bool:
        if self.kind == "unknown_route":
            return self.status == 404
        return self.status == 200 and self.complete

    @property
    def outcome(self):
        """200 for a request answered as expected, else its status or what went wrong."""
        if self.ok:
            return 200
        if self.status == 200:
            return self.error or "incomplete answer"
        return self.status if self.status is not None else self.error


class _DoneWatch(httpx.HTTPTransport):
    """httpx's transport, noting per thread whether a response's bytes carried ``data: [DONE]``.

    The SDK ends a stream quietly both at ``[DONE]`` and where the connection closed
    early (``openai/_streaming.py``: ``if sse.data.startswith("[DONE]"): break``), so
    a cut stream shows only in the bytes.
    """

    def __init__(self, seen: threading.local, **kwargs):
        super().__init__(**kwargs)
        self.seen = seen

    def handle_request(self, request):
        response = super().handle_request(request)
        self.seen.done = False
        stream, seen = response.stream, self.seen

        class Watched(httpx.SyncByteStream):
            def __iter__(self):
                tail = b""
                for chunk in stream:
                    if b"data: [DONE]" in tail + chunk:
                        seen.done = True
                    tail = chunk[-16:]
                    yield chunk

            def close(self):
                stream.close()

        response.stream = Watched()
        return response


class Traffic:
    """
    Client requests through ``url`` from ``threads`` threads, at most ``rate`` a second,
    until ``stop()`` or a limit (``max_requests``, ``max_seconds``).

    + url: the gateway's (or router's, or one server's) base URL
    + api_key: sent as a bearer token when given (the fleet's ``SGLFLEET_API_KEY``)
    + mix: the kinds each thread cycles through (``CLIENT_MIX``, or ``GENERATE_ONLY``)
    + threads, rate, max_new_tokens, long_tokens: the traffic's shape
    + model: the served model name; None asks ``/v1/models`` once

    ``requests`` holds each request's ``Request``; ``outcomes`` and ``sent`` the
    same as ``outcome`` and ``(sent, outcome)``.
    """

    def __init__(self, url: str, api_key: str | None = None, threads: int = 4, max_new_tokens: int = 8,
                 rate: float = 15.0, max_requests: int = MAX_REQUESTS, max_seconds: float = MAX_SECONDS,
                 mix: tuple[str, ...] = CLIENT_MIX, long_tokens: int = 1024, model: str | None = None,
                 ca: str | None = None):
        unknown = set(mix) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown traffic kinds {sorted(unknown)}; the kinds are {', '.join(KINDS)}")
        self.url, self.api_key, self.mix = url, api_key, mix
        # An https gateway is verified with the fleet CA's certificate (docs/tls.md); never unverified.
        self.verify = ssl.create_default_context(cafile=ca) if ca else True
        self.max_new_tokens, self.long_tokens, self.model = max_new_tokens, long_tokens, model
        self.requests: list[Request] = []
        self.done = threading.Event()
        self.pause, self.max_requests, self.max_seconds = threads / rate, max_requests, max_seconds
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.openai = None
        if set(mix) & {"chat", "long_chat", "completion"}:
            import openai  # a test and demo dependency, not a runtime one; imported before the clock starts

            self.openai = openai
        self.started = time.monotonic()
        self.threads = [threading.Thread(target=self._send, args=(number,), daemon=True)
                        for number in range(threads)]
        for thread in self.threads:
            thread.start()

    # -- the clients ------------------------------------------------------------

    def _send(self, number: int) -> None:
        seen = threading.local()
        http = httpx.Client(base_url=self.url, headers=self.headers, timeout=REQUEST_TIMEOUT_S,
                            transport=_DoneWatch(seen, verify=self.verify))
        sdk = None
        if self.openai is not None:
            # No retries: a retried request would hide the failure this traffic exists to count.
            sdk = self.openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.api_key or "none",
                                     http_client=http, max_retries=0)
        kinds = itertools.islice(itertools.cycle(self.mix), number, None)  # threads start apart in the mix
        with http:
            while not self.done.is_set() and len(self.requests) < self.max_requests \
                    and time.monotonic() - self.started < self.max_seconds:
                request = Request(next(kinds), time.time())
                try:
                    getattr(self, "_" + request.kind)(request, http, sdk, seen)
                except httpx.HTTPError as error:
                    request.error = _described(error)
                except Exception as error:  # the SDK's own errors
                    request.status = getattr(error, "status_code", request.status)
                    request.error = request.error or _described(error)
                self.requests.append(request)
                self.done.wait(self.pause)  # a steady rate, so traffic lasts through a whole rollout

    def _served_model(self, http: httpx.Client) -> str:
        if self.model is None:
            try:
                self.model = http.get("/v1/models").json()["data"][0]["id"]
            except (httpx.HTTPError, ValueError, KeyError, IndexError):
                return "default"  # asked again by the next request
        return self.model

    def _chat(self, request: Request, http, sdk, seen, long: bool = False) -> None:
        stream = sdk.chat.completions.create(
            model=self._served_model(http), stream=True, stream_options={"include_usage": True},
            max_tokens=self.long_tokens if long else self.max_new_tokens,
            # sglang's own extension: past the end of the turn, so a long output is as long as asked
            extra_body={"ignore_eos": True} if long else None,
            messages=[{"role": "user", "content": "Say hello to the fleet."}])
        request.status = stream.response.status_code
        finished = usage = False
        chunks = 0
        try:
            for chunk in stream:
                chunks += 1
                finished = finished or any(choice.finish_reason for choice in chunk.choices)
                usage = usage or chunk.usage is not None
        except Exception as error:  # the connection broke mid-stream (the SDK's APIConnectionError)
            request.error = f"stream cut after {chunks} chunks: {_described(error)}"
            return
        request.complete = finished and usage and seen.done
        if not request.complete:
            missing = [name for name, there in (("finish chunk", finished), ("usage", usage),
                                                ("[DONE]", seen.done)) if not there]
            request.error = f"stream cut after {chunks} chunks: no {', no '.join(missing)}"

    def _long_chat(self, request: Request, http, sdk, seen) -> None:
        self._chat(request, http, sdk, seen, long=True)

    def _completion(self, request: Request, http, sdk, seen) -> None:
        raw = sdk.completions.with_raw_response.create(model=self._served_model(http), prompt="Hello",
                                                      max_tokens=self.max_new_tokens)
        request.status = raw.status_code
        completion = raw.parse()
        request.complete = bool(completion.choices) and completion.choices[0].finish_reason is not None
        if not request.complete:
            request.error = "completion without a finish_reason"

    def _generate(self, request: Request, http, sdk, seen) -> None:
        response = http.post("/generate", json={"text": "Hello",
                                                "sampling_params": {"max_new_tokens": self.max_new_tokens}})
        request.status = response.status_code
        if response.status_code == 200:
            request.complete = response.json().get("meta_info", {}).get("finish_reason") is not None
            request.error = None if request.complete else "generation without a finish_reason"

    def _unknown_route(self, request: Request, http, sdk, seen) -> None:
        # With a body, on the thread's keep-alive connection: a server that leaves the body
        # unread would take it for the next request's start.
        response = http.post("/v1/no-such-route", json={"model": "x", "prompt": "x" * 512})
        request.status = response.status_code

    # -- the report -------------------------------------------------------------

    @property
    def outcomes(self) -> list:
        return [request.outcome for request in self.requests]

    @property
    def sent(self) -> list[tuple[float, object]]:
        return [(request.sent, request.outcome) for request in self.requests]

    def stop(self) -> list:
        """Stop sending; wait for the answers under way; return the outcomes."""
        self.done.set()
        for thread in self.threads:
            thread.join(timeout=REQUEST_TIMEOUT_S + 10)
        self.elapsed = time.monotonic() - self.started
        return self.outcomes

    def failed(self) -> list[Request]:
        """The requests not answered as expected."""
        return [request for request in self.requests if not request.ok]

    def cut(self) -> list[Request]:
        """The streams that ended before their finish chunk and ``[DONE]``."""
        return [request for request in self.requests if request.status == 200 and not request.ok]

    def by_kind(self) -> dict[str, dict]:
        """Per kind: ``sent``, ``full`` (answered in full), ``cut`` (streams), ``errors`` (Counter by status)."""
        report = {}
        for kind in dict.fromkeys(self.mix):
            mine = [request for request in self.requests if request.kind == kind]
            report[kind] = {
                "sent": len(mine), "full": sum(request.ok for request in mine),
                "cut": sum(request.status == 200 and not request.ok for request in mine),
                "errors": collections.Counter(str(request.outcome) for request in mine
                                              if not request.ok and request.status != 200)}
        return report

    def summary(self) -> str:
        """A line for all, then one a kind: sent, answered in full, cut, errors by status."""
        elapsed = getattr(self, "elapsed", time.monotonic() - self.started)
        bad = self.failed()
        lines = [f"{len(self.requests)} requests through {self.url} in {elapsed:.1f} s: "
                 f"{len(self.requests) - len(bad)} as expected"
                 + (f", {len(bad)} not" if bad else "")]
        for kind, counts in self.by_kind().items():
            errors = ", ".join(f"{count} {outcome}" for outcome, count in counts["errors"].most_common())
            lines.append(f"    {KINDS[kind]}: {counts['sent']} sent, {counts['full']} answered in full, "
                         f"{counts['cut']} cut, {'errors: ' + errors if errors else 'no error'}")
        return "\n".join(lines)


def _described(error: Exception) -> str:
    """An error as the report shows it: its type and the first line of its cause."""
    cause = error.__cause__ or error.__context__
    text = f"{type(error).__name__}: {error}"
    if cause is not None and str(cause) not in text:
        text += f" ({type(cause).__name__}: {cause})"
    return text.splitlines()[0][:200]
