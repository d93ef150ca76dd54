"""
The OpenAI surface of the stand-in, as sglang 0.5.9's ``srt/entrypoints/openai/`` serves it:
the requests read, the answers and stream chunks built, the errors. Pure: a function of the
request body and the server's arguments; ``standin_http`` moves the bytes and the engine makes
the tokens. Every chunk and answer is built here (``chat_chunk``, ``ChatStream``, ...), so a
test can hold them to a record of the real server.

**Requests** (``protocol.py:236-308`` ``CompletionRequest``, ``529-785`` ``ChatCompletionRequest``,
read by ``standin_protocol``): ``Content-Type`` must be ``application/json``
(``http_server.py:445-456``); a body that is no JSON, a missing or mistyped field is FastAPI's
``RequestValidationError``, which 0.5.9 answers **400**, not 422 (``http_server.py:409-442``):
``{"object":"error","message":...,"type":"Bad Request","param":null,"code":400}``, the message
FastAPI's. A chat body that is a JSON array is a plain-text 500 (0.5.9's validator fails).
Then ``_validate_request`` (``serving_chat.py:192-238``, ``serving_completions.py:54-60``):
400 ``BadRequestError``. A template error: 400 ``BadRequest`` (``serving_base.py:114-119``).

**The model name is not checked** (0.5.9 ``_resolve_lora_path``, ``serving_base.py:40-71``:
only ``base:adapter`` names an adapter): any ``model`` is served and echoed in the answer;
``default`` when absent (``protocol.py:50``).

**Too long** (``tokenizer_manager.py:751-800``, raised inside ``generate_request``): input
tokens ``>=`` the context length, or input + ``max_new_tokens`` ``>=`` it. Not streamed: 400
``BadRequestError`` (``serving_chat.py:874-878``, ``serving_completions.py:375-382``). Streamed,
the headers are already out: 200, one ``data: {"error": {...}}`` event, then ``data: [DONE]``
(``serving_chat.py:859-863``, ``serving_completions.py:362-366``); from 0.5.10 the same 400 as
unstreamed, before any stream (``Served.refuses_before_stream``). The context length is
``--context-length``, else the model config's (``max_position_embeddings`` and its kin), else
2048, transformers' LlamaConfig default (Kimi K2.5's 262144 when the model is not staged).

**Answers and chunks** (pydantic's ``model_dump_json``: compact, ``None`` as ``null``, keys in
field order): ``chat.completion`` (``protocol.py:787-830``, ``serving_chat.py:890-998``) with
``usage`` (``UsageInfo``, 131-137: ``reasoning_tokens`` 0, as 0.5.9 reports it, or from 0.5.10 the
reasoning's tokens, its end token included (``standin_engine``); ``prompt_tokens_details`` null
without ``--enable-cache-report``) and ``metadata.weight_version``, its message's ``content`` null
where it has no text (0.5.9; from 0.5.13 ``""``, ``Served.empty_content``); a chat stream
(``serving_chat.py:603-863``): for each engine output, a first chunk ``delta`` ``{role:
"assistant", content: ""}``, then the new text as ``delta.content`` (incremental: the output's
text past what was sent); after the last, a chunk with an empty delta and ``finish_reason``
(``stop`` becomes ``tool_calls`` where calls were parsed), a ``usage`` chunk with ``choices: []``
where ``stream_options.include_usage``, then ``data: [DONE]``. ``created`` is taken per chunk.
From 0.5.13 the role, text and finish chunks are sse_utils' (``sse_chunk``), null fields left out.
``text_completion`` (``protocol.py:328-393``, ``serving_completions.py:184-486``): each chunk
carries its ``finish_reason``; ``created`` is taken once; the usage chunk drops its ``null``
keys (``exclude_none``, ``serving_completions.py:355``). ``id`` is the request's rid (a uuid4 hex, 0.5.9
``_generate_request_id_base`` returns None, ``serving_base.py:140-149``).

**What the stand-in's model says** (``Script``; a word is a token, as everywhere in the stand-in):
completions continue the prompt with words up to ``max_tokens`` (16 by default), ``length``
(a plain model never reaches its EOS here). A chat answer is a finished turn: with a reasoning
parser (and thinking not turned off), a reasoning part closed by the parser's end token; 24
words (6 with tools); with ``tools`` and ``tool_choice`` not ``none``, one call of the first
offered tool (or the named one) in the Kimi K2 tool-call format, its arguments made from its
schema; then the EOS token, so ``finish_reason`` ``stop`` (``matched``: the config's
``eos_token_id``). ``max_tokens`` / ``max_completion_tokens`` cut it (``length``);
``ignore_eos`` carries on with words up to them. A ``stop`` string ends it at the token whose
text completes it: ``stop`` with ``matched`` the string, the text cut before it.
``n`` must be 1 and a completion's ``prompt`` one prompt: the stand-in serves one choice.

**Example:**

.. code:: python

    plan = chat_plan(body, headers, served)   # raises OpenAIError for a 4xx
    ...  # the engine runs plan.req
    plan.stream.events(out) / plan.response(out)
"""

from __future__ import annotations

import json
import re
import time
import uuid

from standin_engine import SAMPLING_EPS, WORDS, Req
from standin_model import release_tuple
from standin_parsers import FunctionCallParser, ReasoningParser
from standin_protocol import CHAT, COMPLETION, Refused, read_json, validate

DEFAULT_MODEL_NAME = "default"  # protocol.py:50
ANSWER_TOKENS, ANSWER_TOKENS_WITH_TOOLS = 24, 6
REASONING = (" The", " user", " asks", " something;", " a", " short", " answer", " will", " do.")
DEFAULT_CONTEXT_LENGTH = 2048  # transformers' LlamaConfig.max_position_embeddings; sglang's fallback
KIMI_K25_CONTEXT_LENGTH = 262144  # moonshotai/Kimi-K2.5 text_config.max_position_embeddings
CONTEXT_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                "max_position_embeddings")  # srt/configs/model_config.py get_context_length
KIMI_K25_EOS_TOKEN_ID = 163586  # moonshotai/Kimi-K2.5's <|im_end|>
SPECIAL_OR_WORD = re.compile(r"<\|[^|]*\|>|</?think>|[^\s<]+|<")


def dumps(value) -> str:
    """pydantic's ``model_dump_json``: compact, unicode as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class ServerError(Exception):
    """An exception FastAPI does not handle: Starlette's plain-text 500 (ServerErrorMiddleware)."""


class OpenAIError(Exception):
    """An answer 0.5.9 gives as ``ErrorResponse`` (``serving_base.py:210-226``)."""

    def __init__(self, message: str, err_type: str = "BadRequestError", status: int = 400):
        super().__init__(message)
        self.message, self.err_type, self.status = message, err_type, status

    def body(self) -> dict:
        return {"object": "error", "message": self.message, "type": self.err_type, "param": None,
                "code": self.status}

    def stream_event(self) -> str:
        """``create_streaming_error_response`` (``serving_base.py:228-242``): ``json.dumps``, spaced."""
        return "data: " + json.dumps({"error": self.body()}) + "\n\n"


# -- the request's fields ----------------------------------------------------------------------

def refused(exc: Refused) -> OpenAIError:
    """FastAPI's refusal as 0.5.9 answers it: 400 ``Bad Request`` (http_server.py:409-442)."""
    return OpenAIError(exc.message(), "Bad Request")


def common_fields(values: dict) -> dict:
    """What both requests carry that the stand-in acts on."""
    options = values["stream_options"] or {}
    return {"model": values["model"], "n": values["n"], "stream": values["stream"],
            "temperature": values["temperature"], "top_p": values["top_p"],
            "ignore_eos": values["ignore_eos"], "stop": values["stop"] or [], "rid": values["rid"],
            "include_usage": bool(options.get("include_usage")),
            "continuous_usage_stats": bool(options.get("continuous_usage_stats"))}


def sampling_checks(fields: dict, max_new_tokens: int | None) -> None:
    """``SamplingParams.verify`` (srt/sampling/sampling_params.py), raised in generate_request."""
    temperature, top_p = fields["temperature"], fields["top_p"]
    if temperature is not None and temperature < 0.0:
        raise OpenAIError(f"temperature must be non-negative, got {temperature}.")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise OpenAIError(f"top_p must be in (0, 1], got {top_p}.")
    if max_new_tokens is not None and max_new_tokens < 0:
        raise OpenAIError(f"max_new_tokens must be at least 0, got {max_new_tokens}.")


