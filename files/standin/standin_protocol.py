"""
How sglang 0.5.9's FastAPI app reads an OpenAI request body: pydantic's lax validation of
``ChatCompletionRequest`` and ``CompletionRequest`` (``srt/entrypoints/openai/protocol.py``),
for the fields the stand-in acts on, with pydantic's error dicts, in the models' field order.

- The body is parsed as JSON where the ``Content-Type`` is JSON (``fastapi/routing.py``: a
  ``json_invalid`` error); then ``validate_json_request`` (``http_server.py:445-456``) refuses
  any ``Content-Type`` but ``application/json``; then the fields are validated.
- ``ChatCompletionRequest``'s ``model_validator(mode="before")`` runs first: ``tool_choice``
  defaults to ``none`` without tools, ``auto`` with them, written into the body (so an error's
  ``input`` shows it, ``protocol.py:629-637``); a body that is a JSON array makes it raise an
  ``AttributeError``: Starlette's plain-text 500.
- Lax coercion: integers from integral floats and digit strings, numbers from numeric strings,
  booleans from ``0``/``1`` and words like ``"yes"``; ``None`` only where the field is Optional.
- The message FastAPI gives (``N validation error(s):``, each error dict, the endpoint's
  file and line) and 0.5.9's handler appends ``str(errors)`` (``http_server.py:409-442``).

A field the stand-in does not act on is not checked. ``tests/test_standin_openai.py`` holds
the messages to the real models, loaded from the wheel, under FastAPI.

**Example:**

.. code:: python

    body = read_json(raw, "application/json", CHAT)
    values, errors = validate(body, CHAT)
"""

from __future__ import annotations

import functools
import json
from pathlib import Path


class Refused(Exception):
    """What FastAPI answers before 0.5.9's handler runs: ``errors`` (400) or a 500."""

    def __init__(self, errors: list[dict] | None, endpoint: tuple | None, server_error: bool = False):
        super().__init__("refused")
        self.errors, self.endpoint, self.server_error = errors, endpoint, server_error

    def message(self) -> str:
        """``str(RequestValidationError)`` and its errors, as 0.5.9 words it (http_server.py:417-422)."""
        errors = self.errors
        text = f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}:\n"
        text += "".join(f"  {error}\n" for error in errors)
        if self.endpoint is not None:  # fastapi/routing.py _extract_endpoint_context
            site, path, line, function = self.endpoint
            text += f'\n  File "{site}/srt/entrypoints/http_server.py", line {line}, in {function}\n    POST {path}'
        text = text.rstrip()
        errors_str = str(errors)
        return f"{text} {errors_str}" if errors_str and errors_str != text else text


class Model:
    """One request model: its endpoint (for FastAPI's message) and fields in declaration order."""

    def __init__(self, name: str, path: str, line: int, function: str, fields: list[tuple]):
        self.name, self.path, self.line, self.function, self.fields = name, path, line, function, fields


@functools.lru_cache(maxsize=None)
def endpoint_line(site: str, path: str, default: int) -> int:
    """The line of the route's ``@app.post`` in the installed ``http_server.py``, which FastAPI
    names (0.5.9 :1351 for chat, 0.5.14 :1592); ``default``, 0.5.9's, where it cannot be read."""
    try:
        lines = (Path(site) / "srt" / "entrypoints" / "http_server.py").read_text().splitlines()
    except OSError:
        return default
    decorator = f'@app.post("{path}"'
    return next((number for number, line in enumerate(lines, 1) if line.startswith(decorator)), default)


REQUIRED = object()
# (name, kind, default); a kind ending in "?" is Optional. Declaration order of protocol.py.
CHAT = Model("ChatCompletionRequest", "/v1/chat/completions", 1351, "openai_v1_chat_completions", [
    ("messages", "messages", REQUIRED), ("model", "str", "default"), ("frequency_penalty", "float", 0.0),
    ("logprobs", "bool", False), ("top_logprobs", "int?", None), ("max_tokens", "int?", None),
    ("max_completion_tokens", "int?", None), ("n", "int", 1), ("presence_penalty", "float", 0.0),
    ("seed", "int?", None), ("stop", "stop?", None), ("stream", "bool", False),
    ("stream_options", "stream_options?", None), ("temperature", "float?", None), ("top_p", "float?", None),
    ("user", "str?", None), ("tools", "tools?", None), ("tool_choice", "tool_choice", "auto"),
    ("top_k", "int?", None), ("min_p", "float?", None), ("min_tokens", "int", 0),
    ("ignore_eos", "bool", False), ("continue_final_message", "bool", False),
    ("skip_special_tokens", "bool", True), ("separate_reasoning", "bool", True),
    ("stream_reasoning", "bool", True), ("chat_template_kwargs", "dict?", None),
])
COMPLETION = Model("CompletionRequest", "/v1/completions", 1343, "openai_v1_completions", [
    ("model", "str", "default"), ("prompt", "prompt", REQUIRED), ("best_of", "int?", None),
    ("echo", "bool", False), ("frequency_penalty", "float", 0.0), ("logprobs", "int?", None),
    ("max_tokens", "int", 16), ("n", "int", 1), ("presence_penalty", "float", 0.0), ("seed", "int?", None),
    ("stop", "stop?", None), ("stream", "bool", False), ("stream_options", "stream_options?", None),
    ("suffix", "str?", None), ("temperature", "float", 1.0), ("top_p", "float", 1.0), ("user", "str?", None),
    ("top_k", "int", -1), ("min_p", "float", 0.0), ("min_tokens", "int", 0), ("ignore_eos", "bool", False),
    ("skip_special_tokens", "bool", True),
])
TRUE = {"1", "on", "t", "true", "y", "yes"}
FALSE = {"0", "off", "f", "false", "n", "no"}
OBJECT = "Input should be a valid dictionary or object to extract fields from"
CONTENT_PARTS = ("list[union[ChatCompletionMessageContentTextPart,ChatCompletionMessageContentImagePart,"
                 "ChatCompletionMessageContentVideoPart,ChatCompletionMessageContentAudioPart]]")
GENERIC, USER = "ChatCompletionMessageGenericParam", "ChatCompletionMessageUserParam"
ROLES = ("system", "assistant", "tool", "function", "developer")  # protocol.py:466-487
ROLE_ERROR = "'role' must be one of 'system', 'developer', 'assistant', 'tool', or 'function' (case-insensitive)."


def err(kind: str, loc: tuple, value, msg: str, ctx: dict | None = None) -> dict:
    error = {"type": kind, "loc": ("body", *loc), "msg": msg, "input": value}
    if ctx is not None:
        error["ctx"] = ctx
    return error


def value_error(loc: tuple, value, message: str) -> dict:
    """A validator's ValueError: the exception itself in ``ctx``, as pydantic keeps it."""
    return err("value_error", loc, value, "Value error, " + message, {"error": ValueError(message)})


def lax(kind: str, value, loc: tuple) -> tuple[object, list[dict]]:
    """One value of a scalar kind, coerced as pydantic's lax mode does, or its errors."""
    if kind.endswith("?"):
        if value is None:
            return None, []
        kind = kind[:-1]
    if kind == "str":
        return (value, []) if isinstance(value, str) else (None, [err("string_type", loc, value,
                                                                      "Input should be a valid string")])
    if kind == "bool":
        if isinstance(value, bool):
            return value, []
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value), []
        if isinstance(value, str) and value.strip().lower() in TRUE | FALSE:
            return value.strip().lower() in TRUE, []
        if isinstance(value, (str, int, float)):
            return None, [err("bool_parsing", loc, value, "Input should be a valid boolean, unable to interpret input")]
        return None, [err("bool_type", loc, value, "Input should be a valid boolean")]
    if kind == "int":
        if isinstance(value, int):
            return int(value), []
        if isinstance(value, float):
            if value.is_integer():
                return int(value), []
            return None, [err("int_from_float", loc, value,
                              "Input should be a valid integer, got a number with a fractional part")]
        if isinstance(value, str):
            try:
                return int(value.strip()), []
            except ValueError:
                return None, [err("int_parsing", loc, value,
                                  "Input should be a valid integer, unable to parse string as an integer")]
        return None, [err("int_type", loc, value, "Input should be a valid integer")]
    if kind == "float":
        if isinstance(value, (int, float)):
            return float(value), []
        if isinstance(value, str):
            try:
                return float(value.strip()), []
            except ValueError:
                return None, [err("float_parsing", loc, value,
                                  "Input should be a valid number, unable to parse string as a number")]
        return None, [err("float_type", loc, value, "Input should be a valid number")]
    if kind == "dict":
        return (value, []) if isinstance(value, dict) else (None, [err("dict_type", loc, value,
                                                                       "Input should be a valid dictionary")])
    if kind == "stream_options":  # StreamOptions (protocol.py:140-142)
        if not isinstance(value, dict):
            return None, [err("model_attributes_type", loc, value, OBJECT)]
        options, errors = {}, []
        for name in ("include_usage", "continuous_usage_stats"):
            options[name], found = lax("bool?", value.get(name, False), (*loc, name))
            errors += found
        return options, errors
    if kind == "stop":  # Optional[Union[str, List[str]]]
        if isinstance(value, str):
            return [value], []
        if isinstance(value, list):
            bad = [err("string_type", (*loc, "list[str]", i), item, "Input should be a valid string")
                   for i, item in enumerate(value) if not isinstance(item, str)]
            if not bad:
                return list(value), []
            return None, [err("string_type", (*loc, "str"), value, "Input should be a valid string"), *bad]
        return None, [err("string_type", (*loc, "str"), value, "Input should be a valid string"),
                      err("list_type", (*loc, "list[str]"), value, "Input should be a valid list")]
    raise ValueError(f"no such kind: {kind}")


