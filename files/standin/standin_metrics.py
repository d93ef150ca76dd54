"""
sglang 0.5.9's Prometheus series, rendered as its ``/metrics`` renders them.

0.5.9 runs prometheus_client in multiprocess mode (``set_prometheus_multiproc_dir``,
``srt/utils/common.py:1553-1577``), so ``/metrics`` is what
``MultiProcessCollector`` reads back from the processes' files:

- a series exists only once its child was created by a first ``set``/``inc``/
  ``observe`` (every collector calls ``.labels(...)`` lazily); a metric with no
  child has no ``# HELP``/``# TYPE`` lines either;
- ``multiprocess_mode="mostrecent"`` gauges carry no ``pid`` label, mode-``all``
  gauges (``num_retracted_reqs``, ``num_paused_reqs``) do;
- labels are sorted by name, histograms list ``_sum`` then the cumulative
  ``_bucket`` series then ``_count``, and there are no ``_created`` series.

Names, documentation strings, label names and buckets are 0.5.9's
(``srt/metrics/collector.py``; the line of each definition is noted below).
Checked against prometheus_client 0.20.0 and 0.26.0 in multiprocess mode.
Standard library only.

**Example:**

.. code:: python

    registry = Registry()
    ttft = registry.histogram("sglang:time_to_first_token_seconds", "...", TTFT_BUCKETS)
    ttft.observe({"model_name": "m"}, 0.25)
    registry.render()
"""

from __future__ import annotations

import math
import os
import threading
import time

# collector.py:1192-1211, 1214-1237, 1240-1264 (0.5.9's defaults)
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = TTFT_BUCKETS + (600, 1200, 1800, 2400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
               0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000,
               8.000)
RETRACTION_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 75, 100)
# collector.py:528-560 (queue_time) and 702-707 (per_stage_req_latency_seconds:
# exponential_buckets(start=0.001, width=1.62, length=30), metrics/utils.py:52-56).
QUEUE_TIME_BUCKETS = (0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100,
                      200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000,
                      2500, 3000)
STAGE_BUCKETS = tuple(0.001 * 1.62 ** i for i in range(30))
# collector.py:260 ROUTING_KEY_REQ_COUNT_BUCKET_BOUNDS, for the GaugeHistograms.
ROUTING_KEY_BOUNDS = (1, 2, 3, 5, 7, 10, 20, 50, 100, 200)

# SchedulerMetricsCollector gauges that log_stats() sets, in its order
# (collector.py:975-1057): (field of SchedulerStats, documentation, mode).
SCHEDULER_GAUGES = (
    ("num_running_reqs", "The number of running requests.", "mostrecent"),
    ("num_used_tokens", "The number of used tokens.", "mostrecent"),
    ("token_usage", "The token usage.", "mostrecent"),
    ("pending_prealloc_token_usage",
     "The token usage for pending preallocated tokens (not preallocated yet).", "mostrecent"),
    ("swa_token_usage", "The token usage for SWA layers.", "mostrecent"),
    ("mamba_usage", "The token usage for Mamba layers.", "mostrecent"),
    ("decode_sum_seq_lens", "The sum of all sequence lengths in decode.", "mostrecent"),
    ("gen_throughput", "The generation throughput (token/s).", "mostrecent"),
    ("num_queue_reqs", "The number of requests in the waiting queue.", "mostrecent"),
    ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.",
     "mostrecent"),
    ("num_running_reqs_offline_batch",
     "The number of running low-priority offline batch requests(label is 'batch').",
     "mostrecent"),
    ("cache_hit_rate", "The prefix cache hit rate.", "mostrecent"),
    ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
     "mostrecent"),
    ("spec_accept_length", "The average acceptance length of speculative decoding.",
     "mostrecent"),
    ("spec_accept_rate", "The average acceptance rate of speculative decoding "
     "(`accepted tokens / total draft tokens` in batch).", "mostrecent"),
    ("num_prefill_prealloc_queue_reqs",
     "The number of requests in the prefill prealloc queue.", "mostrecent"),
    ("num_prefill_inflight_queue_reqs",
     "The number of requests in the prefill inflight queue.", "mostrecent"),
    ("num_decode_prealloc_queue_reqs",
     "The number of requests in the decode prealloc queue.", "mostrecent"),
    ("num_decode_transfer_queue_reqs",
     "The number of requests in the decode transfer queue.", "mostrecent"),
    ("kv_transfer_speed_gb_s", "The transfer speed of the KV cache in GB/s.", "mostrecent"),
    ("kv_transfer_latency_ms", "The transfer latency of the KV cache in ms.", "mostrecent"),
    ("kv_transfer_bootstrap_ms", "The bootstrap time of the KV transfer in ms.", "mostrecent"),
    ("kv_transfer_alloc_ms", "The allocation waiting time of the KV transfer in ms.",
     "mostrecent"),
    ("kv_transfer_total_mb", "The total number of tokens transferred in the KV cache.",
     "mostrecent"),
    ("num_retracted_reqs", "The number of retracted requests.", "all"),
    ("num_paused_reqs", "The number of paused requests by async weight sync.", "all"),
    ("utilization", "The utilization.", "mostrecent"),
    ("engine_startup_time", "The time taken for the engine to start up.", "mostrecent"),
    ("engine_load_weights_time", "The time taken for the engine to load weights.",
     "mostrecent"),
    ("new_token_ratio", "The new token ratio.", "mostrecent"),
    ("is_cuda_graph", "Whether the batch is using CUDA graph.", "mostrecent"),
    ("num_unique_running_routing_keys", "Number of unique routing keys in running batch.",
     "mostrecent"),
)
ROUTING_KEY_HISTOGRAMS = (  # collector.py:758-769
    ("routing_key_running_req_count",
     "Distribution of routing keys by running request count (gt < count <= le)."),
    ("routing_key_all_req_count",
     "Distribution of routing keys by running+waiting request count (gt < count <= le)."),
)


