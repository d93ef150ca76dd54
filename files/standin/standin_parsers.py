"""
sglang 0.5.9's reasoning and tool-call parsers, as far as the stand-in's answers meet them.

- **Reasoning** (``srt/parser/reasoning_parser.py``): ``BaseReasoningFormatDetector`` (19-136),
  whole and streamed, with the think tokens of each ``--reasoning-parser`` choice
  (``DetectorMap``, 375-390): ``kimi_k2`` is the ``Qwen3Detector`` (381) (``<think>``/``</think>``,
  not Kimi-VL's ``◁think▷``, which is ``kimi``). ``force_reasoning`` comes from the request
  (``serving_chat.py:1210-1232``) or the template (``template_manager.py:86-100``); ``deepseek-r1``
  and ``step3*`` always force, ``qwen3-thinking``/``minimax`` are forced (``ReasoningParser``).
- **Tool calls** (``srt/function_call/function_call_parser.py:56`` ``kimi_k2`` ->
  ``kimik2_detector.py``): ``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
  <|tool_call_argument_begin|>{json}<|tool_call_end|><|tool_calls_section_end|>``; whole
  (``detect_and_parse``: content is the text before the section) and streamed
  (``parse_streaming_increment``: the name first with ``arguments: ""``, then argument
  pieces, then what the end of generation still holds, ``serving_chat.py:1340-1411``). Call
  ids are Kimi's ``functions.NAME:N``, N counting on from the calls in the history
  (``serving_chat.py:1052-1070``). ``tool_choice`` ``required`` or a named tool is 0.5.9's
  JSON-array path (``serving_chat.py:1083-1117``); the stand-in streams such calls whole once
  the array closes (0.5.9's ``JsonArrayParser`` streams pieces). Other ``--tool-call-parser``
  choices are accepted and find no calls.

**Example:**

.. code:: python

    reasoning, text = ReasoningParser("kimi_k2", False, True).parse_non_stream("hm</think> Hi")
"""

from __future__ import annotations

import json
import re

THINK_TOKENS = {  # reasoning_parser.py:375-390
    "deepseek-r1": ("<think>", "</think>", True), "deepseek-v3": ("<think>", "</think>", False),
    "glm45": ("<think>", "</think>", False), "kimi": ("◁think▷", "◁/think▷", False),
    "kimi_k2": ("<think>", "</think>", False), "qwen3": ("<think>", "</think>", False),
    "qwen3-thinking": ("<think>", "</think>", False), "minimax": ("<think>", "</think>", False),
    "step3": ("<think>", "</think>", True), "step3p5": ("<think>", "</think>", True),
    "nano_v3": ("<think>", "</think>", False), "interns1": ("<think>", "</think>", False),
}
ALWAYS_FORCED = {"deepseek-r1", "step3", "step3p5", "kimi"}  # detectors that ignore the request's
FORCED = {"qwen3-thinking", "minimax"}  # ReasoningParser overrides force_reasoning


class Detector:
    """``BaseReasoningFormatDetector`` (reasoning_parser.py:19-136)."""

    def __init__(self, start: str, end: str, force: bool, stream_reasoning: bool):
        self.start, self.end, self.in_reasoning = start, end, force
        self.stream_reasoning = stream_reasoning
        self.buffer, self.stripped_start = "", False

    def detect_and_parse(self, text: str) -> tuple[str, str]:
        if not (self.in_reasoning or self.start in text):
            return "", text
        processed = text.replace(self.start, "").strip()
        if self.end not in processed:  # truncated before the end token
            return processed, ""
        reasoning, normal = processed.split(self.end, 1)
        return reasoning, normal.strip()

    def parse_streaming_increment(self, new_text: str) -> tuple[str, str]:
        self.buffer += new_text
        current = self.buffer
        if any(token.startswith(current) and token != current for token in (self.start, self.end)):
            return "", ""
        if not self.stripped_start and self.start in current:
            current = current.replace(self.start, "")
            self.stripped_start = True
            self.in_reasoning = True
        if self.in_reasoning and self.end in current:
            at = current.find(self.end)
            self.buffer, self.in_reasoning = "", False
            return current[:at].rstrip(), current[at + len(self.end):]
        if self.in_reasoning:
            if self.stream_reasoning:
                self.buffer = ""
                return current, ""
            return "", ""
        self.buffer = ""
        return "", current


class ReasoningParser:
    """``ReasoningParser`` (reasoning_parser.py:364-437)."""

    def __init__(self, model_type: str, stream_reasoning: bool, force_reasoning: bool):
        start, end, always = THINK_TOKENS.get(model_type.lower(), ("<think>", "</think>", False))
        force = True if always or model_type.lower() in FORCED else force_reasoning
        if model_type.lower() == "kimi":
            force = False  # KimiDetector passes force_reasoning=False whatever it is given
        self.detector = Detector(start, end, force, stream_reasoning)
        self.detector.in_reasoning = force

    @staticmethod
    def tokens(model_type: str) -> tuple[str, str]:
        start, end, _ = THINK_TOKENS.get(model_type.lower(), ("<think>", "</think>", False))
        return start, end

    def parse_non_stream(self, text: str) -> tuple[str, str]:
        return self.detector.detect_and_parse(text)

    def parse_stream_chunk(self, text: str) -> tuple[str, str]:
        return self.detector.parse_streaming_increment(text)


def tool_call(call_id, index, name, arguments) -> dict:
    """A ``ToolCall`` (protocol.py:457-463)."""
    return {"id": call_id, "index": index, "type": "function",
            "function": {"name": name, "arguments": arguments}}