# -- the served model ------------------------------------------------------------------------

class Served:
    """What the answers need of the server: its arguments, its model's config and template, its release."""

    def __init__(self, args: dict, config: dict, template, site: str, version: str = "0.5.9",
                 vocabulary: tuple = WORDS):
        self.args, self.config, self.template, self.site = args, config, template, site
        self.vocabulary = vocabulary  # the words its weights say (standin_weights)
        release = release_tuple(version)
        # 0.5.10 runs a stream's generator up to its first chunk before the 200: a refusal of
        # generate_request is a 400 JSON, not an SSE event (0.5.14 serving_chat.py:949-955,
        # serving_completions.py:196-200; 0.5.9 streams it, serving_chat.py:859-863).
        self.refuses_before_stream = release >= (0, 5, 10)
        # 0.5.13 writes a chat stream's role, text and finish chunks with sse_utils (``sse_chunk``).
        self.sse_chunks = release >= (0, 5, 13)
        # 0.5.13 answers a message without text (all of it thinking or tool calls) with ``content``
        # "", not null (0.5.12 serving_chat.py:1190 ``None``; 0.5.13 1290 and 0.5.14 1327 ``""``).
        self.empty_content = "" if release >= (0, 5, 13) else None

    def context_length(self) -> int:
        if self.args.get("context_length"):
            return int(self.args["context_length"])
        for config in (self.config, self.config.get("text_config") or {}):
            for key in CONTEXT_KEYS:
                if isinstance(config.get(key), int):
                    return config[key]
        if "KimiK25ForConditionalGeneration" in (self.config.get("architectures") or []):
            return KIMI_K25_CONTEXT_LENGTH
        return DEFAULT_CONTEXT_LENGTH

    def reserved_tokens(self) -> int:
        """tokenizer_manager.py:250-261: EAGLE keeps its draft tokens in the output slots."""
        if (self.args.get("speculative_algorithm") or "").upper() not in ("EAGLE", "EAGLE3"):
            return 0
        return max((self.args.get("speculative_eagle_topk") or 1) * (self.args.get("speculative_num_steps") or 0),
                   self.args.get("speculative_num_draft_tokens") or 0)

    def eos_token_id(self):
        eos = self.config.get("eos_token_id", (self.config.get("text_config") or {}).get("eos_token_id"))
        if eos is None and "KimiK25ForConditionalGeneration" in (self.config.get("architectures") or []):
            eos = KIMI_K25_EOS_TOKEN_ID
        return eos[0] if isinstance(eos, list) and eos else eos

    def check_length(self, input_tokens: int, max_new_tokens: int | None) -> None:
        """``_validate_one_request`` (tokenizer_manager.py:751-800), without auto-truncation."""
        context = self.context_length()
        count = input_tokens + self.reserved_tokens()
        if self.args.get("allow_auto_truncate"):
            return
        if count >= context:
            raise OpenAIError(f"The input ({count} tokens) is longer than the model's context "
                              f"length ({context} tokens).")
        if max_new_tokens is not None and max_new_tokens + count >= context:
            raise OpenAIError(
                f"Requested token count exceeds the model's maximum context length of {context} tokens. "
                f"You requested a total of {max_new_tokens + count} tokens: {count} tokens from the input "
                f"messages and {max_new_tokens} tokens for the completion. Please reduce the number of "
                f"tokens in the input messages or the completion to fit within the limit.")


# -- what the stand-in's model says ------------------------------------------------------------

def words(count: int, start: int = 0, vocabulary: tuple = WORDS) -> list[str]:
    return [" " + vocabulary[i % len(vocabulary)] for i in range(start, start + count)]


def tool_arguments(tool: dict) -> dict:
    """Arguments for one call: each property of the tool's schema, a value of its type."""
    samples = {"string": "stand-in", "integer": 1, "number": 1.5, "boolean": True, "array": [],
               "object": {}}
    parameters = (tool.get("function") or {}).get("parameters") or {}
    properties = parameters.get("properties") or {}
    return {name: samples.get((schema or {}).get("type"), None) for name, schema in properties.items()}


