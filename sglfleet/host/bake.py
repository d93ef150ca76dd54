"""
The bake: once a release passed its start-up gate and serves traffic again,
sample its ``/metrics`` for a while and judge it against thresholds and against
the host's own figures under the release it served before.

What is read, and the SGLang 0.5.9 code each reading relies on:

- requests and errors: ``sglang:num_requests_total`` (set when a request
  finishes, ``srt/managers/tokenizer_manager.py:1945-2006``) and
  ``sglang:http_responses_total{endpoint,status_code}`` (counted per answer by
  the middleware ``--enable-metrics`` installs, ``srt/utils/common.py:1604-1660``):
  the error rate is the share of 5xx answers to generation endpoints, plus
  ``sglang:num_aborted_requests_total`` (``tokenizer_manager.py:1315-1324``);
- TTFT and inter-token p99: the difference of the two histograms
  ``sglang:time_to_first_token_seconds`` and ``sglang:inter_token_latency_seconds``
  between the first and the last sample (``srt/metrics/collector.py:1191-1262``;
  the ITL histogram counts tokens, ``collector.py:1381-1394``);
- accept length and generation throughput: the gauges ``sglang:spec_accept_length``
  and ``sglang:gen_throughput``, set every ``decode_log_interval`` decode passes
  (``srt/managers/scheduler_metrics_mixin.py:304-474``); a 0.0 means no window
  was logged yet (the first prefill publishes the defaults,
  ``scheduler_metrics_mixin.py:300``) and is not a figure. Where the server
  counts its verify passes (the counter ``sglang:spec_verify_calls_total``, from
  0.5.14 on, as observed on an H200), the accept length is exact over the bake
  instead: the difference of ``sglang:generation_tokens_total`` over that of the
  counter, the way ``meta_info`` divides a request's tokens by its verify steps.

The verdict is ``pass``, ``fail`` or ``inconclusive`` (no request during the
bake: nothing to judge).

**Example:**

.. code:: python

    figures = measure(samples, speculative=True)
    verdict, reasons = judge(figures, baseline, settings)
"""

from __future__ import annotations

import time

from . import prometheus, service
from .gate import GateFailed, GateSettings
from .client import request
from .layout import LAYOUT, Layout

GENERATION_ENDPOINTS = ("/generate", "/v1/completions", "/v1/chat/completions")
# A server that stops answering /metrics for this many samples in a row fails the bake.
MISSED_SAMPLES = 3

# figure -> (label, unit, "lower" or "higher" is better)
FIGURES = {
    "ttft_p99_s": ("TTFT p99", "s", "lower"),
    "itl_p99_s": ("inter-token p99", "s", "lower"),
    "error_rate": ("error rate", "", "lower"),
    "spec_accept_length": ("accept length", "", "higher"),
    "gen_throughput": ("generation throughput", "tok/s", "higher"),
}


def sample(base: str, settings: GateSettings, restarts_at_start: int, layout: Layout = LAYOUT,
           clock=time.monotonic, sleep=time.sleep) -> list[dict]:
    """
    Scrape ``/metrics`` every ``interval_s`` for ``bake_s``; return the parsed samples.

    Raises ``GateFailed`` when the unit crashes or ``/metrics`` stops answering.
    """
    samples, missed = [], 0
    deadline = clock() + settings.bake_s
    while True:
        unit = service.properties(layout)
        if unit.get("ActiveState") != "active" or int(unit.get("NRestarts") or 0) > restarts_at_start:
            raise GateFailed("bake", f"{layout.unit} stopped serving during the bake "
                                     f"({unit.get('ActiveState')}, {unit.get('SubState')})")
        status, text = request(f"{base}/metrics", timeout=10.0)
        if status == 200:
            samples.append(prometheus.parse(text))
            missed = 0
        else:
            missed += 1
            if missed >= MISSED_SAMPLES:
                raise GateFailed("bake", f"/metrics did not answer {missed} times in a row "
                                         f"(last: {status or text[:200]})")
        if clock() >= deadline:
            return samples
        sleep(min(settings.interval_s, max(0.0, deadline - clock())))


def _delta(first: dict, last: dict, name: str, where=None) -> float | None:
    before, after = prometheus.total(first, name, where), prometheus.total(last, name, where)
    if after is None:
        return None
    return after if before is None or after < before else after - before


