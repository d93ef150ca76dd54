"""
The stand-in's OpenAI surface and its HTTP connection handling, as a real process over the
real sglang 0.5.9 package files (fixtures of test_standin). What each answer imitates is cited
in files/standin/standin_http.py and standin_openai.py.
"""

import ast
import http.client
import importlib
import json
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from sglfleet import FILES
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


def test_a_model_is_retrieved_by_id_and_an_unknown_one_is_an_openai_404(server):
    """``GET /v1/models/{id}`` as 0.5.9 and 0.5.14 serve it, through the official SDK (``models.retrieve``)."""
    import openai

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none", max_retries=0)
    (listed,) = client.models.list().data
    card = client.models.retrieve(listed.id)
    assert (card.id, card.object, card.owned_by) == (listed.id, "model", "sglang")
    assert card.model_extra["root"] == listed.id and card.model_extra["parent"] is None
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("no-such-model")
    assert missing.value.body == {"message": "The model 'no-such-model' does not exist",
                                  "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    code, headers, text = exchange(conn, "POST", f"/v1/models/{listed.id}", b"{}")
    assert (code, json.loads(text), headers.get("Allow")) == (405, {"detail": "Method Not Allowed"}, "GET")
    conn.close()


def test_an_idle_keep_alive_connection_is_closed_as_uvicorn_closes_it(server):
    """uvicorn's timeout_keep_alive, 5 s as sglang sets it: the connection stays for a request within it,
    and is closed (an orderly FIN: recv gives b"") about 5 s after the last answer."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    generate = json.dumps({"text": "Hi", "sampling_params": {"max_new_tokens": 1}}).encode()
    assert exchange(conn, "POST", "/generate", generate)[0] == 200
    first = conn.sock
    time.sleep(3)
    assert exchange(conn, "POST", "/generate", generate)[0] == 200
    assert conn.sock is first  # the same connection, still open 3 s after its last answer
    answered = time.monotonic()
    first.settimeout(10)
    assert first.recv(1) == b""  # then closed by the server, with nothing more said
    idle = time.monotonic() - answered
    conn.close()
    assert 4.5 <= idle <= 7.5, idle


def test_a_chunked_request_body_is_read_too(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    parts = [b'{"model": "m", "prompt": ', b'"Hello there", "max_tokens": 2}']
    conn.request("POST", "/v1/completions", body=iter(parts), encode_chunked=True,
                 headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    response = conn.getresponse()
    assert response.status == 200 and json.loads(response.read())["usage"]["prompt_tokens"] == 2
    conn.request("POST", "/no/such/route", body=iter(parts), encode_chunked=True,
                 headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    response = conn.getresponse()
    assert (response.status, response.read()) == (404, b'{"detail":"Not Found"}')
    assert exchange(conn, "GET", "/model_info")[0] == 200


def test_a_refused_key_leaves_the_connection_usable(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, "--skip-server-warmup", "--api-key", "k")
    wait_for(proc, "/health")
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=30)
    generate = json.dumps({"text": "Hi", "sampling_params": {"max_new_tokens": 2}}).encode()
    assert exchange(conn, "POST", "/generate", generate)[0] == 401
    assert exchange(conn, "POST", "/generate", generate, {"Authorization": "Bearer k"})[0] == 200
    conn.close()


# -- the OpenAI surface ----------------------------------------------------------------------------

# The keys of each object, in 0.5.9's field order (protocol.py:131-137, 328-393, 787-873).
USAGE = ["prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details", "reasoning_tokens"]
CHUNK = ["id", "object", "created", "model", "choices", "usage"]
STREAM_CHOICE = ["index", "delta", "logprobs", "finish_reason", "matched_stop"]
DELTA = ["role", "content", "reasoning_content", "tool_calls"]
CHAT = ["id", "object", "created", "model", "choices", "usage", "metadata"]
CHAT_CHOICE = ["index", "message", "logprobs", "finish_reason", "matched_stop"]
COMPLETION_CHOICE = ["index", "text", "logprobs", "finish_reason", "matched_stop"]
ERROR = ["object", "message", "type", "param", "code"]
KIMI_EOS = 163586  # the stand-in serves as Kimi K2.5 where no model is staged


def client(proc):
    from openai import OpenAI
    return OpenAI(base_url=proc.url + "/v1", api_key="none", max_retries=0)


def events(conn: http.client.HTTPConnection, path: str, body: dict) -> tuple[int, dict, list[str]]:
    """(status, headers, the raw ``data:`` payloads) of one streamed request."""
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    text = response.read().decode()
    assert text.endswith("\n\n"), text
    frames = text.split("\n\n")[:-1]
    assert all(frame.startswith("data: ") for frame in frames), frames
    return response.status, dict(response.getheaders()), [frame[len("data: "):] for frame in frames]


def test_chat_completion_as_059_answers_it(server):
    answer = client(server).chat.completions.create(
        model="my-model", messages=[{"role": "user", "content": "Say something"}])
    raw = answer.model_dump()
    choice = answer.choices[0]
    assert (answer.object, answer.model, choice.finish_reason) == ("chat.completion", "my-model", "stop")
    assert choice.message.role == "assistant" and len(choice.message.content.split()) == 24
    assert raw["choices"][0]["matched_stop"] == KIMI_EOS  # stopped at its EOS token
    assert answer.usage.completion_tokens == 25  # 24 words and the EOS
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + 25
    assert raw["metadata"] == {"weight_version": "default"} and len(answer.id) == 32


def test_chat_stream_framing_chunks_and_usage(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    status, headers, data = events(conn, "/v1/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True, "max_tokens": 6,
        "stream_options": {"include_usage": True}})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert data[-1] == "[DONE]"
    chunks = [json.loads(item) for item in data[:-1]]
    assert all(list(chunk) == CHUNK and chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk["id"] for chunk in chunks}) == 1
    first, *deltas, finish, last = chunks
    for chunk in (first, *deltas, finish):
        assert [list(chunk["choices"][0]), list(chunk["choices"][0]["delta"])] == [STREAM_CHOICE, DELTA]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "", "reasoning_content": None,
                                            "tool_calls": None}
    texts = [chunk["choices"][0]["delta"]["content"] for chunk in deltas]
    assert texts == [" The", " quick", " brown", " fox", " jumps", " over"]  # one per output, new text only
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in (first, *deltas))
    assert finish["choices"][0]["delta"] == dict.fromkeys(DELTA)
    assert (finish["choices"][0]["finish_reason"], finish["choices"][0]["matched_stop"]) == ("length", None)
    assert last["choices"] == [] and list(last["usage"]) == USAGE
    assert last["usage"]["completion_tokens"] == 6 and last["usage"]["reasoning_tokens"] == 0
    # compact JSON, as pydantic writes it
    assert data[0].startswith('{"id":"') and ", " not in data[0].split('"model"')[0]
    # the connection is still good
    assert exchange(conn, "GET", "/model_info")[0] == 200


def test_chat_stream_through_the_sdk_adds_up_to_the_answer(server):
    sdk = client(server)
    stream = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                         stream=True)
    chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    whole = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks][-1] == "stop"
    assert chunks[-1].usage is None  # no usage chunk unless asked


def test_completions_streamed_and_not(server):
    sdk = client(server)
    whole = sdk.completions.create(model="m", prompt="Once upon a time", max_tokens=5)
    raw = whole.model_dump()
    assert list(json.loads(whole.model_dump_json())) != []  # parsed
    assert (whole.object, whole.choices[0].text, whole.choices[0].finish_reason) == (
        "text_completion", " The quick brown fox jumps", "length")
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (4, 5)
    assert raw["metadata"] == {"weight_version": "default"}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    _, _, data = events(conn, "/v1/completions", {"model": "m", "prompt": "Hi", "max_tokens": 3, "stream": True,
                                                  "stream_options": {"include_usage": True}})
    assert data[-1] == "[DONE]"
    *chunks, usage = [json.loads(item) for item in data[:-1]]
    assert all(list(chunk) == CHUNK and list(chunk["choices"][0]) == COMPLETION_CHOICE for chunk in chunks)
    assert [c["choices"][0]["text"] for c in chunks] == [" The", " quick", " brown"]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "length"]
    assert len({c["created"] for c in chunks + [usage]}) == 1  # taken once per stream
    # exclude_none: the final usage chunk has no null keys (serving_completions.py:355)
    assert list(usage) == ["id", "object", "created", "model", "choices", "usage"]
    assert usage["usage"] == {"prompt_tokens": 1, "total_tokens": 4, "completion_tokens": 3, "reasoning_tokens": 0}


def test_stop_strings_and_max_tokens(server):
    sdk = client(server)
    cut = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                      max_completion_tokens=3)
    assert (cut.choices[0].message.content, cut.choices[0].finish_reason) == (" The quick brown", "length")
    stopped = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], stop=["fox"])
    raw = stopped.model_dump()["choices"][0]
    assert (raw["message"]["content"], raw["finish_reason"], raw["matched_stop"]) == (
        " The quick brown ", "stop", "fox")
    long = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=60,
                                       extra_body={"ignore_eos": True})
    assert (long.usage.completion_tokens, long.choices[0].finish_reason) == (60, "length")


def test_the_model_name_is_not_checked_and_errors_are_openai_shaped(server):
    from openai import BadRequestError
    sdk = client(server)
    assert sdk.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}],
                                       max_tokens=1).model == "no-such-model"
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    cases = [
        (b"{not json", "application/json", "Bad Request", "JSON decode error"),
        (json.dumps({"model": "m"}).encode(), "application/json", "Bad Request", "Field required"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), "text/plain", "Bad Request",
         "Unsupported Media Type"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}).encode(),
         "application/json", "Bad Request", "valid integer"),
        (json.dumps({"messages": []}).encode(), "application/json", "BadRequestError", "Messages cannot be empty."),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}).encode(),
         "application/json", "BadRequestError", "Tools cannot be empty if tool choice is set to required."),
    ]
    for body, content_type, kind, message in cases:
        code, _, text = exchange(conn, "POST", "/v1/chat/completions", body, {"Content-Type": content_type})
        error = json.loads(text)
        assert (code, list(error), error["type"], error["code"], error["param"]) == (400, ERROR, kind, 400, None)
        assert message in error["message"], (message, error)
    with pytest.raises(BadRequestError) as raised:  # the SDK reads the message
        sdk.completions.create(model="m", prompt="x", max_tokens=0)
    assert "max_tokens must be positive" in str(raised.value)


def test_a_prompt_too_long_is_400_or_an_error_event_when_streamed(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, "--skip-server-warmup", "--context-length", "64")
    wait_for(proc, "/model_info")
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=30)
    long = {"model": "m", "messages": [{"role": "user", "content": "word " * 100}]}
    code, _, text = exchange(conn, "POST", "/v1/chat/completions", json.dumps(long).encode())
    error = json.loads(text)
    assert (code, error["type"]) == (400, "BadRequestError")
    assert error["message"].startswith("The input (") and "longer than the model's context length (64 tokens)." \
        in error["message"]
    code, _, data = events(conn, "/v1/chat/completions", {**long, "stream": True})
    assert code == 200 and data[-1] == "[DONE]" and len(data) == 2
    assert json.loads(data[0])["error"]["message"] == error["message"]
    total = {"model": "m", "prompt": "a b c", "max_tokens": 62}
    code, _, text = exchange(conn, "POST", "/v1/completions", json.dumps(total).encode())
    assert code == 400 and "You requested a total of 65 tokens: 3 tokens from the input messages and 62" \
        in json.loads(text)["message"]
    code, _, text = exchange(conn, "POST", "/v1/chat/completions", json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 65}).encode())
    assert code == 400 and json.loads(text)["message"] == (
        "max_completion_tokens is too large: 65.This model supports at most 64 completion tokens.")


def staged(tmp_path, template=...) -> str:
    """A staged tiny model, as the local fleet's mirror makes it, its chat template replaced if asked."""
    from sglfleet.devfleet.mirror import write_model
    folder = write_model(tmp_path / "tiny", seed=1, shard_sizes=(4096,))
    if template is not ...:
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config.pop("chat_template")
        if template is not None:
            config["chat_template"] = template
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return str(folder)


def test_the_chat_template_comes_from_the_models_tokenizer_config(launch, sglang_059, tmp_path):
    proc = launch(sglang_059, "--model-path", staged(tmp_path), "--skip-server-warmup")
    wait_for(proc, "/model_info")
    answer = client(proc).chat.completions.create(
        model="tiny", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}])
    # <|im_start|> system Be brief. <|im_end|> <|im_start|> user Hi there <|im_end|> <|im_start|> assistant
    assert answer.usage.prompt_tokens == 12
    assert answer.model_dump()["choices"][0]["matched_stop"] == 2  # the model config's eos_token_id


