"""
The stand-in held against real sglang on a GPU.

``tests/data/gpu/acceptance-h200-sglang-0.5.14.json`` is the transcript of
``bench/gpu_acceptance.py`` on an NVIDIA H200 with sglang 0.5.14 (EAGLE-3, tp 1,
a tiny random-weight Llama). Here the same bench code (release, unit environment,
host tool's gate, long generation, stop) runs the stand-in, which imitates 0.5.9,
over sglang 0.5.9's own flags, and the two are compared on what both versions
share: the health sequence, the ``meta_info`` keys, the ``/metrics`` names after a
long generation, and the stop.

Every difference is named below, with the line of the release that has it, as
one of: new in 0.5.14, gone in 0.5.14 (0.5.9 only), or a gap of the stand-in. A
new difference, in the transcript or in the stand-in, fails a test.
"""

import importlib.util
import json
import re
import socket
import sys
import time
from types import SimpleNamespace

import pytest

from sglfleet import PROJECT_ROOT
from sglfleet.host import releases
from sglfleet.host.client import api_key, base_url
from test_standin import _collector_definitions, sglang_059  # noqa: F401  (a fixture)

TRANSCRIPT = PROJECT_ROOT / "tests" / "data" / "gpu" / "acceptance-h200-sglang-0.5.14.json"
T59 = "0.5.9 srt/managers/tokenizer_manager.py"
T514 = "0.5.14 srt/managers/tokenizer_manager.py"
C59 = "0.5.9 srt/metrics/collector.py"
C514 = "0.5.14 srt/observability/metrics_collector.py"

# meta_info keys of a finished /generate with EAGLE-3 and --enable-metrics.
META_ONLY_0514 = {
    "api_server_dispatch_finish_ts": f"new: 0.5.14 srt/observability/req_time_stats.py:469-472 "
                                     f"(0.5.9 had request_sent_to_scheduler_ts)",
    "request_finished_ts": "new name: 0.5.14 srt/observability/req_time_stats.py:477-480 "
                           f"(0.5.9's decode_finished_ts, {T59}:1892)",
    "num_retractions": f"new name: {T514}:1866 (0.5.9's total_retractions, {T59}:1499)",
    "reasoning_tokens": f"new: {T514}:1889",
    "dp_rank": f"new: {T514}:1939-1940",
    "spec_num_correct_drafts": f"new name: {T514}:2333 (0.5.9's spec_accept_token_num, {T59}:1855)",
    "spec_accepted_drafts": f"new: an alias of spec_num_correct_drafts, {T514}:2337-2338",
    "spec_num_proposed_drafts": f"new name: {T514}:2334 (0.5.9's spec_draft_token_num, {T59}:1856)",
    "spec_proposed_drafts": f"new: an alias of spec_num_proposed_drafts, {T514}:2339",
    "spec_correct_drafts_histogram": f"new name: {T514}:2347 (spec_accept_histogram stays, as an alias: 2350-2353)",
}
META_ONLY_059 = {
    "total_retractions": f"gone: {T59}:1499, 0.5.14 says num_retractions",
    "decode_finished_ts": f"gone: {T59}:1892, 0.5.14 says request_finished_ts",
    "request_sent_to_scheduler_ts": f"gone: {T59}:1885-1888",
    "inference_time": f"gone: {T59}:1900-1902",
    "prefill_launch_delay": f"gone: {T59}:1504-1506 (with --enable-metrics)",
    "prefill_launch_latency": f"gone: {T59}:1507-1509 (with --enable-metrics)",
    "prefill_finished_ts": f"gone: {T59}:1510-1512 (with --enable-metrics)",
    "spec_accept_token_num": f"gone: {T59}:1855, 0.5.14 says spec_num_correct_drafts",
    "spec_draft_token_num": f"gone: {T59}:1856, 0.5.14 says spec_num_proposed_drafts",
}