def kimi_tool_call(name: str, arguments: dict, index: int) -> list[str]:
    """One call in Kimi K2's format (``function_call/kimik2_detector.py``), token by token."""
    text = json.dumps(arguments, ensure_ascii=False)
    pieces = [text[i:i + 8] for i in range(0, len(text), 8)] or ["{}"]
    return ["<|tool_calls_section_begin|>", "<|tool_call_begin|>", f"functions.{name}:{index}",
            "<|tool_call_argument_begin|>", *pieces, "<|tool_call_end|>", "<|tool_calls_section_end|>"]


class Script:
    """The tokens one generation gives, where it ends, and why (the engine ``Req``'s script)."""

    def __init__(self, tokens: list[str], finish: dict, final_text: str | None = None):
        self.tokens, self.finish, self.final_text = tokens, finish, final_text
        self.think_end: str | None = None  # set where the request asks for reasoning

    @classmethod
    def cut(cls, said: list[str], limit: int | None, eos, stop: list[str]) -> Script:
        """``said`` then EOS (if ``eos`` is not False), cut by ``limit`` tokens and the stop strings."""
        tokens = list(said) + ([""] if eos is not False else [])
        finish = {"type": "stop", "matched": eos} if eos is not False else None
        if limit is not None and len(tokens) > limit:
            tokens, finish = tokens[:limit], {"type": "length", "length": limit}
        if finish is None:
            finish = {"type": "length", "length": len(tokens)}
        text = ""
        for i, token in enumerate(tokens):
            text += token
            hits = [(text.find(s), s) for s in stop if s and s in text]
            if hits:
                at, matched = min(hits)
                return cls(tokens[:i + 1], {"type": "stop", "matched": matched}, text[:at])
        return cls(tokens, finish)

    def req(self, rid: str | None, prompt_tokens: int, stream: bool, temperature: float | None) -> Req:
        sampled = not (temperature is not None and 0 <= temperature < SAMPLING_EPS)
        req = Req(rid or uuid.uuid4().hex, max(prompt_tokens, 1), len(self.tokens), stream,
                  sampled=sampled)
        req.tokens, req.finish, req.final_text = self.tokens, self.finish, self.final_text
        req.think_end = self.think_end
        return req


def thinking(parser: str | None, kwargs: dict | None) -> bool:
    """``_get_reasoning_from_request`` (serving_chat.py:1210-1232)."""
    if not parser:
        return False
    if parser == "deepseek-v3":
        return bool(kwargs) and kwargs.get("thinking") is True
    if parser == "kimi_k2":
        return not kwargs or kwargs.get("thinking") is not False
    if parser in ("qwen3", "glm45", "nano_v3", "interns1"):
        return not kwargs or kwargs.get("enable_thinking") is not False
    return True


# -- chat ----------------------------------------------------------------------------------------