@pytest.mark.parametrize("template, message", [
    ("{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}",
     "Conversation roles must alternate user/assistant/user/assistant/..."),
    (None, "Cannot use chat template functions because tokenizer.chat_template is not set"),
])
def test_a_template_that_fails_is_a_bad_request(launch, sglang_059, tmp_path, template, message):
    proc = launch(sglang_059, "--model-path", staged(tmp_path, template), "--skip-server-warmup")
    wait_for(proc, "/model_info")
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=30)
    for stream in (False, True):  # raised before the stream starts: a 400 either way
        code, _, text = exchange(conn, "POST", "/v1/chat/completions", json.dumps(
            {"messages": [{"role": "user", "content": "x"}], "stream": stream}).encode())
        error = json.loads(text)
        assert (code, error["type"]) == (400, "BadRequest") and error["message"].startswith(message)


# -- parsers ---------------------------------------------------------------------------------------

WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture
def kimi(launch, sglang_059):
    """Kimi K2.5's recipe: both parsers kimi_k2."""
    proc = launch(sglang_059, *KIMI_PATH, "--skip-server-warmup", "--reasoning-parser", "kimi_k2",
                  "--tool-call-parser", "kimi_k2", SGLFLEET_STANDIN_STEP_S="0.001")
    wait_for(proc, "/model_info")
    return proc


