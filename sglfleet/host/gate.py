"""
The start-up gate: after a restart, is the release serving as it should?

It passes only when, in order:

1. the unit is active and has not crashed (a crash fails at once, not at the
   end of the budget);
2. ``/health`` answers 200 within the warm-up budget. SGLang 0.5.9 opens its
   port only once the model is loaded (``srt/entrypoints/http_server.py:1893-1974``:
   ``_launch_subprocesses`` returns before ``uvicorn.run``), so a refused
   connection means "still loading"; then ``/health`` is 503 while
   ``server_status`` is ``Starting``, until its own warm-up generation is done
   (http_server.py:478-479, 1759-1769), and once up each ``/health`` runs a
   one-token generation and takes 1 to 20 s (http_server.py:487-540, ``HEALTH_CHECK_TIMEOUT`` 20);
3. real generations succeed: every prompt of the gate, ``max_new_tokens`` each
   with ``ignore_eos``, answers 200 with text; then one generation with
   sglang's default sampling (temperature 1.0, ``srt/sampling/sampling_params.py:46``),
   as clients mostly send. Warm-up, ``/health`` and the prompts are greedy, so
   whatever only the sampler compiles is compiled here, while the host is out of
   the router, and lands in the compile cache that later hosts get: on an H200
   with 0.5.14 the first sampled request after a cold start waited 77 s for
   flashinfer's sampling module, the scheduler serving nothing meanwhile;
4. with speculative decoding, the accept length of those generations, summed
   from each answer's ``meta_info`` (``completion_tokens / spec_verify_ct``,
   ``srt/managers/tokenizer_manager.py:1840-1857``), is at least the minimum.
   The ``sglang:spec_accept_length`` gauge is no use here: it is published as
   0.0 by the first prefill and set for real only every ``decode_log_interval``
   (40) decode passes (``srt/managers/scheduler_metrics_mixin.py:300, 369-436``;
   ``scheduler_output_processor_mixin.py:532-536``);
5. with ``--enable-metrics``, ``/metrics`` answers and its
   ``sglang:generation_tokens_total`` counts the gate's tokens: the tokenizer's
   counters are set when a request finishes (``tokenizer_manager.py:1945-2006``),
   so they are there by then.

A rank above 0 of a group (``node_rank``) stops after 2.: it has no API, and its
``/health`` turns 200 only once it joined its group; its head's gate generates.

**Example:**

.. code:: python

    figures = startup(release, GateSettings.load(release_id), restarts_at_start)
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field, fields

from . import prometheus, releases, service
from .client import api_key, base_url, request
from .layout import LAYOUT, Layout

# 0.5.9's /health waits up to HEALTH_CHECK_TIMEOUT (20 s) for its generation.
HEALTH_TIMEOUT_S = 25.0
GENERATE_TIMEOUT_S = 120.0
DEFAULT_PROMPTS = (
    "The capital of France is",
    "Write a Python function that reverses a string.",
    "Explain in two sentences why the sky is blue.",
    "List the first ten prime numbers:",
)


class GateFailed(Exception):
    """A check failed: ``check`` names it, the message says what was seen."""

    def __init__(self, check: str, detail: str):
        super().__init__(f"{check}: {detail}")
        self.check = check


@dataclass(frozen=True)
class GateSettings:
    """
    The fleet's thresholds, rendered by the controller into ``releases/<id>/gate.json``,
    so a gate run by hand on a host judges as the rollout does.

    + warmup_s: how long ``/health`` may take to turn 200 after a restart
    + poll_s: how often the gate looks at the unit and ``/health`` meanwhile
    + prompts, max_new_tokens: the gate's generations (4 x 64 = 256 tokens by default)
    + sampled_tokens: the tokens of one sampled generation after them (0: none)
    + min_spec_accept_length: the lowest accept length that passes, or None
    + bake_s, interval_s: how long the bake samples ``/metrics``, and how often
    + max_regression: how much worse than under the previous release a figure may be (0.10: 10 %)
    + on_inconclusive: "fail" or "pass", when the bake has no data
    + max_ttft_p99_s, max_itl_p99_s, max_error_rate: absolute limits, or None
    """

    warmup_s: float = 1800.0
    poll_s: float = 1.0
    prompts: tuple = DEFAULT_PROMPTS
    max_new_tokens: int = 64
    sampled_tokens: int = 16
    min_spec_accept_length: float | None = None
    bake_s: float = 0.0
    interval_s: float = 30.0
    max_regression: float = 0.10
    on_inconclusive: str = "fail"
    max_ttft_p99_s: float | None = None
    max_itl_p99_s: float | None = None
    max_error_rate: float | None = 0.01
    extra: dict = field(default_factory=dict, compare=False)  # keys of a newer controller

    @classmethod
    def load(cls, release_id: str, layout: Layout = LAYOUT) -> "GateSettings":
        """The release's ``gate.json``; the defaults for a release that has none."""
        data = releases.read(release_id, "gate.json", layout, default={}) or {}
        known = {f.name for f in fields(cls)} - {"extra"}
        settings = {key: value for key, value in data.items() if key in known}
        if "prompts" in settings:
            settings["prompts"] = tuple(settings["prompts"])
        return cls(**settings, extra={key: value for key, value in data.items() if key not in known})

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("extra")
        data["prompts"] = list(self.prompts)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


def speculative(release: dict) -> bool:
    return bool(release.get("launch", {}).get("speculative_algorithm"))


# sglang 0.5.9 disaggregation/utils.py:23: a server of one role serves a request alone, transferring
# nothing, when its bootstrap_host is this (prefill.py:215, decode.py:349-353), as its own warm-up
# does (http_server.py:1770-1790); without a bootstrap room it answers 400 (scheduler.py:1533-1541).
FAKE_BOOTSTRAP_HOST = "2.2.2.2"


def role(release: dict) -> str | None:
    """The release's PD role (``"prefill"``, ``"decode"``), or None for a whole server."""
    return release.get("launch", {}).get("disaggregation_mode")


def solo(release: dict) -> dict:
    """What a gate request adds to be served by a PD server alone (its pair is the rollout unit's business)."""
    return {"bootstrap_host": FAKE_BOOTSTRAP_HOST, "bootstrap_room": 0} if role(release) else {}


def node_rank(release: dict) -> int:
    """
    The release's rank in its group (0: the head, or a server on one host). sglang 0.5.9 starts a rank
    above 0 without tokenizer or API: once its schedulers joined the group it serves a dummy ``/health``
    that answers 200 (``srt/entrypoints/engine.py:1040-1057``, ``srt/utils/common.py:2656-2712``).
    """
    return int(release.get("launch", {}).get("node_rank") or 0)


def metrics_enabled(release: dict) -> bool:
    return bool(release.get("launch", {}).get("enable_metrics"))


# The EAGLE-3 delegation methods sglfleet's patch puts into KimiK25ForConditionalGeneration.
DELEGATION = ("set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head")
# The lines real sglang logs for each cause (0.5.14 on an H200: tests/data/gpu/kimi-k25-h200-sglang-0.5.14-*.log).
_LACKS = re.compile(r"AttributeError: '(\w+)' object has no attribute '(" + "|".join(DELEGATION) + ")'")
_BROKEN = re.compile(r"Ignore import error when loading sglang\.srt\.models\.(\w+): (.*\(\S+\.py, line \d+\))")
_UNKNOWN = re.compile(r"Cannot find model module\. '(\w+)'|Model architectures \['?(\w+)")
_EXCEPTION = re.compile(r"^(?:\[[^\]]*\] )?(?:\w+\.)*(\w*(?:Error|Exception)): (.+)$")


def start_failure_cause(lines: list[str]) -> str | None:
    """
    What ended a failed start, in one line, read from the server's log; None when it names nothing.

    In order: a model class that lacks an EAGLE-3 delegation method (the scheduler's
    AttributeError), a model file that does not parse (sglang ignores the import error,
    then knows no such model class), else the last exception the log names.

    + lines: the unit's journal, oldest first

    **Example:**

    .. code:: python

        start_failure_cause(service.journal_lines(layout))
        # "the model class KimiK25ForConditionalGeneration lacks get_embed_and_head: the EAGLE-3 patch did not apply"
    """
    for line in reversed(lines):
        if found := _LACKS.search(line):
            return f"the model class {found[1]} lacks {found[2]}: the EAGLE-3 patch did not apply"
    unknown = next((m[1] or m[2] for line in reversed(lines) if (m := _UNKNOWN.search(line))), None)
    broken = next((m for line in reversed(lines) if (m := _BROKEN.search(line))), None)
    if unknown and broken:
        return (f"sglang cannot import srt/models/{broken[1]}.py ({broken[2]}), so it does not know "
                f"{unknown}: the file does not parse (methods appended after EntryClass?); "
                f"reinstall the stack's sglang and let sglfleet patch it")
    for line in reversed(lines):
        if found := _EXCEPTION.match(line.strip()):
            return f"the server ended with {found[1]}: {found[2][:200]}"
    return None


def wait_until_healthy(base: str, settings: GateSettings, restarts_at_start: int, layout: Layout) -> None:
    deadline = time.monotonic() + settings.warmup_s
    last = "no answer yet"
    while True:
        unit = service.properties(layout)
        if unit.get("ActiveState") == "failed":
            cause = start_failure_cause(service.journal_lines(layout))
            raise GateFailed("unit", f"{layout.unit} failed ({unit.get('SubState')})" + (f": {cause}" if cause else ""))
        if int(unit.get("NRestarts") or 0) > restarts_at_start:
            cause = start_failure_cause(service.journal_lines(layout))
            raise GateFailed("unit", f"{layout.unit} crashed and was restarted by systemd"
                             + (f": {cause}" if cause else ""))
        if unit.get("ActiveState") == "active":
            status, text = request(f"{base}/health", timeout=HEALTH_TIMEOUT_S)
            if status == 200:
                return
            last = ("nothing listens yet: the model is loading" if status == 0 and "refused" in text
                    else f"/health answered {status or text}")
        else:
            last = f"{layout.unit} is {unit.get('ActiveState')} ({unit.get('SubState')})"
        if time.monotonic() >= deadline:
            raise GateFailed("health", f"not ready within {settings.warmup_s:g} s warm-up ({last})")
        time.sleep(settings.poll_s)


def generate(base: str, settings: GateSettings, key: str | None, extra: dict | None = None) -> list[dict]:
    """Each prompt's ``meta_info``; raises GateFailed on an error or an empty answer."""
    metas = []
    for prompt in settings.prompts:
        body = {"text": prompt, "sampling_params": {
            "max_new_tokens": settings.max_new_tokens, "temperature": 0, "ignore_eos": True}, **(extra or {})}
        status, text = request(f"{base}/generate", body, timeout=GENERATE_TIMEOUT_S, key=key)
        if status != 200:
            raise GateFailed("generate", f"/generate answered {status or text[:200]}")
        try:
            answer = json.loads(text)
            generated, meta = answer["text"], answer["meta_info"]
        except (ValueError, KeyError, TypeError):
            raise GateFailed("generate", f"/generate answered no text: {text[:200]}") from None
        if not generated:
            raise GateFailed("generate", "/generate returned an empty completion")
        metas.append(meta)
    return metas


def generate_sampled(base: str, settings: GateSettings, key: str | None, deadline: float,
                     extra: dict | None = None) -> float:
    """The sampled generation's seconds; it may take what is left of the warm-up budget, for a JIT."""
    started = time.monotonic()
    body = {"text": settings.prompts[0], "sampling_params": {"max_new_tokens": settings.sampled_tokens},
            **(extra or {})}
    status, text = request(f"{base}/generate", body, timeout=max(deadline - started, GENERATE_TIMEOUT_S), key=key)
    if status != 200:
        raise GateFailed("generate", f"the sampled /generate answered {status or text[:200]}")
    try:
        generated = json.loads(text)["text"]
    except (ValueError, KeyError, TypeError):
        raise GateFailed("generate", f"the sampled /generate answered no text: {text[:200]}") from None
    if not generated:
        raise GateFailed("generate", "the sampled /generate returned an empty completion")
    return round(time.monotonic() - started, 3)


def startup(release: dict, settings: GateSettings, restarts_at_start: int, layout: Layout = LAYOUT) -> dict:
    """
    Run the start-up gate against ``release``; return its figures, or raise ``GateFailed``.

    + release: the release's ``release.json``
    + settings: its ``gate.json``
    + restarts_at_start: the unit's restart count right after the restart, to tell a crash

    **Example:**

    .. code:: python

        startup(releases.read(release_id, "release.json"), GateSettings.load(release_id), 0)
        # {"requests": 4, "tokens": 256, "seconds": 3.1, "spec_accept_length": 2.8}
    """
    base = base_url(release)
    deadline = time.monotonic() + settings.warmup_s
    wait_until_healthy(base, settings, restarts_at_start, layout)
    if node_rank(release):
        return {}  # its group's head generates; a rank above 0 serves /health alone, once it joined


    started = time.monotonic()
    metas = generate(base, settings, api_key(layout), solo(release))
    tokens = sum(int(meta.get("completion_tokens") or 0) for meta in metas)
    figures = {"requests": len(metas), "tokens": tokens, "seconds": round(time.monotonic() - started, 3)}

    if speculative(release) and role(release) != "prefill":  # a prefill computes one token, and no draft
        verify = sum(int(meta.get("spec_verify_ct") or 0) for meta in metas)
        if not verify:
            raise GateFailed("generate", "meta_info holds no spec_verify_ct: speculative decoding is not running")
        figures["spec_accept_length"] = round(tokens / verify, 3)
        minimum = settings.min_spec_accept_length
        if minimum is not None and tokens / verify < minimum:
            raise GateFailed("accept length", f"{tokens / verify:.2f} over {tokens} tokens of "
                                              f"{len(metas)} generations is below {minimum:g}")

    if settings.sampled_tokens:
        figures["sampled_s"] = generate_sampled(base, settings, api_key(layout), deadline, solo(release))

    if metrics_enabled(release):
        status, text = request(f"{base}/metrics", timeout=10.0)
        if status != 200:
            raise GateFailed("metrics", f"/metrics answered {status or text[:200]}")
        counted = prometheus.total(prometheus.parse(text), "sglang:generation_tokens_total")
        if counted is None or counted < tokens:
            raise GateFailed("metrics", f"sglang:generation_tokens_total is {counted}, "
                                        f"below the gate's own {tokens} tokens")
    return figures