class ChatPlan:
    """One chat completion: the request read, the engine request, and how to answer it."""

    def __init__(self, served: Served, fields: dict, messages: list, tools, tool_choice, kwargs,
                 separate_reasoning: bool, stream_reasoning: bool):
        self.served, self.fields, self.messages = served, fields, messages
        self.tools, self.tool_choice, self.kwargs = tools, tool_choice, kwargs
        self.separate_reasoning, self.stream_reasoning = separate_reasoning, stream_reasoning
        self.req: Req | None = None
        self.stream_error: OpenAIError | None = None
        self.generating = False  # generate_request was reached (its handle loop started)

    @property
    def parses_tools(self) -> bool:
        return bool(self.tool_choice != "none" and self.tools and self.served.args.get("tool_call_parser"))

    def reasoning_parser(self, stream: bool) -> ReasoningParser | None:
        parser = self.served.args.get("reasoning_parser")
        if not parser or not self.separate_reasoning:
            return None
        force = self.served.template.force_reasoning or thinking(parser, self.kwargs)
        return ReasoningParser(parser, self.stream_reasoning if stream else False, force)

    def script(self, prompt_tokens: int) -> Script:
        args, fields = self.served.args, self.fields
        said: list[str] = []
        parser = args.get("reasoning_parser")
        if thinking(parser, self.kwargs):
            start, end = ReasoningParser.tokens(parser)
            # kimi_k2's template opens the turn with <think>: the model writes only the rest
            forced = ReasoningParser(parser, True, True).detector.in_reasoning
            said += ([] if forced or not start else [start]) + list(REASONING) + [end]
        thought = list(said)
        offered = self.tools if self.tools and self.tool_choice != "none" else None
        said += words(ANSWER_TOKENS_WITH_TOOLS if offered else ANSWER_TOKENS, 0, self.served.vocabulary)
        if offered:
            tool = offered[0]
            if isinstance(self.tool_choice, dict):
                name = (self.tool_choice.get("function") or {}).get("name")
                tool = next(t for t in offered if t["function"]["name"] == name)
            if self.tool_choice == "required" or isinstance(self.tool_choice, dict):
                # constrained to a JSON array of calls (serving_chat.py:343-350): nothing else
                text = json.dumps([{"name": tool["function"]["name"], "parameters": tool_arguments(tool)}])
                said = thought + [text[i:i + 8] for i in range(0, len(text), 8)]
            else:
                # its position in this message, as 0.5.9 takes it (serving_chat.py:1063-1065)
                said += kimi_tool_call(tool["function"]["name"], tool_arguments(tool), 0)
        limit = fields["max_new_tokens"]
        if limit is None:  # scheduler: up to the context's end
            limit = self.served.context_length() - prompt_tokens - 1
        if fields["ignore_eos"]:
            said += words(max(limit - len(said), 0), len(said), self.served.vocabulary)
            script = Script.cut(said, limit, False, fields["stop"])
        else:
            script = Script.cut(said, limit, self.served.eos_token_id(), fields["stop"])
        if thinking(parser, self.kwargs):  # require_reasoning (serving_chat.py:552 in 0.5.14)
            script.think_end = ReasoningParser.tokens(parser)[1]
        return script

    def response(self, out: dict) -> dict:
        """``_build_chat_response`` (serving_chat.py:890-998)."""
        meta, text = out["meta_info"], out["text"]
        finish = dict(meta["finish_reason"]) if meta["finish_reason"] else None
        reasoning = None
        parser = self.reasoning_parser(stream=False)
        if parser is not None:
            reasoning, text = parser.parse_non_stream(text)
        calls = None
        if self.parses_tools:
            tools = FunctionCallParser(self.tools, self.served.args["tool_call_parser"], self.tool_choice)
            if tools.has_tool_call(text):
                if finish and finish["type"] == "stop":
                    finish.update(type="tool_calls", matched=None)
                text, calls = tools.parse_non_stream(text, self.history_tool_calls())
        choice = {"index": 0,
                  "message": {"role": "assistant", "content": text if text else self.served.empty_content,
                              "reasoning_content": reasoning if reasoning else None, "tool_calls": calls},
                  "logprobs": None, "finish_reason": finish["type"] if finish else None,
                  "matched_stop": finish.get("matched") if finish else None}
        return {"id": meta["id"], "object": "chat.completion", "created": int(time.time()),
                "model": self.fields["model"], "choices": [choice], "usage": usage(meta),
                "metadata": {"weight_version": meta["weight_version"]}}

    def history_tool_calls(self) -> int:
        """``_get_history_tool_calls_cnt`` (serving_chat.py:1190-1208): kimi_k2's call ids count on."""
        return sum(len(m.get("tool_calls") or []) for m in self.messages if m.get("role") == "assistant")

    def stream(self) -> ChatStream:
        return ChatStream(self)


def usage(meta: dict, exclude_none: bool = False) -> dict:
    """``UsageProcessor.calculate_token_usage`` (usage_processor.py), ``UsageInfo`` (protocol.py:131-137).
    ``reasoning_tokens``: 0.5.9 never sets it (0, the field's default; usage_processor.py:73-84); 0.5.10
    and later take the output's ``meta_info`` figure (0.5.14 usage_processor.py:34-37, serving_chat.py:1014-1016)."""
    prompt, completion = meta["prompt_tokens"], meta["completion_tokens"]
    info = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None, "reasoning_tokens": meta.get("reasoning_tokens", 0)}
    if exclude_none:
        del info["prompt_tokens_details"]
    return info