def go_float(value: float) -> str:
    """A float as prometheus_client writes it (``utils.floatToGoString``)."""
    value = float(value)
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _labels(pairs: dict) -> str:
    escaped = (str(v).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
               for v in (pairs[k] for k in sorted(pairs)))
    return "{" + ",".join(f'{k}="{v}"' for k, v in zip(sorted(pairs), escaped)) + "}"


class Metric:
    """One metric; children appear on first use, as prometheus_client's ``.labels()``."""

    def __init__(self, registry: Registry, kind: str, name: str, doc: str,
                 buckets: tuple = (), mode: str = "mostrecent"):
        self.registry, self.kind, self.name, self.doc = registry, kind, name, doc
        self.bounds = tuple(float(b) for b in buckets) + ((math.inf,) if buckets else ())
        self.mode = mode
        self.children: dict[tuple, list] = {}

    def _child(self, labels: dict) -> list:
        key = tuple(sorted((k, str(v)) for k, v in labels.items()))
        if key not in self.children:  # [value] or [sum, bucket counts...]
            self.children[key] = [0.0] * (1 + len(self.bounds))
        return self.children[key]

    def set(self, labels: dict, value: float) -> None:
        with self.registry.lock:
            self._child(labels)[0] = float(value)

    def inc(self, labels: dict, amount: float = 1.0) -> None:
        with self.registry.lock:
            self._child(labels)[0] += amount

    def observe(self, labels: dict, value: float, count: int = 1, total: float | None = None):
        """
        Add ``count`` observations of ``value`` (``total`` to the sum, default
        value x count): 0.5.9's ``observe_inter_token_latency``
        (collector.py:1381-1394) adds one interval to ``_sum`` and
        ``num_new_tokens`` to the bucket of ``interval / num_new_tokens``.
        """
        with self.registry.lock:
            child = self._child(labels)
            child[0] += value * count if total is None else total
            index = next(i for i, bound in enumerate(self.bounds) if value <= bound)
            child[1 + index] += count

    def lines(self) -> list[str]:
        if not self.children:
            return []
        out = [f"# HELP {self.name} {self.doc}", f"# TYPE {self.name} {self.kind}"]
        for key, child in self.children.items():
            labels = dict(key)
            if self.kind == "histogram":
                out.append(f"{self.name}_sum{_labels(labels)} {go_float(child[0])}")
                running = 0.0
                for bound, count in zip(self.bounds, child[1:]):
                    running += count
                    out.append(f"{self.name}_bucket{_labels({**labels, 'le': go_float(bound)})}"
                               f" {go_float(running)}")
                out.append(f"{self.name}_count{_labels(labels)} {go_float(running)}")
            else:
                if self.kind == "gauge" and self.mode == "all":
                    labels["pid"] = str(os.getpid())
                out.append(f"{self.name}{_labels(labels)} {go_float(child[0])}")
        return out