# /metrics families after the gate and a long generation.
METRICS_ONLY_0514 = {
    **{f"sglang:{name}": f"new: {C514} (KV pool gauges)" for name in (
        "full_token_usage", "kv_available_tokens", "kv_evictable_tokens", "kv_used_tokens",
        "mamba_available_tokens", "mamba_evictable_tokens", "mamba_used_tokens",
        "swa_available_tokens", "swa_evictable_tokens", "swa_used_tokens")},
    "sglang:spec_verify_calls_total": f"new: {C514}:1438-1442, counted per finished request (1647-1648)",
    "sglang:spec_num_steps": f"new: {C514}:427",
    "sglang:spec_num_draft_tokens": f"new: {C514}:433",
    "sglang:fwd_occupancy": f"new: {C514}:559",
    "sglang:num_prefill_bootstrap_queue_reqs": f"new: {C514}:473-478 (0.5.9's num_prefill_prealloc_queue_reqs)",
    "sglang:page_size": f"new: {C514}:1002-1007 (0.5.9: a label of cache_config_info, {C59}:858-863)",
    "sglang:num_pages": f"new: {C514}:1008-1013 (0.5.9: a label of cache_config_info)",
    "sglang:context_len": f"new: {C514}:1014-1019",
    "sglang:startup_available_gpu_memory_gb": f"new: {C514}:1020-1025",
    "sglang:uncached_prompt_tokens_histogram": f"new: {C514}:1490",
    "sglang:prompt_tokens_histogram": f"on with --enable-metrics in 0.5.14 ({C514}:1482; its "
                                      f"--collect-tokens-histogram is deprecated, server_args.py:6316-6320); "
                                      f"0.5.9 needs --collect-tokens-histogram ({C59}:1358)",
    "sglang:generation_tokens_histogram": f"as prompt_tokens_histogram: {C514}:1498, {C59}:1358-1361",
}
METRICS_ONLY_059 = {
    "sglang:cache_config_info": f"gone: {C59}:858-863, 0.5.14 has page_size and num_pages gauges",
    "sglang:num_running_reqs_offline_batch": f"gone: {C59}:366-367",
    "sglang:num_prefill_prealloc_queue_reqs": f"gone: {C59}:430-431 (0.5.14: num_prefill_bootstrap_queue_reqs)",
    "sglang:num_retractions": f"gone: the histogram of {C59}:1288-1289 (0.5.14: meta_info's num_retractions)",
    **{f"sglang:kv_transfer_{name}": f"0.5.9 sets the gauge at every stats log ({C59}:469-498, 1012-1016); "
                                     f"0.5.14 makes it a histogram observed on PD transfers only ({C514}:497-547)"
       for name in ("speed_gb_s", "latency_ms", "bootstrap_ms", "alloc_ms", "total_mb")},
}
# What 0.5.9 has too, and the stand-in does not.
STANDIN_GAPS = {
    "sglang:cached_tokens_total": f"counted only for prefix-cache hits ({C59}:1326-1352); "
                                  f"the stand-in has no prefix cache",
}
NEW_IN_0514 = ("new:", "new name:")