class FunctionCallParser:
    """``FunctionCallParser`` with ``KimiK2Detector`` (kimik2_detector.py), and the JSON-array path."""

    BOT, EOT = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
    CALL, CALL_END = "<|tool_call_begin|>", "<|tool_call_end|>"
    WHOLE = re.compile(r"<\|tool_call_begin\|>\s*(?P<id>[\w\.]+:\d+)\s*<\|tool_call_argument_begin\|>"
                       r"\s*(?P<args>\{.*?\})\s*<\|tool_call_end\|>", re.DOTALL)
    PORTION = re.compile(r"<\|tool_call_begin\|>\s*(?P<id>[\w\.]+:\d+)\s*<\|tool_call_argument_begin\|>"
                         r"\s*(?P<args>\{.*)", re.DOTALL)
    ID = re.compile(r"^(?:functions\.)?(?P<name>[\w\.]+):(?P<index>\d+)$")

    def __init__(self, tools: list[dict], parser: str, tool_choice="auto"):
        self.tools, self.parser = tools, parser
        self.json_array = tool_choice == "required" or isinstance(tool_choice, dict)
        self.buffer, self.last_arguments = "", ""
        self.current, self.name_sent = -1, False
        self.prev_calls: list[dict] = []
        self.streamed: list[str] = []

    def call_id(self, name: str, index: int, history: int) -> str:
        """``_process_tool_call_id`` (serving_chat.py:1052-1070)."""
        if self.parser != "kimi_k2":
            import uuid
            return f"call_{uuid.uuid4().hex[:24]}"
        return f"functions.{name}:{history + index}"

    def has_tool_call(self, text: str) -> bool:
        if self.json_array:
            return True  # serving_chat.py:1083-1089: the constrained output is the calls
        return bool(self.tools) and self.parser == "kimi_k2" and self.BOT in text

    def parse_non_stream(self, text: str, history: int) -> tuple[str, list[dict] | None]:
        if self.json_array:  # serving_chat.py:1090-1117
            try:
                calls = json.loads(text)
            except ValueError:
                return text, None
            return "", [tool_call(self.call_id(c["name"], i, history), i, c["name"],
                                  json.dumps(c["parameters"], ensure_ascii=False))
                        for i, c in enumerate(calls)]
        calls = []
        for function_id, arguments in self.WHOLE.findall(text):
            match = self.ID.match(function_id)
            if match:
                name, index = match.group("name"), int(match.group("index"))
                calls.append(tool_call(self.call_id(name, index, history), index, name, arguments))
        if not calls:
            return text, None
        return text[:text.find(self.BOT)], calls

    def parse_stream_chunk(self, new_text: str, history: int) -> tuple[str, list[dict]]:
        """``parse_streaming_increment``, with the serving layer's ids (serving_chat.py:1292-1316)."""
        if self.json_array:
            self.buffer += new_text
            try:
                calls = json.loads(self.buffer)
            except ValueError:
                return "", []
            self.buffer = ""
            out = []
            for i, c in enumerate(calls):
                out.append(tool_call(self.call_id(c["name"], i, history), i, c["name"], ""))
                out.append(tool_call(None, i, None, json.dumps(c["parameters"], ensure_ascii=False)))
            return "", out
        if self.parser != "kimi_k2":
            return new_text, []
        self.buffer += new_text
        current = self.buffer
        if self.BOT not in current and self.CALL not in current:
            self.buffer = ""
            for token in (self.EOT, self.CALL_END):
                new_text = new_text.replace(token, "")
            return new_text, []
        calls = []
        match = self.PORTION.search(current)
        if not match:
            return "", calls
        ident = self.ID.match(match.group("id"))
        if not ident:
            return "", calls
        name, arguments = ident.group("name"), match.group("args")
        if self.current == -1:
            self.current, self.prev_calls, self.streamed = 0, [], [""]
        while len(self.prev_calls) <= self.current:
            self.prev_calls.append({})
        while len(self.streamed) <= self.current:
            self.streamed.append("")
        if not self.name_sent:
            calls.append(tool_call(self.call_id(name, self.current, history), self.current, name, ""))
            self.name_sent = True
            self.prev_calls[self.current] = {"name": name, "arguments": {}}
            return "", calls
        diff = (arguments[len(self.last_arguments):] if arguments.startswith(self.last_arguments)
                else arguments)
        piece = diff.split(self.CALL_END, 1)[0]
        if piece:
            calls.append(tool_call(None, self.current, None, piece))
            self.last_arguments += diff
            self.streamed[self.current] += piece
        whole = arguments.split(self.CALL_END, 1)[0]
        try:
            self.prev_calls[self.current]["arguments"] = json.loads(whole)
        except ValueError:
            return "", calls
        end = re.search(r"<\|tool_call_begin\|>.*?<\|tool_call_end\|>", current, re.DOTALL)
        self.buffer = current[end.end():] if end else ""
        self.current += 1
        self.last_arguments, self.name_sent = "", False
        return "", calls

    def unstreamed_arguments(self) -> dict | None:
        """``_check_for_unstreamed_tool_args`` (serving_chat.py:1340-1411)."""
        if not self.prev_calls or not self.streamed:
            return None
        index = len(self.prev_calls) - 1
        if index >= len(self.streamed):
            return None
        expected = json.dumps(self.prev_calls[index].get("arguments", {}), ensure_ascii=False)
        actual = self.streamed[index]
        remaining = expected.replace(actual, "", 1) if actual in expected else ""
        return tool_call(None, index, None, remaining) if remaining else None
