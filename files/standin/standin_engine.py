"""
The stand-in's engine: sglang 0.5.9's scheduler loop and the tokenizer side of it.

No model runs, but requests go through the same steps, in the same order, as in
0.5.9, so every figure ``/metrics`` and ``meta_info`` report is computed from
timed passes, the way 0.5.9 computes it:

- **Batches** (``Scheduler.get_next_batch_to_run``): waiting requests are
  prefilled first, in one batch, up to ``max_running_requests``; otherwise one
  decode pass runs over every running request. Each pass takes
  ``SGLFLEET_STANDIN_STEP_S`` seconds (default 0.005).
- **A prefill** gives each request its first token. **A decode pass** gives
  each request one token, or with speculative decoding one EAGLE
  draft+verify step: ``accepted drafts + 1`` tokens, at most
  ``speculative_num_draft_tokens``, averaging ``SGLFLEET_STANDIN_SPEC_ACCEPT_LENGTH``
  per step (a deterministic sequence, so a 256-token generation at 2.8 takes
  ~92 passes). A request finishing mid-step keeps only the tokens it needs,
  while its own ``spec_accepted_tokens`` counts the whole step
  (``srt/speculative/eagle_info.py:396-431``).
- **Decode stats** (``scheduler_output_processor_mixin.py:438-440, 532-538``;
  ``scheduler_metrics_mixin.py:147-150, 304-474``): ``forward_ct_decode``
  counts decode passes of the whole server; every ``--decode-log-interval``
  passes (default 40) ``log_decode_stats`` computes ``spec_accept_length``
  (accepted + 1 per request-step, over the window), ``spec_accept_rate``
  (that over draft tokens), ``gen_throughput`` (tokens / seconds since the last
  one, idle time included) and logs ``Decode batch, ...``.
- **Prefill stats** (``scheduler_metrics_mixin.py:160-302``): every prefill
  batch re-publishes *all* scheduler gauges (``log_stats``), the decode ones
  with their last values, 0.0 before the first decode-stats window.
- **Outputs to the tokenizer** (``stream_output_generation``,
  ``scheduler_output_processor_mixin.py:888-990``): a streaming request after
  every pass, a non-streaming one when its token count is a multiple of 50
  and at the end. Each output updates ``last_receive_tstamp`` (read by
  ``/health``) and, for requests with ``log_metrics``, ``collect_metrics``
  (``tokenizer_manager.py:1945-2006``): TTFT at the first output, inter-token
  latency at each later one, counters and e2e at the end.
- **meta_info** (``tokenizer_manager.py:1476-1626, 1825-1912``) at the end:
  ``spec_accept_length = completion_tokens / spec_verify_ct`` and the other
  spec fields; with ``--enable-metrics`` the timing fields. From 0.5.10 (0.5.14
  ``tokenizer_manager.py:1887-1892``) ``reasoning_tokens`` too, before
  ``completion_tokens``: a request that asks for reasoning (``Req.think_end``) counts its
  output tokens up to and including the parser's end token, all of them when it never came
  (0.5.14 ``schedule_batch.py:1557-1569``, ``batch_result_processor.py:874-881``); 0 otherwise.

Standard library only.

**Example:**

.. code:: python

    engine = Engine(args, registry=None, step_s=0.005, accept_length=2.8)
    engine.start()
    req = Req.make("Hello", {"max_new_tokens": 8})
    engine.submit(req)
    req.outputs.get()["meta_info"]["completion_tokens"]  # 8 (a non-streaming request)
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
import uuid

from standin_metrics import HttpMetrics, Registry, SchedulerMetrics, TokenizerMetrics
from standin_model import release_tuple

logger = logging.getLogger("sglang.standin")

DEFAULT_FORCE_STREAM_INTERVAL = 50  # scheduler_output_processor_mixin.py:38
# The KV pool size depends on GPU memory; the stand-in reports a fixed notional one.
MAX_TOTAL_NUM_TOKENS = 500_000
SAMPLING_EPS = 1e-6  # srt/sampling/sampling_params.py:25: a temperature below it is greedy
SLOW_CAP_S = 5.0  # the most a slow-after fault adds to one generation
WORDS = ("The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog.")


class Req:
    """One request: 0.5.9's ``Req`` (scheduler side) and ``ReqState`` (tokenizer side)."""

    def __init__(self, rid: str, prompt_tokens: int, max_new_tokens: int, stream: bool = False,
                 log_metrics: bool = True, sampled: bool = True):
        self.rid, self.prompt_tokens, self.max_new_tokens = rid, prompt_tokens, max_new_tokens
        self.sampled = sampled  # not greedy: the sampler runs (sampling_params.py:46, 98-101)
        self.stream, self.log_metrics = stream, log_metrics
        self.output_ids: list[int] = []
        self.finished = self.aborted = False
        self.spec_verify_ct = self.spec_accepted_tokens = 0
        self.spec_acceptance_histogram: list[int] = []
        self.accept_phase = 0.0  # drives the deterministic accept lengths
        self.added_latency = 0.0  # by a slow-after fault, capped
        # Tokenizer side (ReqState, tokenizer_manager.py:127-150).
        self.created_time = time.time()
        self.sent_to_scheduler_ts = 0.0
        self.queued_perf = self.forward_entry_perf = 0.0
        # TimeStats' figures in meta_info with --enable-metrics (collector.py:87-103).
        self.queue_time = self.prefill_launch_delay = self.prefill_launch_latency = 0.0
        self.prefill_finished_ts = 0.0
        self.first_token_time = self.last_time = self.first_token_time_perf = 0.0
        self.last_completion_tokens = 1
        self.finished_time = self.finished_time_perf = 0.0
        self.response_sent_to_client_ts = 0.0
        self.outputs: queue.Queue = queue.Queue()
        # An OpenAI answer scripts its output (standin_openai.Script): each token's text, and
        # the finish_reason at max_new_tokens when it is not "length" (an EOS or a stop string).
        self.tokens: list[str] | None = None
        self.finish: dict | None = None
        self.final_text: str | None = None  # the text once finished, a stop string trimmed
        # The reasoning parser's end token where the request asks for reasoning (0.5.14's
        # require_reasoning, serving_chat.py:552), whose tokens 0.5.10 and later count.
        self.think_end: str | None = None
        self.vocabulary = WORDS  # what it says: the weights' words when it was submitted (standin_weights)

    @classmethod
    def make(cls, prompt, sampling: dict, stream: bool = False, rid: str | None = None,
             log_metrics: bool = True) -> Req:
        """A request from a /generate body: ``text`` or ``input_ids``, ``sampling_params``."""
        n = int(sampling.get("max_new_tokens", 128))  # SGLang's default
        if n < 0:
            raise ValueError(f"max_new_tokens must be at least 0, got {n}.")
        tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt or "").split())
        temperature = float(sampling.get("temperature", 1.0))  # sglang's default: sampled
        return cls(rid or uuid.uuid4().hex, max(tokens, 1), n, stream, log_metrics,
                   sampled=not 0 <= temperature < SAMPLING_EPS)

    def reasoning_tokens(self) -> int:
        """``Req.update_reasoning_tokens`` (0.5.14 schedule_batch.py:1557-1569) over the output so far."""
        if self.think_end is None or self.tokens is None:
            return 0
        out = self.tokens[:len(self.output_ids)]
        return out.index(self.think_end) + 1 if self.think_end in out else len(out)

    def text(self) -> str:
        if self.finished and self.final_text is not None:
            return self.final_text
        if self.tokens is not None:
            return "".join(self.tokens[:len(self.output_ids)])
        words = self.vocabulary
        return "".join(" " + words[i % len(words)] for i in range(len(self.output_ids)))