def content_errors(content, loc: tuple) -> list[dict]:
    """``Union[str, List[ChatCompletionMessageContentPart]]``: its parts are not looked into."""
    if isinstance(content, (str, list)):
        return []
    return [err("string_type", (*loc, "str"), content, "Input should be a valid string"),
            err("list_type", (*loc, CONTENT_PARTS), content, "Input should be a valid list")]


def messages_errors(messages) -> list[dict]:
    """``List[Union[ChatCompletionMessageGenericParam, ChatCompletionMessageUserParam]]``."""
    if not isinstance(messages, list):
        return [err("list_type", ("messages",), messages, "Input should be a valid list")]
    errors = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            errors += [err("model_attributes_type", ("messages", i, GENERIC), message, OBJECT),
                       err("model_attributes_type", ("messages", i, USER), message, OBJECT)]
            continue
        role = message.get("role")
        generic = []
        if "role" not in message:
            generic.append(err("missing", ("messages", i, GENERIC, "role"), message, "Field required"))
        elif not isinstance(role, str):
            generic.append(value_error(("messages", i, GENERIC, "role"), role, "'role' must be a string"))
        elif role.lower() not in ROLES:
            generic.append(value_error(("messages", i, GENERIC, "role"), role, ROLE_ERROR))
        if message.get("content") is not None:
            generic += content_errors(message["content"], ("messages", i, GENERIC, "content"))
        user = []
        if role != "user":
            user.append(err("missing", ("messages", i, USER, "role"), message, "Field required")
                        if "role" not in message else
                        err("literal_error", ("messages", i, USER, "role"), role, "Input should be 'user'",
                            {"expected": "'user'"}))
        if "content" not in message:
            user.append(err("missing", ("messages", i, USER, "content"), message, "Field required"))
        else:
            user += content_errors(message["content"], ("messages", i, USER, "content"))
        if generic and user:
            errors += generic + user
        elif not generic:
            message["role"] = role.lower()  # the validator's normalization
    return errors


def prompt_errors(prompt) -> list[dict]:
    """``Union[List[int], List[List[int]], str, List[str]]`` (protocol.py:243)."""
    if isinstance(prompt, str):
        return []
    if isinstance(prompt, list) and (all(isinstance(p, int) and not isinstance(p, bool) for p in prompt)
                                     or all(isinstance(p, str) for p in prompt)
                                     or all(isinstance(p, list) for p in prompt)):
        return []
    if not isinstance(prompt, list):
        return [err("list_type", ("prompt", "list[int]"), prompt, "Input should be a valid list"),
                err("list_type", ("prompt", "list[list[int]]"), prompt, "Input should be a valid list"),
                err("string_type", ("prompt", "str"), prompt, "Input should be a valid string"),
                err("list_type", ("prompt", "list[str]"), prompt, "Input should be a valid list")]
    ints = [e for i, item in enumerate(prompt) for e in lax("int", item, ("prompt", "list[int]", i))[1]]
    if not ints:
        return []
    lists = [err("list_type", ("prompt", "list[list[int]]", i), item, "Input should be a valid list")
             for i, item in enumerate(prompt) if not isinstance(item, list)]
    strs = [err("string_type", ("prompt", "list[str]", i), item, "Input should be a valid string")
            for i, item in enumerate(prompt) if not isinstance(item, str)]
    return ints + lists + [err("string_type", ("prompt", "str"), prompt, "Input should be a valid string")] + strs