def test_kimi_parsers_split_reasoning_and_tool_calls(kimi):
    sdk = client(kimi)
    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "functions.get_weather:0", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
               {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny"},
               {"role": "user", "content": "And in Rome?"}]
    answer = sdk.chat.completions.create(model="kimi", messages=history, tools=WEATHER)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.model_dump()["matched_stop"] is None
    assert choice.message.model_dump()["reasoning_content"] == "The user asks something; a short answer will do."
    assert choice.message.content == "The quick brown fox jumps over"
    [call] = choice.message.tool_calls
    # kimi_k2 ids count on from the calls in the history (serving_chat.py:1052-1070)
    assert (call.id, call.type, call.function.name) == ("functions.get_weather:1", "function", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "stand-in"}

    chunks = list(sdk.chat.completions.create(model="kimi", messages=history, tools=WEATHER, stream=True))
    deltas = [chunk.choices[0].delta.model_dump() for chunk in chunks]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    assert reasoning.strip() == "The user asks something; a short answer will do."
    assert "".join(d["content"] or "" for d in deltas) == " The quick brown fox jumps over"
    calls = [d["tool_calls"][0] for d in deltas if d["tool_calls"]]
    assert (calls[0]["id"], calls[0]["function"]) == ("functions.get_weather:1",
                                                       {"name": "get_weather", "arguments": ""})
    assert all(c["id"] is None and c["function"]["name"] is None for c in calls[1:])
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"city": "stand-in"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not any("<|tool_call" in (d["content"] or "") for d in deltas)