def chat_chunk(rid: str, model: str, delta: dict | None = None, finish: dict | None = None,
               usage_info: dict | None = None, choices: bool = True) -> dict:
    """A ``ChatCompletionStreamResponse`` (protocol.py:832-873)."""
    body = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    if choices:
        full = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
        body["choices"] = [{"index": 0, "delta": {**full, **(delta or {})}, "logprobs": None,
                            "finish_reason": finish["type"] if finish else None,
                            "matched_stop": finish.get("matched") if finish else None}]
    else:
        body["choices"] = []
    body["usage"] = usage_info
    return body


def sse_chunk(rid: str, model: str, delta: dict | None = None, finish: dict | None = None,
              usage_info: dict | None = None) -> dict:
    """``build_sse_content`` from 0.5.13 (0.5.14 sse_utils.py:13-99, serving_chat.py:377, 420, 1067,
    1105): msgspec with ``omit_defaults``, so the delta keeps ``reasoning_content`` always and
    first and drops a null role or content (no ``tool_calls``), and the chunk has no ``usage``
    unless it is set. Tool-call and usage chunks stay pydantic's (``chat_chunk``)."""
    delta = delta or {}
    kept = {"reasoning_content": delta.get("reasoning_content"),
            **{k: delta[k] for k in ("role", "content") if delta.get(k) is not None}}
    body = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": kept, "logprobs": None,
                         "finish_reason": finish["type"] if finish else None,
                         "matched_stop": finish.get("matched") if finish else None}]}
    if usage_info is not None:
        body["usage"] = usage_info
    return body


class ChatStream:
    """``_generate_chat_stream`` (serving_chat.py:603-863): the events of one streamed chat answer."""

    def __init__(self, plan: ChatPlan):
        self.plan = plan
        self.chunk = sse_chunk if plan.served.sse_chunks else chat_chunk  # role, text and finish chunks
        self.first, self.sent = True, ""
        self.reasoning = plan.reasoning_parser(stream=True)
        self.tools = (FunctionCallParser(plan.tools, plan.served.args["tool_call_parser"], plan.tool_choice)
                      if plan.parses_tools else None)
        self.has_tool_calls = False
        self.last_meta: dict | None = None

    def continuous(self, chunk: dict, meta: dict) -> dict:
        if self.plan.fields["continuous_usage_stats"]:
            chunk["usage"] = usage(meta)
        return chunk

    def events(self, out: dict) -> list[dict]:
        """The chunks of one engine output."""
        meta, model = out["meta_info"], self.plan.fields["model"]
        self.last_meta = meta
        chunks = []
        if self.first:  # 663-677
            self.first = False
            chunks.append(self.chunk(meta["id"], model, {"role": "assistant", "content": ""}))
        delta = out["text"][len(self.sent):]
        self.sent += delta
        if self.reasoning is not None:  # 683-707
            reasoning, delta = self.reasoning.parse_stream_chunk(delta)
            if reasoning:
                chunks.append(self.continuous(self.chunk(meta["id"], model, {"reasoning_content": reasoning}), meta))
        if self.tools is not None:  # 710-733, 1234-1338
            normal, calls = self.tools.parse_stream_chunk(delta, self.plan.history_tool_calls())
            if normal:
                chunks.append(self.continuous(self.chunk(meta["id"], model, {"content": normal}), meta))
            for call in calls:
                self.has_tool_calls = True
                chunks.append(self.continuous(chat_chunk(meta["id"], model, {"tool_calls": [call]}), meta))
            if meta["finish_reason"] is not None:
                remaining = self.tools.unstreamed_arguments()  # 1340-1411
                if remaining is not None:
                    chunks.append(chat_chunk(meta["id"], model, {"tool_calls": [remaining]}))
        elif delta:  # 735-759
            chunks.append(self.continuous(self.chunk(meta["id"], model, {"content": delta}), meta))
        return chunks

    def end(self) -> list[dict]:
        """After the last output: the finish chunk, the usage chunk if asked (762-851)."""
        meta, model = self.last_meta, self.plan.fields["model"]
        chunks = []
        finish = meta["finish_reason"]
        if finish:
            finish = dict(finish)
            if self.has_tool_calls and finish["type"] == "stop":
                finish["type"] = "tool_calls"
            chunks.append(self.chunk(meta["id"], model, finish=finish))
        if self.plan.fields["include_usage"]:
            chunks.append(chat_chunk(meta["id"], model, usage_info=usage(meta), choices=False))
        return chunks