class Engine:
    """
    The scheduler thread and the tokenizer bookkeeping of one stand-in server.

    + args: the resolved ServerArgs (a dict)
    + registry: the metrics registry, or None without ``--enable-metrics``
    + step_s: seconds one forward pass takes
    + accept_length: mean tokens per EAGLE verify step (capped to the draft tokens)
    """

    def __init__(self, args: dict, registry: Registry | None, step_s: float,
                 accept_length: float, prefill_extra_s: float = 0.0, crash=None, version: str = "0.5.9"):
        self.args = args
        self.counts_reasoning = release_tuple(version) >= (0, 5, 10)  # not in 0.5.9's meta_info
        self.compiler = None  # set once the startup kernels are in: it compiles the sampled path
        self.crash = crash  # a scheduler exception ends the server
        self.vocabulary = WORDS  # the words of the weights it serves (standin_weights.Weights)
        self.spec = args.get("speculative_algorithm") is not None
        self.draft_tokens = args.get("speculative_num_draft_tokens") or (
            (args.get("speculative_num_steps") or 0) + 1)
        self.accept_length = min(max(accept_length, 1.0), float(self.draft_tokens))
        self.step_s, self.prefill_extra_s = step_s, prefill_extra_s
        self.slow_from: float | None = None  # monotonic time a slow-after fault starts
        self.slow_factor = 1.0
        self.interval = int(args.get("decode_log_interval") or 40)
        self.max_running = args.get("max_running_requests") or 1024
        self.cond = threading.Condition()
        self.waiting: list[Req] = []
        self.rid_to_state: dict[str, Req] = {}  # the tokenizer's requests not answered yet
        self.running: list[Req] = []
        self.last_receive_tstamp = 0.0
        # scheduler_metrics_mixin.py:72-88, init_metrics (before the model loads).
        self.forward_ct_decode = self.num_generated_tokens = 0
        self.last_decode_stats_tic = time.perf_counter()
        self.last_gen_throughput = 0.0
        self.spec_num_accepted_tokens = self.spec_num_forward_ct = 0
        self.spec_total_num_accepted_tokens = self.spec_total_num_forward_ct = 0
        self.stats: dict[str, float] = {"max_total_num_tokens": MAX_TOTAL_NUM_TOKENS}
        ratio = min(0.7 * float(args.get("schedule_conservativeness") or 1.0), 1.0)
        self.init_new_token_ratio = self.new_token_ratio = ratio  # scheduler.py:811-823
        self.min_new_token_ratio = ratio * 0.14
        self.sched = self.tok = self.http = None
        if registry is not None:
            name = args.get("served_model_name") or args.get("model_path")
            self.sched = SchedulerMetrics(registry, {
                "model_name": name, "engine_type": "unified", "tp_rank": 0, "pp_rank": 0,
                "moe_ep_rank": 0})
            self.tok = TokenizerMetrics(registry, {"model_name": name})
            self.http = HttpMetrics(registry)
            self.sched.emit_cache_config_info(args.get("page_size") or 1,
                                              MAX_TOTAL_NUM_TOKENS // (args.get("page_size") or 1))
        self.thread = threading.Thread(target=self.loop, name="scheduler", daemon=True)

    def start(self) -> None:
        self.thread.start()

    # -- the tokenizer's side of a request --------------------------------------

    def submit(self, *reqs: Req) -> None:
        with self.cond:
            for req in reqs:
                req.vocabulary = self.vocabulary
                req.sent_to_scheduler_ts = time.time()
                req.queued_perf = time.perf_counter()
                self.rid_to_state[req.rid] = req
                self.waiting.append(req)
            self.cond.notify_all()

    def answered(self, req: Req) -> None:
        """The client has its answer (or is gone): the request leaves ``rid_to_state``."""
        with self.cond:
            self.rid_to_state.pop(req.rid, None)

    def in_flight(self) -> list[str]:
        """The requests not answered yet, which a SIGTERM drain waits for."""
        with self.cond:
            return list(self.rid_to_state)

    def abort(self, req: Req) -> None:
        """``abort_request`` (tokenizer_manager.py:1315-1324): counted only while in flight."""
        with self.cond:
            if req.finished or req.aborted:
                return
            req.aborted = True
            self.rid_to_state.pop(req.rid, None)
            for batch in (self.waiting, self.running):
                if req in batch:
                    batch.remove(req)
        if self.tok is not None:
            self.tok.num_aborted.inc(self.tok.labels)

    def abort_all(self, finish: dict) -> int:
        """
        ``abort_request(abort_all=True)`` (tokenizer_manager.py:1315-1324): every request in flight ends
        now with ``finish`` as its finish_reason, its last output sent (a stream ends cleanly, as 0.5.14's
        did on an H200); how many.
        """
        with self.cond:
            reqs = [req for req in self.rid_to_state.values()
                    if not (req.finished or req.aborted or req.rid.startswith("HEALTH_CHECK"))]
            for req in reqs:
                req.aborted = True  # the scheduler passes it by from now on
                req.finished, req.finish = True, finish
                for batch in (self.waiting, self.running):
                    if req in batch:
                        batch.remove(req)
        for req in reqs:
            self.handle_output(req)
            if self.tok is not None:
                self.tok.num_aborted.inc(self.tok.labels)
        return len(reqs)

    # -- the scheduler loop ------------------------------------------------------

    def loop(self) -> None:
        while True:
            with self.cond:
                while not self.waiting and not self.running:
                    self.new_token_ratio = self.init_new_token_ratio  # idle: reset
                    self.cond.wait()
                room = max(self.max_running - len(self.running), 0)
                prefill, self.waiting = self.waiting[:room], self.waiting[room:]
                running_bs = len(self.running)
                batch = prefill or list(self.running)
            if prefill:
                self.run_prefill(prefill, running_bs)
            else:
                self.run_decode(batch)

    def forward(self, batch: list[Req], extra: float = 0.0) -> None:
        """One forward pass; a slow-after fault stretches it, up to SLOW_CAP_S per request."""
        took = self.step_s
        if self.slow_from is not None and time.monotonic() >= self.slow_from and all(
                req.added_latency < SLOW_CAP_S for req in batch):
            for req in batch:
                req.added_latency += took * (self.slow_factor - 1)
            took *= self.slow_factor
        time.sleep(took + extra)

    def run_prefill(self, batch: list[Req], running_bs: int) -> None:
        entry = time.perf_counter()
        for req in batch:
            req.forward_entry_perf = entry
            req.queue_time = entry - req.queued_perf
            if self.sched is not None:
                self.sched.observe_waiting(req.queue_time)
        if self.compiler is not None and any(req.sampled for req in batch):
            try:
                self.compiler.sampled()  # the first sampled batch waits for the sampling JIT
            except Exception as error:
                self.crash(error)
        launched = time.perf_counter()
        self.forward(batch, self.prefill_extra_s)
        finished_perf, finished_ts = time.perf_counter(), time.time()
        with self.cond:
            for req in batch:
                req.prefill_launch_delay = launched - entry
                req.prefill_launch_latency = finished_perf - launched
                req.prefill_finished_ts = finished_ts  # scheduler_output_processor_mixin.py:169-171
                if req.aborted:
                    continue
                if req.max_new_tokens > 0:
                    req.output_ids.append(len(req.output_ids))
                req.finished = len(req.output_ids) >= req.max_new_tokens
                if not req.finished:
                    self.running.append(req)
        self.stream_output(batch)
        self.log_prefill_stats(batch, running_bs)

    def next_step_tokens(self, req: Req) -> int:
        """Tokens of one verify step: floor/ceil of the accept length, averaging it exactly."""
        before = req.accept_phase
        req.accept_phase += self.accept_length
        return max(1, math.floor(req.accept_phase + 1e-9) - math.floor(before + 1e-9))

    def run_decode(self, batch: list[Req]) -> None:
        self.forward(batch)
        accepted = 0
        with self.cond:
            batch = [req for req in batch if not req.aborted]
            for req in batch:
                step = self.next_step_tokens(req) if self.spec else 1
                kept = min(step, req.max_new_tokens - len(req.output_ids))
                req.output_ids.extend(range(len(req.output_ids), len(req.output_ids) + kept))
                if self.spec:  # eagle_info.py:428-431: the whole step, even past the end
                    req.spec_verify_ct += 1
                    req.spec_accepted_tokens += step - 1
                    hist = req.spec_acceptance_histogram
                    hist.extend([0] * (step - len(hist)))
                    hist[step - 1] += 1
                accepted += kept - 1  # the batch's accept lengths, cut at the end
                req.finished = len(req.output_ids) >= req.max_new_tokens
            self.running = [req for req in self.running if not req.finished and not req.aborted]
            self.new_token_ratio = max(self.new_token_ratio - (
                self.init_new_token_ratio - self.min_new_token_ratio) / 600,
                self.min_new_token_ratio)
        # scheduler_output_processor_mixin.py:438-442, then 532-538.
        self.num_generated_tokens += len(batch)
        if self.spec:
            self.spec_num_accepted_tokens += accepted + len(batch)
            self.spec_num_forward_ct += len(batch)
            self.num_generated_tokens += accepted
        if self.sched is not None:
            self.sched.increment_cuda_graph_pass(False)  # the stand-in logs "cuda graph: False"
        self.stream_output(batch)
        self.forward_ct_decode = (self.forward_ct_decode + 1) % (1 << 30)
        if self.forward_ct_decode % self.interval == 0:
            self.log_decode_stats(batch)
        if self.sched is not None:  # log_decode_stats_every_iteration (scheduler_metrics_mixin.py:476-484)
            self.sched.increment_realtime_tokens(decode=len(batch) + accepted)

    # -- stats ------------------------------------------------------------------

    def token_info(self) -> tuple[int, float]:
        with self.cond:
            used = sum(r.prompt_tokens + len(r.output_ids) for r in self.running)
        return used, used / MAX_TOTAL_NUM_TOKENS

    def log_prefill_stats(self, batch: list[Req], running_bs: int) -> None:
        """scheduler_metrics_mixin.py:160-302: all gauges, the decode ones unchanged."""
        used, usage = self.token_info()
        new_tokens = sum(r.prompt_tokens for r in batch)
        logger.info(f"Prefill batch, #new-seq: {len(batch)}, #new-token: {new_tokens}, "
                    f"#cached-token: 0, token usage: {usage:.2f}, #running-req: {running_bs}, "
                    f"#queue-req: {len(self.waiting)}, cuda graph: False")
        if self.sched is None:
            return
        self.stats.update(num_running_reqs=running_bs, num_running_reqs_offline_batch=0,
                          num_used_tokens=used, token_usage=usage,
                          num_queue_reqs=len(self.waiting), num_grammar_queue_reqs=0,
                          cache_hit_rate=0.0, new_token_ratio=self.new_token_ratio,
                          num_retracted_reqs=0, num_paused_reqs=0)
        self.sched.log_stats(self.stats)
        self.sched.increment_realtime_tokens(prefill_compute=new_tokens)  # scheduler_metrics_mixin.py:244-249

    def log_decode_stats(self, batch: list[Req]) -> None:
        """scheduler_metrics_mixin.py:304-474, every ``decode_log_interval`` decode passes."""
        gap = time.perf_counter() - self.last_decode_stats_tic
        self.last_decode_stats_tic = time.perf_counter()
        self.last_gen_throughput = self.num_generated_tokens / gap
        self.num_generated_tokens = 0
        used, usage = self.token_info()
        msg = f"Decode batch, #running-req: {len(batch)}, #token: {used}, token usage: {usage:.2f}, "
        length = rate = 0.0
        if self.spec:
            length = self.spec_num_accepted_tokens / self.spec_num_forward_ct
            total_draft = self.spec_num_forward_ct * self.draft_tokens
            rate = self.spec_num_accepted_tokens / total_draft if total_draft > 0 else 0
            self.spec_total_num_accepted_tokens += self.spec_num_accepted_tokens
            self.spec_total_num_forward_ct += self.spec_num_forward_ct
            self.spec_num_accepted_tokens = self.spec_num_forward_ct = 0
            msg += f"accept len: {length:.2f}, accept rate: {rate:.2f}, "
        logger.info(msg + f"cuda graph: False, gen throughput (token/s): "
                    f"{self.last_gen_throughput:.2f}, #queue-req: {len(self.waiting)}")
        if self.sched is None:
            return
        self.stats.update(
            num_running_reqs=len(batch), num_running_reqs_offline_batch=0, num_used_tokens=used,
            token_usage=usage,
            decode_sum_seq_lens=sum(r.prompt_tokens + len(r.output_ids) for r in batch),
            gen_throughput=self.last_gen_throughput, num_queue_reqs=len(self.waiting),
            num_grammar_queue_reqs=0, cache_hit_rate=0.0, spec_accept_rate=rate,
            spec_accept_length=length, num_retracted_reqs=0, num_paused_reqs=0)
        self.sched.log_stats(self.stats)

    # -- outputs to the tokenizer -------------------------------------------------

    def stream_output(self, batch: list[Req]) -> None:
        """stream_output_generation's choice of which requests send an output now."""
        for req in batch:
            if req.aborted:
                continue
            if req.finished or (req.stream or (
                    len(req.output_ids) % DEFAULT_FORCE_STREAM_INTERVAL == 0)):
                self.handle_output(req)

    def handle_output(self, req: Req) -> None:
        """``_handle_batch_output`` for one request (tokenizer_manager.py:1476-1626)."""
        now = time.time()
        self.last_receive_tstamp = now
        if not req.log_metrics and req.rid.startswith("HEALTH_CHECK"):
            req.outputs.put(None)  # the health check only waits for a sign of life
            return
        n = len(req.output_ids)
        meta = {"id": req.rid, "finish_reason": None, "prompt_tokens": req.prompt_tokens,
                "weight_version": self.args.get("weight_version") or "default",
                "total_retractions": 0}
        if self.tok is not None:  # tokenizer_manager.py:1502-1512, values of collector.py:87-103
            meta.update(queue_time=req.queue_time, prefill_launch_delay=req.prefill_launch_delay,
                        prefill_launch_latency=req.prefill_launch_latency,
                        prefill_finished_ts=req.prefill_finished_ts)
        # tokenizer_manager.py:1526-1539: a list of None without HiCache
        # (scheduler_output_processor_mixin.py:57-67, 1026) is still a list, so the key is there.
        if self.counts_reasoning:
            meta["reasoning_tokens"] = req.reasoning_tokens()
        meta.update(completion_tokens=n, cached_tokens=0, cached_tokens_details=None)
        if req.finished:
            meta["finish_reason"] = req.finish or {"type": "length", "length": req.max_new_tokens}
            req.finished_time, req.finished_time_perf = now, time.perf_counter()
            meta["e2e_latency"] = req.finished_time - req.created_time
            if self.spec:
                self.spec_meta(meta, req)
            if self.tok is not None:
                self.timing_meta(meta, req)
        out = {"text": req.text(), "output_ids": list(req.output_ids), "meta_info": meta}
        if self.tok is not None and req.log_metrics:
            self.collect_metrics(req)  # before the client can see the answer, as in 0.5.9
        req.outputs.put(out)

    def spec_meta(self, meta: dict, req: Req) -> None:
        """``_calculate_spec_decoding_metrics`` (tokenizer_manager.py:1825-1867)."""
        if req.spec_verify_ct <= 0:
            return
        total_draft = req.spec_verify_ct * (self.draft_tokens - 1)
        if total_draft > 0:
            meta["spec_accept_rate"] = req.spec_accepted_tokens / total_draft
            meta["spec_accept_length"] = len(req.output_ids) / req.spec_verify_ct
            meta["spec_accept_token_num"] = req.spec_accepted_tokens
            meta["spec_draft_token_num"] = total_draft
            meta["spec_verify_ct"] = req.spec_verify_ct
        if req.spec_acceptance_histogram:
            meta["spec_accept_histogram"] = list(req.spec_acceptance_histogram)

    def timing_meta(self, meta: dict, req: Req) -> None:
        """``_calculate_timing_metrics`` (tokenizer_manager.py:1869-1912), before collect_metrics."""
        meta["request_received_ts"] = req.created_time
        meta["request_sent_to_scheduler_ts"] = req.sent_to_scheduler_ts
        if req.response_sent_to_client_ts > 0:
            meta["response_sent_to_client_ts"] = req.response_sent_to_client_ts
        meta["decode_finished_ts"] = req.finished_time
        meta["inference_time"] = req.finished_time_perf - req.forward_entry_perf
        if req.first_token_time_perf > 0 and req.output_ids:
            meta["decode_throughput"] = len(req.output_ids) / (
                req.finished_time_perf - req.first_token_time_perf)

    def collect_metrics(self, req: Req) -> None:
        """tokenizer_manager.py:1945-2006: TTFT at the first output, ITL after, totals at the end."""
        completion = len(req.output_ids)
        if req.first_token_time == 0.0:
            req.first_token_time = req.last_time = time.time()
            req.first_token_time_perf = time.perf_counter()
            req.last_completion_tokens = completion
            self.tok.ttft.observe(self.tok.labels, req.first_token_time - req.created_time)
        else:
            new_tokens = completion - req.last_completion_tokens
            if new_tokens:
                now = time.time()
                self.tok.observe_inter_token_latency(now - req.last_time, new_tokens)
                req.last_time, req.last_completion_tokens = now, completion
        if req.finished:
            self.tok.observe_one_finished_request(req.prompt_tokens, completion,
                                                  req.finished_time - req.created_time)