def test_thinking_off_and_tool_choice_none(kimi):
    sdk = client(kimi)
    plain = sdk.chat.completions.create(model="kimi", messages=[{"role": "user", "content": "Hi"}], tools=WEATHER,
                                        tool_choice="none", extra_body={"chat_template_kwargs": {"thinking": False}})
    message = plain.choices[0].message.model_dump()
    assert (message["reasoning_content"], message["tool_calls"], plain.choices[0].finish_reason) == (
        None, None, "stop")
    required = sdk.chat.completions.create(model="kimi", messages=[{"role": "user", "content": "Hi"}],
                                           tools=WEATHER, tool_choice="required")
    [call] = required.choices[0].message.tool_calls
    assert required.choices[0].message.content is None and call.function.name == "get_weather"


def test_without_parsers_the_raw_text_is_the_content(server):
    answer = client(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                                    tools=WEATHER)
    message = answer.choices[0].message
    assert message.tool_calls is None and "<|tool_calls_section_begin|>" in message.content
    assert answer.choices[0].finish_reason == "stop"


# -- SIGTERM ---------------------------------------------------------------------------------------

def test_a_stream_in_flight_at_sigterm_streams_to_its_end(launch, sglang_059):
    """0.5.9's sigterm_watchdog waits for every request in rid_to_state (tokenizer_manager.py:2113-2149)."""
    proc = launch(sglang_059, *KIMI_PATH, "--skip-server-warmup", SGLFLEET_STANDIN_STEP_S="0.01")
    wait_for(proc, "/model_info")
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"}, body=json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True, "max_tokens": 200,
         "ignore_eos": True, "stream_options": {"include_usage": True}}))
    response = conn.getresponse()
    first = response.readline()
    assert first.startswith(b"data: ")
    time.sleep(0.3)  # the first generation request has installed 0.5.9's SIGTERM handler
    os.kill(proc.pid, signal.SIGTERM)
    rest = response.read().decode()
    assert rest.endswith("data: [DONE]\n\n")
    usage = json.loads(rest.split("\n\n")[-3][len("data: "):])["usage"]
    assert usage["completion_tokens"] == 200
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert "Gracefully exiting... Remaining number of requests 1." in err