class Registry:
    """The series of one server process, rendered in the order they were defined."""

    def __init__(self):
        self.lock = threading.RLock()
        self.metrics: list[Metric] = []

    def _add(self, *args, **kwargs) -> Metric:
        metric = Metric(self, *args, **kwargs)
        self.metrics.append(metric)
        return metric

    def gauge(self, name: str, doc: str, mode: str = "mostrecent") -> Metric:
        return self._add("gauge", name, doc, mode=mode)

    def counter(self, name: str, doc: str) -> Metric:
        return self._add("counter", name, doc)

    def histogram(self, name: str, doc: str, buckets: tuple) -> Metric:
        return self._add("histogram", name, doc, buckets=buckets)

    def render(self) -> str:
        with self.lock:
            lines = [line for metric in self.metrics for line in metric.lines()]
        return "\n".join(lines) + "\n" if lines else ""


class SchedulerMetrics:
    """
    ``SchedulerMetricsCollector`` (collector.py:291-1086): the gauges
    ``log_stats`` sets all at once, and ``cache_config_info``.

    + labels: model_name, engine_type, tp_rank, pp_rank, moe_ep_rank
      (``srt/managers/scheduler_metrics_mixin.py:112-122``)
    """

    def __init__(self, registry: Registry, labels: dict):
        self.labels = labels
        self.gauges = {field: registry.gauge(f"sglang:{field}", doc, mode)
                       for field, doc, mode in SCHEDULER_GAUGES}
        self.routing = [registry.gauge(f"sglang:{name}", doc) for name, doc in ROUTING_KEY_HISTOGRAMS]
        self.cache_config_info = registry.gauge("sglang:cache_config_info",
                                                "Cache configuration information.")
        self.queue_time = registry.histogram("sglang:queue_time_seconds",
                                             "Histogram of queueing time in seconds.", QUEUE_TIME_BUCKETS)
        self.per_stage = registry.histogram("sglang:per_stage_req_latency_seconds",
                                            "The latency of each stage of requests.", STAGE_BUCKETS)
        self.cuda_graph_passes = registry.counter(
            "sglang:cuda_graph_passes_total", "Total number of forward passes categorized by CUDA graph.")
        self.realtime_tokens = registry.counter(
            "sglang:realtime_tokens_total",
            "Total number of tokens processed (updated on each log interval). "
            "mode: prefill_compute, prefill_cache, decode.")

    def emit_cache_config_info(self, page_size: int, num_pages: int) -> None:
        """collector.py:1084-1085, called once at scheduler start-up (scheduler.py:631-634)."""
        self.cache_config_info.set({"page_size": page_size, "num_pages": num_pages}, 1)

    def observe_waiting(self, latency: float) -> None:
        """
        A request leaves the waiting queue for a prefill: its ``prefill_waiting`` stage
        (scheduler.py:2121-2124, schedule_batch.py:855-864) and its queueing time
        (scheduler.py:2147-2153, collector.py:886-887).
        """
        self.per_stage.observe({**self.labels, "stage": "prefill_waiting"}, latency)
        self.queue_time.observe(self.labels, latency)

    def increment_cuda_graph_pass(self, value: bool) -> None:
        """collector.py:925-929, every decode pass (scheduler_output_processor_mixin.py:441-442)."""
        self.cuda_graph_passes.inc({**self.labels, "mode": "decode_cuda_graph" if value else "decode_none"})

    def increment_realtime_tokens(self, prefill_compute: int = 0, prefill_cache: int = 0,
                                  decode: int = 0) -> None:
        """collector.py:939-958: at each prefill's stats and every decode pass; a zero is skipped."""
        for mode, delta in (("prefill_compute", prefill_compute), ("prefill_cache", prefill_cache),
                            ("decode", decode)):
            if delta:
                self.realtime_tokens.inc({**self.labels, "mode": mode}, delta)

    def log_stats(self, stats: dict) -> None:
        """collector.py:975-1057: every gauge, from a SchedulerStats (here a dict)."""
        for field, gauge in self.gauges.items():
            gauge.set(self.labels, stats.get(field, 0.0))
        bounds = (0, *ROUTING_KEY_BOUNDS)  # no routing keys here: every bucket 0
        for gauge in self.routing:
            for i, lower in enumerate(bounds):
                upper = str(bounds[i + 1]) if i + 1 < len(bounds) else "+Inf"
                gauge.set({**self.labels, "gt": str(lower), "le": upper}, 0)


class TokenizerMetrics:
    """``TokenizerMetricsCollector`` (collector.py:1088-1399); label ``model_name``."""

    def __init__(self, registry: Registry, labels: dict):
        self.labels = labels
        self.prompt_tokens = registry.counter("sglang:prompt_tokens_total",
                                              "Number of prefill tokens processed.")
        self.generation_tokens = registry.counter("sglang:generation_tokens_total",
                                                  "Number of generation tokens processed.")
        self.num_requests = registry.counter("sglang:num_requests_total",
                                             "Number of requests processed.")
        self.num_aborted = registry.counter("sglang:num_aborted_requests_total",
                                            "Number of requests aborted.")
        self.ttft = registry.histogram("sglang:time_to_first_token_seconds",
                                       "Histogram of time to first token in seconds.",
                                       TTFT_BUCKETS)
        self.itl = registry.histogram("sglang:inter_token_latency_seconds",
                                      "Histogram of inter-token latency in seconds.",
                                      ITL_BUCKETS)
        self.e2e = registry.histogram("sglang:e2e_request_latency_seconds",
                                      "Histogram of End-to-end request latency in seconds",
                                      E2E_BUCKETS)
        self.retractions = registry.histogram("sglang:num_retractions",
                                              "Histogram of retraction counts per request.",
                                              RETRACTION_BUCKETS)

    def observe_one_finished_request(self, prompt_tokens: int, generation_tokens: int,
                                     e2e_latency: float, retraction_count: int = 0) -> None:
        """collector.py:1315-1363 (no cached tokens and no grammar in the stand-in)."""
        self.prompt_tokens.inc(self.labels, prompt_tokens)
        self.generation_tokens.inc(self.labels, generation_tokens)
        self.num_requests.inc(self.labels)
        self.e2e.observe(self.labels, float(e2e_latency))
        self.retractions.observe(self.labels, retraction_count)

    def observe_inter_token_latency(self, interval: float, num_new_tokens: int) -> None:
        """collector.py:1381-1394: the interval to _sum, the tokens to one bucket."""
        self.itl.observe(self.labels, interval / num_new_tokens, count=num_new_tokens,
                         total=interval)


class HttpMetrics:
    """
    ``add_prometheus_track_response_middleware`` (``srt/utils/common.py:1604-1660``),
    installed with ``--enable-metrics`` (http_server.py:1917-1918).
    """

    def __init__(self, registry: Registry):
        self.requests = registry.counter("sglang:http_requests_total",
                                         "Total number of HTTP requests by endpoint and method")
        self.responses = registry.counter(
            "sglang:http_responses_total",
            "Total number of HTTP responses by endpoint and status code")
        self.active = registry.gauge("sglang:http_requests_active",
                                     "Number of currently active HTTP requests", mode="livesum")
        # common.py:1627-1633: a gauge without labels has its one series from the start;
        # no request here carries x-smg-routing-key, so it stays 0.
        self.routing_keys_active = registry.gauge("sglang:routing_keys_active",
                                                  "Number of unique routing keys with active requests",
                                                  mode="livesum")
        self.routing_keys_active.set({}, 0.0)


def start_cpu_monitor(registry: Registry, components: tuple, interval: float) -> threading.Thread:
    """
    ``start_cpu_monitor_thread`` (``srt/metrics/cpu_monitor.py``), which 0.5.9 starts with
    ``--enable-metrics`` in the tokenizer (tokenizer_manager.py:231-232) and the
    detokenizer (detokenizer_manager.py:91-92): every ``interval`` (5 s) it adds the
    CPU time spent since. The stand-in is one process: its CPU time counts for the
    first component, the others get 0.
    """
    counter = registry.counter("sglang:process_cpu_seconds_total",
                               "Total CPU time consumed by this process (user + system)")

    def monitor() -> None:
        last = os.times()
        while True:
            time.sleep(interval)
            now = os.times()
            for index, component in enumerate(components):
                counter.inc({"component": component},
                            (now.user - last.user) + (now.system - last.system) if index == 0 else 0.0)
            last = now

    thread = threading.Thread(target=monitor, name="cpu-monitor", daemon=True)
    thread.start()
    return thread