def measure(samples: list[dict], speculative: bool) -> dict:
    """
    The bake's figures from its samples (first to last); a figure without data is absent.

    + samples: parsed ``/metrics`` scrapes, in order
    + speculative: whether the release runs speculative decoding
    """
    if len(samples) < 2:
        return {"requests": 0}
    first, last = samples[0], samples[-1]
    figures: dict = {"requests": int(_delta(first, last, "sglang:num_requests_total") or 0)}

    generation = (lambda labels: labels.get("endpoint") in GENERATION_ENDPOINTS)
    answers = _delta(first, last, "sglang:http_responses_total", generation)
    errors = _delta(first, last, "sglang:http_responses_total",
                    lambda labels: generation(labels) and labels.get("status_code", "").startswith("5"))
    aborted = _delta(first, last, "sglang:num_aborted_requests_total") or 0.0
    if answers:
        figures["error_rate"] = round(((errors or 0.0) + aborted) / (answers + aborted), 4)
    elif figures["requests"]:
        figures["error_rate"] = round(aborted / (figures["requests"] + aborted), 4)

    for figure, name in (("ttft_p99_s", "sglang:time_to_first_token_seconds"),
                         ("itl_p99_s", "sglang:inter_token_latency_seconds")):
        value = prometheus.quantile(0.99, prometheus.delta_buckets(first, last, name))
        if value is not None:
            figures[figure] = round(value, 4)

    gauges = {"gen_throughput": "sglang:gen_throughput"}
    verifies = _delta(first, last, "sglang:spec_verify_calls_total") if speculative else None
    if verifies:
        tokens = _delta(first, last, "sglang:generation_tokens_total") or 0.0
        figures["spec_accept_length"] = round(tokens / verifies, 3)
    elif speculative and verifies is None:  # no counter (0.5.9): the decode-stats gauge
        gauges["spec_accept_length"] = "sglang:spec_accept_length"
    for figure, name in gauges.items():
        # Distinct decode-stats windows only, and never the 0.0 of "none logged yet".
        values = [value for value in (prometheus.gauge(s, name) for s in samples[1:]) if value]
        if values:
            figures[figure] = round(sum(values) / len(values), 3)
    return figures


def judge(figures: dict, baseline: dict | None, settings: GateSettings) -> tuple[str, list[str]]:
    """
    ``("pass" | "fail" | "inconclusive", reasons)`` for a bake's figures. Pure.

    + figures: from ``measure``
    + baseline: the figures of the release the host served before, or None
    + settings: the thresholds and the tolerance

    **Example:**

    .. code:: python

        judge({"requests": 90, "ttft_p99_s": 0.9}, {"ttft_p99_s": 0.2}, GateSettings())
        # ("fail", ["TTFT p99 0.9 s is 350% above 0.2 s under the previous release (tolerance 10%)"])
    """
    if not figures.get("requests"):
        return "inconclusive", ["no request finished during the bake: no data to judge"]
    reasons = []
    limits = {
        "ttft_p99_s": settings.max_ttft_p99_s,
        "itl_p99_s": settings.max_itl_p99_s,
        "error_rate": settings.max_error_rate,
        "spec_accept_length": settings.min_spec_accept_length,
    }
    for figure, limit in limits.items():
        value = figures.get(figure)
        if value is None or limit is None:
            continue
        label, unit, better = FIGURES[figure]
        if (value > limit) if better == "lower" else (value < limit):
            bound = "above the limit" if better == "lower" else "below the minimum"
            reasons.append(f"{label} {value:g}{' ' + unit if unit else ''} is {bound} {limit:g}")
    tolerance = settings.max_regression
    for figure in ("ttft_p99_s", "itl_p99_s", "spec_accept_length"):
        value, before = figures.get(figure), (baseline or {}).get(figure)
        if value is None or not before:
            continue
        label, unit, better = FIGURES[figure]
        change = (value - before) / before
        worse = change > tolerance if better == "lower" else -change > tolerance
        if worse:
            reasons.append(f"{label} {value:g}{' ' + unit if unit else ''} is {abs(change):.0%} "
                           f"{'above' if better == 'lower' else 'below'} {before:g}{' ' + unit if unit else ''} "
                           f"under the previous release (tolerance {tolerance:.0%})")
    return ("fail" if reasons else "pass"), reasons


def describe(figures: dict) -> str:
    """The figures in one line, for the run's summary and ``sglfleet status``."""
    parts = [f"{figures.get('requests', 0)} requests"]
    for figure, (label, unit, _) in FIGURES.items():
        if figures.get(figure) is not None:
            parts.append(f"{label} {figures[figure]:g}{' ' + unit if unit else ''}")
    return ", ".join(parts)
