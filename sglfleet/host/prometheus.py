"""
Read SGLang's ``/metrics`` (Prometheus text format): counters summed over label
sets, histogram quantiles from the difference of two scrapes.

SGLang 0.5.9 serves its metrics from ``prometheus_client`` in multiprocess
mode (``srt/utils/common.py:1553-1577``): a series is absent until first set,
and 0.5.23 adds labels (``is_streaming``) to some series, so every reading here
sums over label sets and treats an absent series as unknown, never as zero.

**Example:**

.. code:: python

    before, after = parse(text_then), parse(text_now)
    quantile(0.99, delta_buckets(before, after, "sglang:time_to_first_token_seconds"))
"""

from __future__ import annotations

import math
import re

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict[str, list[tuple[dict, float]]]:
    """
    The samples of an exposition: ``{name: [(labels, value), ...]}``.

    + text: the body of ``/metrics``
    """
    samples: dict[str, list[tuple[dict, float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(4))
        except ValueError:
            continue
        labels = dict(LABEL.findall(match.group(3) or ""))
        samples.setdefault(match.group(1), []).append((labels, value))
    return samples


def total(samples: dict, name: str, where=None) -> float | None:
    """
    The sum of ``name`` over its label sets (those ``where(labels)`` accepts), or None when absent.

    + samples: from ``parse``
    + name: e.g. ``"sglang:num_requests_total"``
    + where: a predicate on a sample's labels, or None for all
    """
    found = [value for labels, value in samples.get(name, []) if where is None or where(labels)]
    return sum(found) if found else None


def gauge(samples: dict, name: str) -> float | None:
    """A gauge's value (the largest over label sets, e.g. one per TP rank), or None when absent."""
    found = [value for _, value in samples.get(name, [])]
    return max(found) if found else None


def buckets(samples: dict, name: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts by upper bound, summed over label sets."""
    counts: dict[float, float] = {}
    for labels, value in samples.get(f"{name}_bucket", []):
        bound = math.inf if labels.get("le") in ("+Inf", "Inf") else float(labels.get("le", "nan"))
        counts[bound] = counts.get(bound, 0.0) + value
    return counts


def delta_buckets(before: dict, after: dict, name: str) -> dict[float, float]:
    """The observations between two scrapes, as cumulative bucket counts (a restart in between: ``after``)."""
    old, new = buckets(before, name), buckets(after, name)
    if any(new.get(bound, 0.0) < count for bound, count in old.items()):
        return new  # counters went back: the process restarted, its series began again
    return {bound: count - old.get(bound, 0.0) for bound, count in new.items()}


def quantile(q: float, cumulative: dict[float, float]) -> float | None:
    """
    The ``q`` quantile of a histogram as Prometheus' ``histogram_quantile`` computes it:
    linear inside the bucket that holds it; the highest finite bound if that is ``+Inf``.
    None without observations.

    + q: e.g. 0.99
    + cumulative: bucket upper bound -> cumulative count
    """
    bounds = sorted(cumulative)
    if not bounds or cumulative[bounds[-1]] <= 0:
        return None
    rank = q * cumulative[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower
