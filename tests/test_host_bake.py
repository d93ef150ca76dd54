"""
The host tool's reading of /metrics and its judging of a bake, as pure functions,
on Prometheus text in the shape sglang 0.5.9 serves it (prometheus_client in
multiprocess mode: labels sorted, histogram ``_sum`` first, series absent until set).
"""

import random

import pytest

from sglfleet.host import prometheus
from sglfleet.host.bake import describe, judge, measure
from sglfleet.host.gate import GateSettings

# sglang 0.5.9, srt/metrics/collector.py:1191-1262
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
               0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)
MODEL = 'model_name="kimi"'


def histogram(name: str, bounds, observations) -> list[str]:
    lines = [f"# TYPE {name} histogram", f"{name}_sum{{{MODEL}}} {float(sum(observations))}"]
    for bound in bounds:
        lines.append(f'{name}_bucket{{le="{float(bound)}",{MODEL}}} {float(sum(o <= bound for o in observations))}')
    lines.append(f'{name}_bucket{{le="+Inf",{MODEL}}} {float(len(observations))}')
    lines.append(f"{name}_count{{{MODEL}}} {float(len(observations))}")
    return lines


def exposition(requests: int, ttft: list[float], itl: list[float], errors: int = 0,
               accept_length: float | None = None, throughput: float | None = None,
               tokens: int | None = None, verify_calls: int | None = None) -> str:
    """/metrics as 0.5.9 renders it after ``requests`` finished requests; with
    ``verify_calls``, as 0.5.14 does, which also counts the verify passes."""
    lines = [
        "# HELP sglang:num_requests_total The number of requests.",
        "# TYPE sglang:num_requests_total counter",
        f"sglang:num_requests_total{{{MODEL}}} {float(requests)}",
        "# TYPE sglang:http_responses_total counter",
        f'sglang:http_responses_total{{endpoint="/generate",method="POST",status_code="200"}} '
        f"{float(requests - errors)}",
        'sglang:http_responses_total{endpoint="/health",method="GET",status_code="200"} 50.0',
    ]
    if errors:
        lines.append(f'sglang:http_responses_total{{endpoint="/generate",method="POST",status_code="503"}} '
                     f"{float(errors)}")
    lines += histogram("sglang:time_to_first_token_seconds", TTFT_BUCKETS, ttft)
    lines += histogram("sglang:inter_token_latency_seconds", ITL_BUCKETS, itl)
    sched = 'engine_type="unified",model_name="kimi",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    if accept_length is not None:
        lines.append(f"sglang:spec_accept_length{{{sched}}} {accept_length}")
    if throughput is not None:
        lines.append(f"sglang:gen_throughput{{{sched}}} {throughput}")
    if tokens is not None:
        lines += ["# TYPE sglang:generation_tokens_total counter",
                  f"sglang:generation_tokens_total{{{MODEL}}} {float(tokens)}"]
    if verify_calls is not None:
        lines += ["# TYPE sglang:spec_verify_calls_total counter",
                  f"sglang:spec_verify_calls_total{{{sched}}} {float(verify_calls)}"]
    return "\n".join(lines) + "\n"


def test_quantile_of_a_histogram_is_the_raw_quantile_within_its_bucket():
    rng = random.Random(7)
    for _ in range(20):
        samples = [rng.lognormvariate(-1.0, 0.8) for _ in range(rng.randint(50, 2000))]
        text = "\n".join(histogram("x", TTFT_BUCKETS, samples))
        estimate = prometheus.quantile(0.99, prometheus.buckets(prometheus.parse(text), "x"))
        true = sorted(samples)[int(0.99 * len(samples)) - 1]
        # The estimate lies in the bucket that holds the true p99 (or the one next to it).
        bounds = (0.0,) + TTFT_BUCKETS
        bucket = next(i for i, bound in enumerate(bounds) if true <= bound)
        assert bounds[max(bucket - 2, 0)] <= estimate <= bounds[min(bucket + 1, len(bounds) - 1)], (true, estimate)


def test_quantile_edge_cases_follow_prometheus():
    assert prometheus.quantile(0.99, {}) is None
    assert prometheus.quantile(0.99, {0.1: 0.0, float("inf"): 0.0}) is None
    # Everything above the highest finite bound: the highest finite bound.
    assert prometheus.quantile(0.99, {0.1: 0.0, 0.2: 0.0, float("inf"): 5.0}) == 0.2
    assert prometheus.quantile(0.5, {1.0: 2.0, 2.0: 4.0, float("inf"): 4.0}) == 1.0


def test_counters_sum_over_label_sets_and_absent_series_are_unknown():
    samples = prometheus.parse(exposition(10, [0.1] * 10, [0.01] * 100, errors=2))
    assert prometheus.total(samples, "sglang:http_responses_total") == 60.0
    assert prometheus.total(samples, "sglang:http_responses_total",
                            lambda labels: labels["endpoint"] == "/generate") == 10.0
    assert prometheus.total(samples, "sglang:num_aborted_requests_total") is None
    assert prometheus.gauge(samples, "sglang:spec_accept_length") is None


def test_measure_takes_the_difference_between_the_first_and_last_scrape():
    rng = random.Random(3)
    early_ttft = [rng.uniform(0.05, 0.15) for _ in range(100)]
    late_ttft = early_ttft + [rng.uniform(1.5, 1.9) for _ in range(100)]
    scrapes = [
        prometheus.parse(exposition(100, early_ttft, [0.01] * 1000)),
        prometheus.parse(exposition(150, early_ttft + late_ttft[100:150], [0.01] * 1500, accept_length=2.7)),
        prometheus.parse(exposition(200, late_ttft, [0.01] * 1500 + [0.05] * 500, errors=4,
                                    accept_length=2.9, throughput=410.0)),
    ]
    figures = measure(scrapes, speculative=True)
    assert figures["requests"] == 100
    # Only the bake's own requests, all slow: the early fast ones are not in the difference.
    assert 1.0 <= figures["ttft_p99_s"] <= 2.0
    assert 0.04 <= figures["itl_p99_s"] <= 0.06
    assert figures["error_rate"] == pytest.approx(4 / 100)
    assert figures["spec_accept_length"] == pytest.approx(2.8)  # two decode windows seen
    assert figures["gen_throughput"] == 410.0


def test_the_accept_length_comes_from_the_verify_counter_where_the_server_has_it():
    # 0.5.14: the gauge still says 2.9 from its last decode-stats window, but over the
    # bake 3000 tokens took 1500 verify passes: exactly 2.0, the figure that counts.
    scrapes = [prometheus.parse(exposition(100, [0.1] * 100, [0.01] * 900, accept_length=2.9,
                                           tokens=1000, verify_calls=400)),
               prometheus.parse(exposition(200, [0.1] * 200, [0.01] * 1800, accept_length=2.9,
                                           tokens=4000, verify_calls=1900))]
    assert measure(scrapes, speculative=True)["spec_accept_length"] == 2.0
    # No verify pass in the window: no figure, and not the gauge's stale one either.
    assert "spec_accept_length" not in measure([scrapes[1], scrapes[1]], speculative=True)


def test_without_the_counter_the_accept_length_is_the_gauges_mean():
    # 0.5.9 has no spec_verify_calls_total: the decode-stats gauge, as before.
    scrapes = [prometheus.parse(exposition(100, [0.1] * 100, [0.01] * 900, tokens=1000)),
               prometheus.parse(exposition(200, [0.1] * 200, [0.01] * 1800, accept_length=2.6,
                                           tokens=4000))]
    assert measure(scrapes, speculative=True)["spec_accept_length"] == 2.6


def test_a_gauge_at_zero_is_no_window_yet_not_a_figure():
    # 0.5.9 publishes every scheduler gauge as 0.0 at the first prefill
    # (scheduler_metrics_mixin.py:300), before any decode window is logged.
    scrapes = [prometheus.parse(exposition(1, [0.1], [0.01], accept_length=0.0, throughput=0.0)),
               prometheus.parse(exposition(3, [0.1] * 3, [0.01] * 9, accept_length=0.0, throughput=0.0))]
    figures = measure(scrapes, speculative=True)
    assert "spec_accept_length" not in figures and "gen_throughput" not in figures


def test_a_restart_between_scrapes_counts_from_zero():
    before = prometheus.parse(exposition(500, [0.1] * 500, [0.01] * 5000))
    after = prometheus.parse(exposition(20, [0.3] * 20, [0.01] * 200))
    figures = measure([before, after], speculative=False)
    assert figures["requests"] == 20 and 0.2 <= figures["ttft_p99_s"] <= 0.4


def test_judge_no_traffic_is_inconclusive():
    verdict, reasons = judge({"requests": 0}, None, GateSettings())
    assert verdict == "inconclusive" and "no request" in reasons[0]


def test_judge_against_absolute_limits():
    settings = GateSettings(max_ttft_p99_s=1.0, max_error_rate=0.01, min_spec_accept_length=2.0)
    verdict, reasons = judge({"requests": 50, "ttft_p99_s": 1.6, "error_rate": 0.0, "spec_accept_length": 1.3},
                             None, settings)
    assert verdict == "fail"
    assert reasons == ["TTFT p99 1.6 s is above the limit 1", "accept length 1.3 is below the minimum 2"]
    assert judge({"requests": 50, "ttft_p99_s": 0.4, "error_rate": 0.0}, None, settings) == ("pass", [])


def test_judge_against_the_previous_release_with_a_tolerance():
    baseline = {"requests": 80, "ttft_p99_s": 0.2, "itl_p99_s": 0.02, "spec_accept_length": 2.8}
    settings = GateSettings(max_regression=0.10)
    within = {"requests": 90, "ttft_p99_s": 0.21, "itl_p99_s": 0.0219, "spec_accept_length": 2.6}
    assert judge(within, baseline, settings) == ("pass", [])
    worse = {"requests": 90, "ttft_p99_s": 0.9, "itl_p99_s": 0.02, "spec_accept_length": 2.2}
    verdict, reasons = judge(worse, baseline, settings)
    assert verdict == "fail"
    assert reasons[0] == "TTFT p99 0.9 s is 350% above 0.2 s under the previous release (tolerance 10%)"
    assert reasons[1].startswith("accept length 2.2 is 21% below 2.8")


def test_describe_names_every_figure_it_has():
    line = describe({"requests": 12, "ttft_p99_s": 0.25, "spec_accept_length": 2.75})
    assert line == "12 requests, TTFT p99 0.25 s, accept length 2.75"