def chat_plan(raw: bytes, content_type: str | None, served: Served) -> ChatPlan:
    """Read and check a ``/v1/chat/completions`` body; OpenAIError for what 0.5.9 refuses
    (ServerError for its 500)."""
    try:
        values = validate(read_json(raw, content_type, CHAT, served.site), CHAT, served.site)
    except Refused as exc:
        if exc.server_error:
            raise ServerError() from exc
        raise refused(exc) from exc
    fields = common_fields(values)
    fields["max_new_tokens"] = values["max_completion_tokens"] or values["max_tokens"]  # protocol.py:727
    plan = ChatPlan(served, fields, values["messages"], values["tools"], values["tool_choice"],
                    values["chat_template_kwargs"], values["separate_reasoning"], values["stream_reasoning"])
    validate_chat(plan)
    return plan


def validate_chat(plan: ChatPlan) -> None:
    """``_validate_request`` (serving_chat.py:192-238), then the stand-in's one choice."""
    if not plan.messages:
        raise OpenAIError("Messages cannot be empty.")
    if plan.tool_choice == "required" and not plan.tools:
        raise OpenAIError("Tools cannot be empty if tool choice is set to required.")
    if isinstance(plan.tool_choice, dict):
        if not plan.tools:
            raise OpenAIError("Tools cannot be empty if tool choice is set to a specific tool.")
        name = plan.tool_choice["function"].get("name")
        if not any(t["function"]["name"] == name for t in plan.tools):
            raise OpenAIError(f"Tool '{name}' not found in tools list.")
    most = plan.fields["max_new_tokens"]
    context = plan.served.args.get("context_length")
    if most and context and most > context and not plan.served.args.get("allow_auto_truncate"):
        raise OpenAIError(f"max_completion_tokens is too large: {most}."
                          f"This model supports at most {context} completion tokens.")
    if plan.fields["n"] != 1:
        raise OpenAIError("The stand-in serves n=1 only.")


def prepare_chat(plan: ChatPlan) -> None:
    """``_convert_to_internal_request`` then ``generate_request``'s checks; sets ``plan.req``.

    A template error raises (400 ``BadRequest`` in either mode); a request too long raises when
    not streamed and becomes ``plan.stream_error`` when streamed."""
    served, fields = plan.served, plan.fields
    tools = None
    if plan.tools and plan.tool_choice != "none":  # serving_chat.py:327-337
        tools = [{"type": t.get("type", "function"),
                  "function": {"description": t["function"].get("description"), "name": t["function"]["name"],
                               "parameters": t["function"].get("parameters"),
                               "strict": bool(t["function"].get("strict", False))}}
                 for t in plan.tools
                 if not isinstance(plan.tool_choice, dict)
                 or t["function"]["name"] == plan.tool_choice["function"].get("name")]
    try:
        prompt = served.template.render(plan.messages, tools, "medium", plan.kwargs)
    except ValueError as exc:  # serving_base.py:114-119
        raise OpenAIError(str(exc), "BadRequest") from exc
    prompt_tokens = count_tokens(prompt)
    plan.generating = True
    try:
        sampling_checks(fields, fields["max_new_tokens"])
        served.check_length(prompt_tokens, fields["max_new_tokens"])
    except OpenAIError as exc:
        if not fields["stream"] or served.refuses_before_stream:
            raise
        plan.stream_error = exc
        return
    plan.req = plan.script(prompt_tokens).req(fields["rid"], prompt_tokens, fields["stream"],
                                              fields["temperature"])


def count_tokens(prompt: str) -> int:
    """The stand-in's tokenizer: a word is a token, and so is each special token of a template."""
    return len(SPECIAL_OR_WORD.findall(prompt))


# -- completions -----------------------------------------------------------------------------------

class CompletionPlan:
    """One completion: the request read, the engine request, and how to answer it."""

    def __init__(self, served: Served, fields: dict, prompt, echo: bool):
        self.served, self.fields, self.prompt, self.echo = served, fields, prompt, echo
        self.req: Req | None = None
        self.stream_error: OpenAIError | None = None
        self.generating = False  # generate_request was reached (its handle loop started)
        self.created = int(time.time())
        self.sent = ""
        self.last_meta: dict | None = None

    def echo_text(self) -> str:
        return self.prompt if self.echo and isinstance(self.prompt, str) else ""

    def choice(self, text: str, finish: dict | None) -> dict:
        return {"index": 0, "text": text, "logprobs": None,
                "finish_reason": finish["type"] if finish else None,
                "matched_stop": finish.get("matched") if finish else None}

    def response(self, out: dict) -> dict:
        """``_build_completion_response`` (serving_completions.py:394-485)."""
        meta = out["meta_info"]
        return {"id": meta["id"], "object": "text_completion", "created": int(time.time()),
                "model": self.fields["model"],
                "choices": [self.choice(self.echo_text() + out["text"], meta["finish_reason"])],
                "usage": usage(meta), "metadata": {"weight_version": meta["weight_version"]}}

    def events(self, out: dict) -> list[dict]:
        """The chunk of one engine output (serving_completions.py:212-312)."""
        meta = out["meta_info"]
        self.last_meta = meta
        text = out["text"]
        if not self.sent:
            text = self.echo_text() + text
        delta = text[len(self.sent):]
        self.sent += delta
        chunk = {"id": meta["id"], "object": "text_completion", "created": self.created,
                 "model": self.fields["model"], "choices": [self.choice(delta, meta["finish_reason"])],
                 "usage": usage(meta) if self.fields["continuous_usage_stats"] else None}
        return [chunk]

    def end(self) -> list[dict]:
        """The usage chunk, ``exclude_none`` (serving_completions.py:343-356)."""
        if not self.fields["include_usage"]:
            return []
        meta = self.last_meta
        return [{"id": meta["id"], "object": "text_completion", "created": self.created,
                 "model": self.fields["model"], "choices": [], "usage": usage(meta, exclude_none=True)}]

    def stream(self) -> CompletionPlan:
        return self


def completion_plan(raw: bytes, content_type: str | None, served: Served) -> CompletionPlan:
    """Read and check a ``/v1/completions`` body; OpenAIError for what 0.5.9 refuses."""
    try:
        values = validate(read_json(raw, content_type, COMPLETION, served.site), COMPLETION, served.site)
    except Refused as exc:
        raise refused(exc) from exc
    fields = common_fields(values)
    fields["max_new_tokens"] = values["max_tokens"]
    prompt = values["prompt"]
    if not prompt or (isinstance(prompt, list) and all(not p for p in prompt)):  # serving_completions.py:54-60
        raise OpenAIError("Prompt cannot be empty")
    if isinstance(prompt, list) and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise OpenAIError("The stand-in serves one prompt a request.")
        prompt = prompt[0]
    if fields["n"] != 1:
        raise OpenAIError("The stand-in serves n=1 only.")
    return CompletionPlan(served, fields, prompt, values["echo"])


def prepare_completion(plan: CompletionPlan) -> None:
    """``generate_request``'s checks, then the engine request; sets ``plan.req``."""
    fields = plan.fields
    prompt_tokens = len(plan.prompt) if isinstance(plan.prompt, list) else len(plan.prompt.split())
    plan.generating = True
    try:
        sampling_checks(fields, fields["max_new_tokens"])
        plan.served.check_length(prompt_tokens, fields["max_new_tokens"])
    except OpenAIError as exc:
        if not fields["stream"] or plan.served.refuses_before_stream:
            raise
        plan.stream_error = exc
        return
    limit = fields["max_new_tokens"]
    script = Script.cut(words(limit, 0, plan.served.vocabulary), limit, False, fields["stop"])
    plan.req = script.req(fields["rid"], prompt_tokens, fields["stream"], fields["temperature"])
