"""
The chat template of the served model, rendered as sglang 0.5.9 renders it for ``/v1/chat/completions``.

0.5.9 has no conversation template for a model whose path names none
(``TemplateManager.load_chat_template``, ``srt/managers/template_manager.py:102-147``), so it
falls back to the tokenizer's own: ``chat_template`` of the model's
``tokenizer_config.json`` (a dict of named templates: the one named ``default``, else the first),
rendered by transformers' ``apply_chat_template`` with jinja2
(``serving_chat.py:361-523``): an ``ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True)`` with ``raise_exception``, ``strftime_now`` and a ``tojson`` filter, and
``messages``, ``tools``, ``add_generation_prompt=True``, ``reasoning_effort``, the special tokens
and the request's ``chat_template_kwargs`` as variables.

- A message's ``None`` content renders as ``""`` (``serving_chat.py:421-422``); a list of parts
  as its text parts, joined (the ``string`` content format,
  ``parser/jinja_template_utils.py``); an assistant tool call's JSON arguments as a dict
  (``serving_chat.py:435-451``).
- A template that raises (``raise_exception``) is a ``ValueError`` (400) (``serving_chat.py:496-499``);
  no template at all is transformers' ``ValueError`` (400 as well).
- ``force_reasoning``: the template opens the assistant turn with ``<think>``
  (``template_manager.py:86-100``).

Where the model is not staged (no ``tokenizer_config.json``), the stand-in serves as Kimi K2.5
(``standin_model.model_config``), and so renders ``KIMI_K25_TEMPLATE``: an abridgement of
Kimi K2.5's template (its turn markers, its tool declaration, its ``<think>`` opening), not
the original. jinja2 is what transformers and so sglang render with; the dev stacks carry it
for the stand-in.

**Example:**

.. code:: python

    template = ChatTemplate.load("/models/tiny")
    prompt = template.render([{"role": "user", "content": "Hi"}], tools=None)
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime
from pathlib import Path

logger = logging.getLogger("sglang.standin")

# transformers' message when a tokenizer has no template (tokenization_utils_base.py, get_chat_template)
NO_TEMPLATE = ("Cannot use chat template functions because tokenizer.chat_template is not set and no "
               "template argument was passed! For information about writing templates and setting the "
               "tokenizer.chat_template attribute, please see the documentation at "
               "https://huggingface.co/docs/transformers/main/en/chat_templating")
KIMI_K25_TEMPLATE = (
    "{%- if tools -%}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson(separators=(',', ':')) }}"
    "<|im_end|>{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}<|im_user|>user<|im_middle|>"
    "{%- elif message['role'] == 'assistant' -%}<|im_assistant|>assistant<|im_middle|>"
    "{%- else -%}<|im_system|>{{ message['role'] }}<|im_middle|>{%- endif -%}"
    "{{ message['content'] }}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>"
    "{%- if thinking is defined and thinking is false -%}<think></think>{%- else -%}<think>{%- endif -%}"
    "{%- endif -%}")
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class ChatTemplate:
    """The served model's chat template (or its absence), and its special tokens."""

    def __init__(self, source: str | None, special: dict[str, str]):
        self.source, self.special = source, special
        self._compiled = None

    @classmethod
    def load(cls, folder: str | None) -> ChatTemplate:
        """From ``folder``'s tokenizer_config.json; Kimi K2.5's abridged when the model is not staged."""
        try:
            config = json.loads((Path(folder) / "tokenizer_config.json").read_text())
        except (OSError, ValueError, TypeError):
            logger.info("Using default HuggingFace chat template with detected content format: string "
                        "(stand-in: no tokenizer_config.json, Kimi K2.5's template abridged)")
            return cls(KIMI_K25_TEMPLATE, {})
        template = config.get("chat_template")
        if isinstance(template, list):  # transformers' saved form of named templates
            template = {item["name"]: item["template"] for item in template}
        if isinstance(template, dict):  # template_manager.py:327-348
            template = template.get("default") or next(iter(template.values()), None)
        special = {}
        for name in SPECIAL_TOKENS:
            value = config.get(name)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                special[name] = value
        if template is None:
            logger.warning("No HuggingFace chat template found")
        else:
            logger.info("Using default HuggingFace chat template with detected content format: string")
        return cls(template, special)

    @property
    def force_reasoning(self) -> bool:
        """template_manager.py:94: the template itself opens the assistant turn in reasoning."""
        return self.source is not None and re.search(
            r"<\|im_start\|>assistant\\n<think>\\n", self.source) is not None

    def compiled(self):
        """transformers' ``_compile_jinja_template``: its sandbox, filters and globals."""
        if self._compiled is None:
            from jinja2 import TemplateError
            from jinja2.ext import loopcontrols
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message):
                raise TemplateError(message)

            def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
                return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                                  sort_keys=sort_keys)

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[loopcontrols])
            env.filters["tojson"] = tojson
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            self._compiled = env.from_string(self.source)
        return self._compiled

    def render(self, messages: list[dict], tools: list[dict] | None, reasoning_effort=None,
               kwargs: dict | None = None) -> str:
        """The prompt text; ValueError where 0.5.9 answers 400."""
        if self.source is None:
            raise ValueError(NO_TEMPLATE)
        from jinja2 import TemplateError
        variables = {**self.special, **(kwargs or {})}
        try:
            return self.compiled().render(messages=template_messages(messages), tools=tools,
                                          documents=None, add_generation_prompt=True,
                                          reasoning_effort=reasoning_effort, **variables)
        except TemplateError as error:  # serving_chat.py:496-499
            raise ValueError(str(error)) from error


def template_messages(messages: list[dict]) -> list[dict]:
    """
    The messages as 0.5.9 hands them to the template (serving_chat.py:420-458): a last
    assistant message with text becomes the user's (``_handle_last_assistant_message``, 124-160;
    the stand-in does not continue one either).
    """
    out = []
    for message in messages:
        message = dict(message)
        content = message.get("content")
        if content is None:
            message["content"] = ""
        elif isinstance(content, list):
            message["content"] = " ".join(part.get("text", "") for part in content
                                          if isinstance(part, dict) and part.get("type") == "text")
        if message.get("role") == "assistant" and isinstance(message.get("tool_calls"), list):
            calls = []
            for call in message["tool_calls"]:
                call = dict(call)
                function = dict(call.get("function") or {})
                if isinstance(function.get("arguments"), str):
                    try:
                        function["arguments"] = json.loads(function["arguments"])
                    except ValueError as error:  # orjson.loads raises a ValueError: 400
                        raise ValueError(str(error)) from error
                call["function"] = function
                calls.append(call)
            message["tool_calls"] = calls
        out.append(message)
    if out and out[-1].get("role") == "assistant" and isinstance(out[-1].get("content"), str):
        out[-1] = {"role": "user", "content": out[-1]["content"]}
    return out