# -- the objects' keys, held to the wheel's protocol.py -----------------------------------------------

# Fields a model_serializer drops when None (protocol.py: hidden_states, sglext); metadata only
# on whole answers.
DROPPED_WHEN_NONE = {"hidden_states", "sglext"}


def protocol_fields(package: Path) -> dict[str, list[str]]:
    """Each pydantic class of 0.5.9's protocol.py: its field names, in declaration order."""
    tree = ast.parse((package / "sglang/srt/entrypoints/openai/protocol.py").read_text())
    return {node.name: [item.target.id for item in node.body
                        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                        and not item.target.id.startswith("_")]
            for node in tree.body if isinstance(node, ast.ClassDef)}


def standin_module(name: str):
    sys.path.insert(0, str(FILES / "standin"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def test_chunks_and_answers_have_the_wheels_keys_in_its_order(sglang_059):
    fields = {name: [f for f in keys if f not in DROPPED_WHEN_NONE]
              for name, keys in protocol_fields(sglang_059).items()}
    openai = standin_module("standin_openai")
    chat = standin_module("standin_chat")
    served = openai.Served({"served_model_name": "m"}, {}, chat.ChatTemplate(None, {}), "site")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    plan = openai.chat_plan(body, "application/json", served)
    meta = {"id": "r", "prompt_tokens": 1, "completion_tokens": 1, "weight_version": "default",
            "finish_reason": {"type": "length", "length": 1}}
    stream = plan.stream()
    first, content = stream.events({"text": " The", "meta_info": meta})
    finish, usage_chunk = stream.end()
    for chunk in (first, content, finish, usage_chunk):
        assert list(chunk) == fields["ChatCompletionStreamResponse"]
    for chunk in (first, content, finish):
        assert list(chunk["choices"][0]) == fields["ChatCompletionResponseStreamChoice"]
        assert list(chunk["choices"][0]["delta"]) == fields["DeltaMessage"]
    assert list(usage_chunk["usage"]) == fields["UsageInfo"]
    whole = plan.response({"text": " The", "meta_info": meta})
    assert list(whole) == fields["ChatCompletionResponse"]
    assert list(whole["choices"][0]) == fields["ChatCompletionResponseChoice"]
    assert list(whole["choices"][0]["message"]) == fields["ChatMessage"]
    completion = openai.completion_plan(json.dumps({"prompt": "x"}).encode(), "application/json", served)
    assert list(completion.response({"text": " The", "meta_info": meta})) == fields["CompletionResponse"]
    [chunk] = completion.events({"text": " The", "meta_info": meta})
    assert list(chunk) == fields["CompletionStreamResponse"]
    assert list(chunk["choices"][0]) == fields["CompletionResponseStreamChoice"]
    assert list(openai.OpenAIError("x").body()) == fields["ErrorResponse"]
    call = standin_module("standin_parsers").tool_call("i", 0, "f", "{}")
    assert list(call) == fields["ToolCall"] and list(call["function"]) == fields["FunctionResponse"]


# -- request validation, held to 0.5.9's own models under FastAPI ------------------------------------

def real_app(package: Path):
    """0.5.9's two OpenAI routes as its http_server.py declares them (1343-1358), with its
    validate_json_request (445-456) and its RequestValidationError handler (409-442), over the
    wheel's own protocol.py (sglang.utils, which needs numpy, stubbed)."""
    import types
    from http import HTTPStatus

    from fastapi import Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    saved = {name: sys.modules.get(name) for name in ("sglang", "sglang.utils")}
    stub, utils = types.ModuleType("sglang"), types.ModuleType("sglang.utils")
    stub.__path__, utils.convert_json_schema_to_str = [], json.dumps
    sys.modules.update({"sglang": stub, "sglang.utils": utils})
    try:
        spec = importlib.util.spec_from_file_location(
            "protocol_059", package / "sglang/srt/entrypoints/openai/protocol.py")
        protocol = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(protocol)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    app = FastAPI()

    @app.exception_handler(RequestValidationError)
    async def validation_exception_handler(request: Request, exc: RequestValidationError):
        exc_str, errors_str = str(exc), str(exc.errors())
        message = f"{exc_str} {errors_str}" if errors_str and errors_str != exc_str else exc_str
        error = protocol.ErrorResponse(message=message, type=HTTPStatus.BAD_REQUEST.phrase,
                                       code=HTTPStatus.BAD_REQUEST.value)
        return JSONResponse(status_code=400, content=error.model_dump())

    async def validate_json_request(raw_request: Request):
        content_type = raw_request.headers.get("content-type", "").lower()
        if content_type.split(";", maxsplit=1)[0] != "application/json":
            raise RequestValidationError(errors=[{"loc": ["header", "content-type"],
                                                  "msg": "Unsupported Media Type: Only 'application/json' is allowed",
                                                  "type": "value_error"}])

    @app.post("/v1/completions", dependencies=[Depends(validate_json_request)])
    async def openai_v1_completions(request: protocol.CompletionRequest, raw_request: Request):
        return {}

    @app.post("/v1/chat/completions", dependencies=[Depends(validate_json_request)])
    async def openai_v1_chat_completions(request: protocol.ChatCompletionRequest, raw_request: Request):
        return {}

    return app, protocol


USER_X = [{"role": "user", "content": "x"}]
BAD_BODIES = [
    ("/v1/chat/completions", b"{not json"), ("/v1/chat/completions", b""), ("/v1/chat/completions", b"[1]"),
    ("/v1/chat/completions", b"{}"),
    ("/v1/chat/completions", {"messages": USER_X, "max_tokens": "many", "temperature": "hot", "n": 1.5}),
    ("/v1/chat/completions", {"messages": USER_X, "stop": 5, "stream": None, "stream_options": 3}),
    ("/v1/chat/completions", {"messages": USER_X, "stop": ["a", 1], "stream": "maybe", "top_p": [1]}),
    ("/v1/chat/completions", {"messages": [{"role": "bogus", "content": "x"}, {"role": "user"}, 5,
                                           {"role": "system", "content": 5}, {"role": 3, "content": "x"}]}),
    ("/v1/chat/completions", {"messages": "hi"}),
    ("/v1/chat/completions", {"messages": USER_X, "tools": [{"type": "function"}, 3, {"function": {}}]}),
    ("/v1/chat/completions", {"messages": USER_X, "tools": "x", "tool_choice": "maybe"}),
    ("/v1/chat/completions", {"messages": USER_X, "tool_choice": {"type": "function"},
                              "chat_template_kwargs": [], "ignore_eos": 2}),
    ("/v1/completions", b"[1]"), ("/v1/completions", {}), ("/v1/completions", {"prompt": 5}),
    ("/v1/completions", {"prompt": [1, "a"]}),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0, "echo": "maybe", "n": "2", "temperature": None}),
    ("/v1/completions", {"prompt": "x", "max_tokens": -3.0, "stream_options": {"include_usage": "perhaps"}}),
]