def load_bench():
    """bench/gpu_acceptance.py as a module: the transcript's own code."""
    spec = importlib.util.spec_from_file_location("gpu_acceptance", PROJECT_ROOT / "bench" / "gpu_acceptance.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_acceptance"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def transcript() -> dict:
    return json.loads(TRANSCRIPT.read_text())


@pytest.fixture(scope="module")
def standin(sglang_059, tmp_path_factory) -> dict:  # noqa: F811
    """
    The bench's steps against the stand-in (server "standin", sglang 0.5.9's flags):
    start through the staged launch script, the health sequence, the host tool's
    gate, a long generation, the unit's stop.
    """
    bench = load_bench()
    root = tmp_path_factory.mktemp("bench")
    layout = bench.BenchLayout(root=str(root), service="sglang", etc=str(root / "etc"))
    model, draft = bench.write_models(root / "models")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = bench.bench_config("standin", model, draft, listen_port=port, standin_warmup_s=1.0)
    release = bench.stage(config, layout, sys.executable)
    unit = bench.render_unit(config, layout=layout)
    server = bench.start(layout, unit, str(sglang_059), "standin", root / "standin.log")
    try:
        base = base_url(releases.read(release.release_id, "release.json", layout))
        watch = bench.HealthWatch(base, server)
        watch.start()
        gate = bench.host_tool(layout, server.proc, "gate")
        watch.join(30)
        # sglang's CPU monitor adds its first figure 5 s after start (cpu_monitor.py:7-24).
        time.sleep(max(0.0, server.started + 5.5 - time.monotonic()))
        long = bench.long_generation(base, api_key(layout), 256)
    finally:
        stopped = bench.stop(server, float(bench.unit_setting(unit, "TimeoutStopSec")[0]))
    return {"health": watch.sequence, "gate": gate, "long": long, "stop": stopped,
            "log": server.log.read_text()}


def states(sequence: list[dict]) -> list[str]:
    return [entry["state"] for entry in sequence]


def test_the_transcript_names_its_run(transcript):
    versions = transcript["versions"]
    assert transcript["date"].startswith("2026-")
    assert (versions["gpu"], versions["compute_cap"]) == ("NVIDIA H200", "9.0")
    assert (versions["sglang"], versions["torch"], versions["sglang-kernel"],
            versions["flashinfer-python"]) == ("0.5.14", "2.11.0", "0.4.4", "0.6.12")
    assert versions["driver"]
    # The host tool's gate passed on both starts, and the bake passed on live traffic.
    assert [transcript[start]["gate"]["exit_status"] for start in ("cold", "warm")] == [0, 0]
    assert transcript["cold"]["bake"]["result"]["verdict"] == "pass"


def test_health_goes_from_refused_to_503_to_200_in_both(transcript, standin):
    # 0.5.9 http_server.py:1893-1974 and 478-479, 1759-1769; the same order in 0.5.14.
    for start in ("cold", "warm"):
        assert states(transcript[start]["health"]) == ["refused", "503", "200"], start
    assert states(standin["health"]) == ["refused", "503", "200"]
    # 503 with an empty body while sglang's own warm-up runs, in both.
    bodies = [e["body"] for e in transcript["cold"]["health"] + standin["health"] if e["state"] == "503"]
    assert bodies == ["", ""]


def test_meta_info_keys_differ_only_as_the_versions_do(transcript, standin):
    real = set(transcript["cold"]["long_generation"]["meta_info_keys"])
    imitated = set(standin["long"]["meta_info_keys"])
    assert real - imitated == set(META_ONLY_0514)
    assert imitated - real == set(META_ONLY_059)
    # What the gate reads, and how it is made, is shared: completion tokens over verify passes.
    for meta in (transcript["cold"]["long_generation"]["meta_info"], standin["long"]["meta_info"]):
        assert meta["spec_accept_length"] == meta["completion_tokens"] / meta["spec_verify_ct"]
    assert {"completion_tokens", "spec_verify_ct", "spec_accept_length", "spec_accept_rate",
            "spec_accept_histogram", "queue_time", "cached_tokens_details", "e2e_latency"} <= real & imitated


def test_metric_names_differ_only_as_the_versions_do(transcript, standin):
    real = transcript["cold"]["long_generation"]["metrics_after"]["families"]
    imitated = standin["long"]["metrics_after"]["families"]
    assert set(real) - set(imitated) == set(METRICS_ONLY_0514) | set(STANDIN_GAPS)
    assert set(imitated) - set(real) == set(METRICS_ONLY_059)
    assert {name: real[name] for name in set(real) & set(imitated)} == {
        name: imitated[name] for name in set(real) & set(imitated)}  # the same types
    # What the gate and the bake read is in both (sglfleet/host/gate.py, bake.py).
    assert {"sglang:generation_tokens_total", "sglang:num_requests_total", "sglang:http_responses_total",
            "sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
            "sglang:spec_accept_length", "sglang:gen_throughput"} <= set(real) & set(imitated)


def test_each_named_difference_is_the_versions_not_a_guess(sglang_059):  # noqa: F811
    # Every "new" name is absent from 0.5.9's own collector; every 0.5.9-only one is in it.
    defined_059 = _collector_definitions(sglang_059)
    for name, why in METRICS_ONLY_0514.items():
        assert (name in defined_059) == (not why.startswith(NEW_IN_0514)), name
    assert set(METRICS_ONLY_059) <= set(defined_059)
    assert set(STANDIN_GAPS) <= set(defined_059)
    source = (sglang_059 / "sglang/srt/managers/tokenizer_manager.py").read_text()
    for key, why in META_ONLY_0514.items():
        assert (f'"{key}"' in source) == (not why.startswith(NEW_IN_0514)), key
    for key in META_ONLY_059:
        assert f'"{key}"' in source or f'"{key}", meta_info' in source, key


def test_an_asked_stop_ends_as_sglangs_does(transcript, standin):
    # SIGTERM to the launch script alone: sglang drains, ends its own tree, and the
    # launch script reports the asked stop as a success; the unit never has to SIGKILL.
    for stop in (transcript["cold"]["stop"], transcript["warm"]["stop"], standin["stop"]):
        assert stop["exit_status"] == 0
        assert stop["killed_after_timeout"] == []
        assert stop["main_exit_s"] < 15 < stop["timeout_s"]
    real_log = "\n".join(transcript["cold"]["log_milestones"])
    for log in (real_log, standin["log"]):
        drained = log.index("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        assert log.index("Gracefully exiting... Remaining number of requests 0.") > drained
    # 0.5.14 logs its self-kill (srt/utils/common.py:1262); 0.5.9 does it silently.
    assert "kill_process_tree called" in real_log and "kill_process_tree called" not in standin["log"]
    # The real server's processes (its scheduler and detokenizer too) ended before the launch script.
    names = [p["name"].split(": ")[0] for p in transcript["cold"]["stop"]["processes"]]
    assert names[-1] == "launch" and {"sglang::schedul", "sglang::detoken"} <= set(names)


def test_the_gate_passes_the_same_way_on_both(transcript, standin):
    for gate in (transcript["cold"]["gate"], transcript["warm"]["gate"], standin["gate"]):
        assert gate["exit_status"] == 0
        figures = gate["result"]["figures"]
        assert (figures["requests"], figures["tokens"]) == (4, 256)
        assert figures["spec_accept_length"] >= 1.0


SHARED = PROJECT_ROOT / "tests" / "data" / "gpu" / "compile-share-h200-sglang-0.5.14.json"


def test_caches_packed_on_one_host_warm_a_new_one_in_both(sglang_059, tmp_path):  # noqa: F811
    """
    ``compile-share-h200-sglang-0.5.14.json`` (``gpu_acceptance.py run --brief``): a cold start,
    its caches packed and unpacked into emptied directories, a start from them. The same
    bench against the stand-in compiles where the GPU did, and skips it where the GPU did.
    """
    gpu = json.loads(SHARED.read_text())
    cold, shared = gpu["summary"]["cold"], gpu["summary"]["shared"]
    assert gpu["shared_caches"]["unpacked"]["imported"] == gpu["shared_caches"]["files"] > 300
    # The H200: 107 s to ready and 82 s of sampling JIT in the gate, cold; 27 s and 0.13 s from the archive.
    assert shared["ready_s"] < cold["ready_s"] / 3 and shared["gate_sampled_s"] < 1 < 60 < cold["gate_sampled_s"]
    bench = load_bench()
    args = SimpleNamespace(root=str(tmp_path / "bench"), out=str(tmp_path / "out"), site=str(sglang_059),
                           server="standin", bake_s=None, long_tokens=256, brief=True)
    assert bench.run(args) == 0
    standin = json.loads((tmp_path / "out" / "acceptance.json").read_text())
    jit_s = bench.ONE_GPU["standin_sampling_jit_s"]
    cold, shared = standin["summary"]["cold"], standin["summary"]["shared"]
    # What each start did, as the stand-in says it (its times on a busy machine say less).
    logs = {name: (tmp_path / "out" / f"{name}.log").read_text() for name in ("cold", "shared")}
    kernels = {name: re.search(r"(\d+) kernels: (\d+) from the compile cache, (\d+) compiled", text).groups()
               for name, text in logs.items()}
    assert kernels["cold"][0] == kernels["cold"][2] != "0" and kernels["cold"][1] == "0", kernels
    assert kernels["shared"][0] == kernels["shared"][1] == kernels["cold"][0] and kernels["shared"][2] == "0", kernels
    assert "sampling module compiled" in logs["cold"] and "sampling module compiled" not in logs["shared"]
    assert cold["gate_sampled_s"] >= jit_s, standin["summary"]  # the gate's sampled pass waited for the JIT
    assert standin["shared_caches"]["unpacked"]["imported"] == standin["shared_caches"]["files"]