def tools_errors(tools) -> list[dict]:
    """``Optional[List[Tool]]``, a Tool's ``function`` a Function with a ``name`` (protocol.py:500-513)."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        return [err("list_type", ("tools",), tools, "Input should be a valid list")]
    errors = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            errors.append(err("model_attributes_type", ("tools", i), tool, OBJECT))
        elif "function" not in tool:
            errors.append(err("missing", ("tools", i, "function"), tool, "Field required"))
        elif not isinstance(tool["function"], dict):
            errors.append(err("model_attributes_type", ("tools", i, "function"), tool["function"], OBJECT))
        elif "name" not in tool["function"]:
            errors.append(err("missing", ("tools", i, "function", "name"), tool["function"], "Field required"))
        elif not isinstance(tool["function"]["name"], str):
            errors.append(err("string_type", ("tools", i, "function", "name"), tool["function"]["name"],
                              "Input should be a valid string"))
    return errors


def tool_choice_errors(choice) -> list[dict]:
    """``Union[ToolChoice, Literal["auto", "required", "none"]]`` (protocol.py:562-564)."""
    if choice in ("auto", "required", "none"):
        return []
    if isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict):
            return []
        first = (err("missing", ("tool_choice", "ToolChoice", "function"), choice, "Field required")
                 if "function" not in choice else
                 err("model_attributes_type", ("tool_choice", "ToolChoice", "function"), function, OBJECT))
    else:
        first = err("model_attributes_type", ("tool_choice", "ToolChoice"), choice, OBJECT)
    return [first, err("literal_error", ("tool_choice", "literal['auto','required','none']"), choice,
                       "Input should be 'auto', 'required' or 'none'",
                       {"expected": "'auto', 'required' or 'none'"})]


def read_json(raw: bytes, content_type: str | None, model: Model, site: str):
    """The body as FastAPI parses it, then ``validate_json_request``; Refused for what it refuses."""
    endpoint = (site, model.path, endpoint_line(site, model.path, model.line), model.function)
    media = (content_type or "").lower().split(";", 1)[0].strip()
    body = None
    if media.startswith("application/") and (media == "application/json" or media.endswith("+json")):
        if raw:
            try:
                body = json.loads(raw)
            except ValueError as exc:
                raise Refused([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
                                "input": {}, "ctx": {"error": exc.msg}}], endpoint) from exc
    if media != "application/json":  # the dependency raises it itself: no endpoint context
        raise Refused([{"loc": ["header", "content-type"],
                        "msg": "Unsupported Media Type: Only 'application/json' is allowed",
                        "type": "value_error"}], None)
    if body is None and not raw:
        raise Refused([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}], endpoint)
    return body


def validate(body, model: Model, site: str) -> dict:
    """The fields' values, defaults filled in; Refused with pydantic's errors."""
    endpoint = (site, model.path, endpoint_line(site, model.path, model.line), model.function)
    if model is CHAT:
        if not isinstance(body, dict):  # set_tool_choice_default: values.get on a list
            raise Refused(None, None, server_error=True)
        if body.get("tool_choice") is None:  # protocol.py:629-637
            body["tool_choice"] = "none" if body.get("tools") is None else "auto"
    if not isinstance(body, dict):
        raise Refused([err("model_attributes_type", (), body, OBJECT)], endpoint)
    values, errors = {}, []
    for name, kind, default in model.fields:
        if name not in body:
            if default is REQUIRED:
                errors.append(err("missing", (name,), body, "Field required"))
            values[name] = None if default is REQUIRED else default
            continue
        value = body[name]
        if kind == "messages":
            errors += messages_errors(value)
        elif kind == "prompt":
            errors += prompt_errors(value)
        elif kind == "tools?":
            errors += tools_errors(value)
        elif kind == "tool_choice":
            errors += tool_choice_errors(value)
        else:
            value, found = lax(kind, value, (name,))
            errors += found
            if model is COMPLETION and name == "max_tokens" and not found and value <= 0:
                errors.append(value_error((name,), body[name], "max_tokens must be positive"))  # protocol.py:303-308
        values[name] = value
    if errors:
        raise Refused(errors, endpoint)
    for name in ("rid",):
        values[name] = body.get(name) if isinstance(body.get(name), str) else None
    return values