@pytest.mark.parametrize("path, body", BAD_BODIES, ids=[f"{p[4:]}-{i}" for i, (p, _) in enumerate(BAD_BODIES)])
def test_a_bad_body_is_refused_as_059_refuses_it(sglang_059, path, body):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    app, _ = real_app(sglang_059)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    for content_type in ("application/json", "text/plain"):
        real = TestClient(app, raise_server_exceptions=False).post(
            path, content=raw, headers={"content-type": content_type})
        openai = standin_module("standin_openai")
        served = openai.Served({}, {}, standin_module("standin_chat").ChatTemplate(None, {}), str(sglang_059 / "sglang"))
        read = openai.chat_plan if path == "/v1/chat/completions" else openai.completion_plan
        try:
            read(raw, content_type, served)
            status, text = 200, ""
        except openai.OpenAIError as error:
            status, text = error.status, json.dumps(error.body())
        except openai.ServerError:
            status, text = 500, "Internal Server Error"
        assert status == real.status_code, real.text
        if status == 500:
            assert real.text == text
            continue
        # the endpoint's file and line: 0.5.9's http_server.py there, this test's function here
        here = re.compile(r'File \\"[^"\\]*\\", line \d+, in (\w+)')
        assert here.sub(r"File, in \1", text) == here.sub(r"File, in \1", json.dumps(real.json())), real.text


def test_the_fields_read_are_the_wheels_in_its_order(sglang_059):
    declared = protocol_fields(sglang_059)
    protocol = standin_module("standin_protocol")
    for model in (protocol.CHAT, protocol.COMPLETION):
        names = [name for name, _, _ in model.fields]
        assert [n for n in declared[model.name] if n in names] == names, model.name


def run_script(plan, stream: bool) -> list[dict]:
    """The engine's outputs for a plan's script, one per token (a streaming request)."""
    script = plan.script(prompt_tokens=5)
    outs = []
    for n in range(1, len(script.tokens) + 1):
        done = n == len(script.tokens)
        text = script.final_text if done and script.final_text is not None else "".join(script.tokens[:n])
        outs.append({"text": text, "meta_info": {
            "id": "0" * 32, "prompt_tokens": 5, "completion_tokens": n, "weight_version": "default",
            "finish_reason": script.finish if done else None}})
    return outs if stream else outs[-1:]


@pytest.mark.parametrize("parsers, extra", [
    ({}, {}),
    ({"reasoning_parser": "kimi_k2", "tool_call_parser": "kimi_k2"}, {"tools": WEATHER}),
    ({"reasoning_parser": "kimi_k2", "tool_call_parser": "kimi_k2"}, {"tools": WEATHER, "tool_choice": "required"}),
    ({"reasoning_parser": "kimi"}, {"stop": ["lazy"]}),
])
def test_the_wheels_models_serialize_the_stand_ins_chunks_byte_for_byte(sglang_059, parsers, extra):
    """Each chunk and answer, validated by 0.5.9's pydantic model and dumped as 0.5.9 dumps it."""
    pytest.importorskip("fastapi")
    _, protocol = real_app(sglang_059)
    openai = standin_module("standin_openai")
    served = openai.Served(parsers, {"eos_token_id": 2}, standin_module("standin_chat").ChatTemplate(None, {}), "s")
    body = {"model": "m", "messages": USER_X, "stream_options": {"include_usage": True}, **extra}
    plan = openai.chat_plan(json.dumps(body).encode(), "application/json", served)
    stream = plan.stream()
    chunks = [chunk for out in run_script(plan, True) for chunk in stream.events(out)] + stream.end()
    for chunk in chunks:
        real = protocol.ChatCompletionStreamResponse.model_validate(chunk).model_dump_json()
        assert real == openai.dumps(chunk)
    whole = plan.response(run_script(plan, False)[0])
    assert protocol.ChatCompletionResponse.model_validate(whole).model_dump_json() == openai.dumps(whole)
    completion = openai.completion_plan(json.dumps({"prompt": "x", "stream_options": {"include_usage": True}}
                                                   ).encode(), "application/json", served)
    outs = [{"text": " The quick"[:n], "meta_info": {"id": "1", "prompt_tokens": 1, "completion_tokens": 1,
                                                     "weight_version": "default", "finish_reason": f}}
            for n, f in ((4, None), (10, {"type": "length", "length": 2}))]
    chunks = [chunk for out in outs for chunk in completion.events(out)]
    for chunk in chunks:
        assert protocol.CompletionStreamResponse.model_validate(chunk).model_dump_json() == openai.dumps(chunk)
    [usage] = completion.end()
    assert protocol.CompletionStreamResponse.model_validate(usage).model_dump_json(exclude_none=True) == \
        openai.dumps(usage)


# -- the parsers, held to 0.5.9's own ----------------------------------------------------------------

REAL_PARSERS = r'''
import json, sys, types
wheel, standin = sys.argv[1], sys.argv[2]
stub = types.ModuleType("sglang"); stub.__path__ = [wheel + "/sglang"]
utils = types.ModuleType("sglang.utils"); utils.convert_json_schema_to_str = json.dumps
sys.modules.update({"sglang": stub, "sglang.utils": utils})
# partial_json_parser (not in the test environment): only its names are imported on this path
for name in ("partial_json_parser", "partial_json_parser.core", "partial_json_parser.core.exceptions",
             "partial_json_parser.core.options"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["partial_json_parser.core.exceptions"].MalformedJSON = type("MalformedJSON", (Exception,), {})
sys.modules["partial_json_parser.core.options"].Allow = type("Allow", (), {"ALL": 0, "STR": 1, "OBJ": 2, "ARR": 4})
from sglang.srt.parser.reasoning_parser import ReasoningParser as Real
from sglang.srt.function_call.kimik2_detector import KimiK2Detector
from sglang.srt.entrypoints.openai.protocol import Tool
sys.path.insert(0, standin)
import standin_parsers as mine
cases = json.loads(sys.stdin.read())
out = {"reasoning": [], "tools": []}
for parser, force, stream_reasoning, chunks in cases["reasoning"]:
    real, ours = Real(parser, stream_reasoning, force), mine.ReasoningParser(parser, stream_reasoning, force)
    whole = "".join(chunks)
    out["reasoning"].append([list(Real(parser, False, force).parse_non_stream(whole)),
                             list(mine.ReasoningParser(parser, False, force).parse_non_stream(whole)),
                             [list(real.parse_stream_chunk(c)) for c in chunks],
                             [list(ours.parse_stream_chunk(c)) for c in chunks]])
for tools, chunks in cases["tools"]:
    tools_real = [Tool.model_validate(t) for t in tools]
    whole = "".join(chunks)
    result = KimiK2Detector().detect_and_parse(whole, tools_real)
    real_whole = [result.normal_text if result.calls else whole,
                  [[c.tool_index, c.name, c.parameters] for c in result.calls]]
    text, calls = mine.FunctionCallParser(tools, "kimi_k2").parse_non_stream(whole, 0)
    our_whole = [text, [[c["index"], c["function"]["name"], c["function"]["arguments"]] for c in calls or []]]
    detector, ours = KimiK2Detector(), mine.FunctionCallParser(tools, "kimi_k2")
    real_stream, our_stream = [], []
    for c in chunks:
        r = detector.parse_streaming_increment(c, tools_real)
        real_stream.append([r.normal_text, [[x.tool_index, x.name, x.parameters] for x in r.calls]])
        text, calls = ours.parse_stream_chunk(c, 0)
        our_stream.append([text, [[x["index"], x["function"]["name"], x["function"]["arguments"]] for x in calls]])
    out["tools"].append([real_whole, our_whole, real_stream, our_stream])
print(json.dumps(out))
'''


def test_the_parsers_split_as_the_wheels_own_detectors(sglang_059):
    """0.5.9's ReasoningParser and KimiK2Detector, run on the same text, give what the stand-in's give:
    whole, and streamed piece by piece as the stand-in's engine outputs come."""
    import subprocess
    openai = standin_module("standin_openai")
    thinking = list(openai.REASONING)
    reasoning = []
    for parser in ("kimi_k2", "kimi", "deepseek-r1", "qwen3", "qwen3-thinking", "minimax", "glm45"):
        start, end = standin_module("standin_parsers").ReasoningParser.tokens(parser)
        for force in (True, False):
            for stream_reasoning in (True, False):
                for chunks in ([start, *thinking, end, " The", " answer."], [*thinking, end, " Hi"],
                               [" Just", " an", " answer."], [*thinking[:3]], [start + " a", end[:3], end[3:] + " b"],
                               [start, " a b ", "c " + end + " d"], ["x " + end]):
                    reasoning.append([parser, force, stream_reasoning, chunks])
    tools = []
    for chunks in (openai.words(6) + openai.kimi_tool_call("get_weather", {"city": "stand-in"}, 0),
                   openai.kimi_tool_call("get_weather", {"city": "Paris", "days": 3}, 0)
                   + openai.kimi_tool_call("get_weather", {"city": "Rome"}, 1),
                   openai.words(4), ["x<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                                     "<|tool_call_argument_begin|>{\"city\": \"a\"}<|tool_call_end|>"
                                     "<|tool_calls_section_end|>"]):
        tools.append([WEATHER, chunks])
    run = subprocess.run([sys.executable, "-c", REAL_PARSERS, str(sglang_059), str(FILES / "standin")],
                         input=json.dumps({"reasoning": reasoning, "tools": tools}), capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    for case, (real_whole, our_whole, real_stream, our_stream) in zip(reasoning, out["reasoning"]):
        assert (our_whole, our_stream) == (real_whole, real_stream), case
    for case, (real_whole, our_whole, real_stream, our_stream) in zip(tools, out["tools"]):
        assert our_whole == real_whole, case
        assert our_stream == real_stream, case


def test_a_client_that_leaves_a_stream_aborts_its_request(launch, sglang_059):
    """create_abort_task (tokenizer_manager.py:1428-1440): the request leaves rid_to_state, so a
    SIGTERM drain does not wait for it."""
    from test_standin import scrape, value
    proc = launch(sglang_059, *KIMI_PATH, "--skip-server-warmup", "--enable-metrics", SGLFLEET_STANDIN_STEP_S="0.01")
    wait_for(proc, "/model_info")
    body = json.dumps({"messages": USER_X, "stream": True, "max_tokens": 2000, "ignore_eos": True}).encode()
    with socket.create_connection(("127.0.0.1", proc.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        seen = b""
        while b"data: " not in seen:
            seen += sock.recv(4096)
    deadline = time.monotonic() + 10
    while value(scrape(proc), "sglang:num_aborted_requests_total") != 1:
        assert time.monotonic() < deadline, scrape(proc)
        time.sleep(0.2)
    assert value(scrape(proc), "sglang:num_requests_total") is None  # none finished
