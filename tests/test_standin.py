"""
The SGLang stand-in as a real process, over the real sglang 0.5.9 package files.

Each behaviour is checked against what 0.5.9's own code does (files and lines in
files/standin/*.py's docstrings and /work/notes/sglang-runtime.md). Figures are
measured or derived from what the server itself returned (``meta_info``), not
from what a test set, unless the plumbing of a knob is the point.
"""

import ast
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from sglfleet import FILES, PROJECT_ROOT
from sglfleet.artifacts.patcher import apply, load_patch
from sglfleet.artifacts.upstream import sglang_wheel

STANDIN = FILES / "standin" / "sglang_standin.py"
KIMI = "sglang/srt/models/kimi_k25.py"
ATTRIBUTE_ERROR = ("AttributeError: 'KimiK25ForConditionalGeneration' object has no "
                   "attribute 'set_eagle3_layers_to_capture'")
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/draft"]
EAGLE = ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "/models/draft"]
KIMI_PATH = ["--model-path", "/models/kimi"]


@pytest.fixture(scope="session")
def sglang_059() -> Path:
    """The real sglang 0.5.9 wheel (pure Python), extracted once under .cache/."""
    root = PROJECT_ROOT / ".cache" / "standin" / "sglang-0.5.9"
    if not (root / KIMI).is_file():
        partial = root.with_name(root.name + ".part")
        shutil.rmtree(partial, ignore_errors=True)
        with zipfile.ZipFile(sglang_wheel("0.5.9")) as wheel:
            wheel.extractall(partial)
        shutil.rmtree(root, ignore_errors=True)
        partial.rename(root)
    return root


@pytest.fixture(scope="session")
def sglang_059_patched(sglang_059, tmp_path_factory) -> Path:
    """0.5.9 with kimi_k25.py patched by sglfleet's patch engine (the rest linked)."""
    root = tmp_path_factory.mktemp("patched")
    for name in ("sglang-0.5.9.dist-info", "sglang/__init__.py", "sglang/srt/server_args.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).symlink_to(sglang_059 / name)
    (root / KIMI).parent.mkdir(parents=True)
    (root / KIMI).write_bytes(apply((sglang_059 / KIMI).read_bytes(), load_patch()))
    return root


@pytest.fixture
def launch(tmp_path):
    """
    Start the stand-in; every process is killed by its pid at teardown. sglang's own
    waits run at a tenth (``SGLFLEET_STANDIN_TIME_SCALE``) unless a test asks for
    another scale: the tests of timing and order ask for 1, sglang's real values.
    """
    procs: list[subprocess.Popen] = []

    def start(site: Path, *flags, fault: str | None = None, warmup: float = 0.5, **env):
        port = free_port()
        fault_file = tmp_path / f"standin-fault-{port}"
        if fault:
            fault_file.write_text(fault + "\n")
        environ = {**os.environ, "PYTHONPATH": str(site), "SGLFLEET_STANDIN_TIME_SCALE": "0.1",
                   "SGLFLEET_CACHE": str(tmp_path / "cache"),
                   "TRITON_CACHE_DIR": str(tmp_path / "compile" / "triton"),
                   "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "compile"),
                   "SGLFLEET_STANDIN_FAULT_FILE": str(fault_file),
                   "SGLFLEET_STANDIN_WARMUP": str(warmup), **env}
        argv = [sys.executable, str(STANDIN), *flags]
        if "--port" not in flags:
            argv += ["--port", str(port)]
        proc = subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        proc.url = f"http://127.0.0.1:{port}"
        proc.port = port
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, headers: dict | None = None, body: dict | None = None, timeout: float = 30):
    """(status, body text) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def generate(proc, max_new_tokens: int, **extra) -> dict:
    code, body = get(proc.url + "/generate", body={
        "text": "Hello there", "sampling_params": {"max_new_tokens": max_new_tokens}, **extra})
    assert code == 200, body
    return json.loads(body)


def stream(proc, max_new_tokens: int) -> list[str]:
    """The server-sent events of one streaming /generate."""
    request = urllib.request.Request(proc.url + "/generate", data=json.dumps({
        "text": "Hi", "stream": True, "sampling_params": {"max_new_tokens": max_new_tokens}
    }).encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        return [event for event in response.read().decode().split("\n\n") if event]


def wait_for(proc, path="/health", status=200, timeout=15.0) -> list[int]:
    """Poll until ``path`` answers ``status``; the statuses seen on the way."""
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        try:  # a /health of a server that is up takes at least a second
            code = get(proc.url + path, timeout=max(deadline - time.monotonic(), 0.1))[0]
            seen.append(code)
            if code == status:
                return seen
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{path} never answered {status} in {timeout}s (saw {set(seen)})")


def wait_listening(proc, timeout: float = 15.0) -> int:
    """Wait for the port to accept; how many connection attempts were refused before."""
    refused, deadline = 0, time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", proc.port), timeout=1).close()
            return refused
        except ConnectionRefusedError:
            refused += 1
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "never listened"
        time.sleep(0.05)


def stop(proc, signum=signal.SIGTERM) -> tuple[int, str]:
    os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err


def scrape(proc) -> str:
    code, text = get(proc.url + "/metrics")
    assert code == 200
    return text


def samples(text: str) -> dict[tuple, float]:
    """(name, sorted label pairs) -> value, from Prometheus text."""
    found = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name, _, labels = series.partition("{")
        pairs = tuple(sorted(tuple(p.split("=", 1)) for p in labels.rstrip("}").split(",") if p))
        found[(name, tuple((k, v.strip('"')) for k, v in pairs))] = float(value)
    return found


def value(text: str, name: str, **labels) -> float | None:
    """The one sample of ``name`` (whose labels include ``labels``), or None when absent."""
    hits = [v for (n, pairs), v in samples(text).items()
            if n == name and all((k, str(v2)) in pairs for k, v2 in labels.items())]
    assert len(hits) <= 1, (name, hits)
    return hits[0] if hits else None


# -- flags and ServerArgs ---------------------------------------------------------


def test_unknown_flag_exits_2_with_argparses_message(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, "--no-such-flag")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "launch_server.py: error: unrecognized arguments: --no-such-flag" in err

    proc = launch(sglang_059, "--model-path", "m", "--speculative-algorithm", "EAGLE4")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "argument --speculative-algorithm: invalid choice: 'EAGLE4'" in err


@pytest.mark.parametrize("flags, error", [
    # server_args.py:2422-2426: steps missing, topk given: a bare assert.
    (["--speculative-eagle-topk", "1"], "AssertionError\n"),
    # 2452-2453: steps given, topk missing: `None > 1`.
    (["--speculative-num-steps", "3"],
     "TypeError: '>' not supported between instances of 'NoneType' and 'int'"),
    # 2113-2115: DP attention needs tp_size divisible by dp_size.
    (["--tp-size", "8", "--dp-size", "3", "--enable-dp-attention"], "AssertionError\n"),
    # check_server_args, 5132-5134.
    (["--tp-size", "8", "--nnodes", "3"],
     "AssertionError: tp_size must be divisible by number of nodes"),
])
def test_refused_settings_fail_before_anything_listens(launch, sglang_059, flags, error):
    spec = EAGLE if any(f.startswith("--speculative") for f in flags) else []
    proc = launch(sglang_059, *KIMI_PATH, *spec, *flags, warmup=0)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1  # an uncaught exception, as launch_server.py:32
    assert "Traceback (most recent call last)" in err and error in err + "\n"
    assert "Load weight end" not in err and "Uvicorn running" not in err


def test_speculative_settings_resolve_as_in_059(launch, sglang_059, tmp_path):
    def model(arch):
        path = tmp_path / arch
        path.mkdir()
        (path / "config.json").write_text(json.dumps({"architectures": [arch]}))
        return str(path)

    # topk 1: draft tokens forced to steps + 1, with a warning, not an error (2443-2450).
    forced = launch(sglang_059, *KIMI_PATH, *EAGLE, "--speculative-num-steps", "2",
                    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "5")
    # auto_choose_speculative_params (5741-5775): Llama gets (5, 4, 8).
    llama = launch(sglang_059, "--model-path", model("LlamaForCausalLM"), *EAGLE)
    # DeepSeek V3 (MTP): the draft defaults to the target (2397-2416); (3, 1, 4).
    deepseek = launch(sglang_059, "--model-path", model("DeepseekV3ForCausalLM"),
                      "--speculative-algorithm", "EAGLE", "--max-running-requests", "16")
    resolved = {}
    for name, proc in (("forced", forced), ("llama", llama), ("deepseek", deepseek)):
        wait_for(proc, "/server_info", 200)
        info = json.loads(get(proc.url + "/server_info")[1])
        resolved[name] = (info["speculative_num_steps"], info["speculative_eagle_topk"],
                          info["speculative_num_draft_tokens"], info["max_running_requests"])
    assert resolved == {"forced": (2, 1, 3, 48), "llama": (5, 4, 8, 48),
                        "deepseek": (3, 1, 4, 16)}
    info = json.loads(get(deepseek.url + "/server_info")[1])
    assert info["speculative_draft_model_path"] == info["model_path"]
    _, err = stop(forced)
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" in err
    assert "Max running requests is reset to 48 for speculative decoding" in err


# -- start-up -------------------------------------------------------------------


def test_no_listener_while_loading_then_503_until_its_own_warmup(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, warmup=2.0, SGLFLEET_STANDIN_TIME_SCALE="1")
    assert wait_listening(proc) > 0  # refused while "loading" (http_server.py:1893-1966)
    # Starting: /health is 503 until the warm-up generation (a second away at least)...
    assert get(proc.url + "/health") == (503, "")
    # ...but generations are served: 0.5.9 refuses nothing else while Starting.
    out = generate(proc, 4)
    assert out["meta_info"]["completion_tokens"] == 4
    assert get(proc.url + "/health")[0] == 503
    seen = wait_for(proc, "/health", 200)
    assert set(seen) == {503, 200}
    started = time.monotonic()
    assert get(proc.url + "/health_generate") == (200, "")
    assert time.monotonic() - started >= 0.9  # a one-token generation, looked at after 1 s
    code, err = stop(proc)
    assert code == -signal.SIGKILL
    order = [err.index(line) for line in ("Load weight end", "Uvicorn running",
                                          '"POST /generate HTTP/1.1" 200',
                                          "The server is fired up and ready to roll!")]
    assert order == sorted(order)


def test_endpoints_echo_the_launch(launch, sglang_059):
    proc = launch(sglang_059, "--model", "/models/kimi", "--tp-size", "8", *EAGLE[:2],
                  "--speculative-draft-model", "/models/d", "--mem-fraction-static", "0.85",
                  "--trust-remote-code")
    wait_for(proc)
    for path in ("/model_info", "/get_model_info"):
        code, body = get(proc.url + path)
        info = json.loads(body)
        assert code == 200
        assert info["model_path"] == info["tokenizer_path"] == "/models/kimi"
        assert info["architectures"] == ["KimiK25ForConditionalGeneration"]
        assert info["is_generation"] is True
    for path in ("/server_info", "/get_server_info"):
        info = json.loads(get(proc.url + path)[1])
        assert info["version"] == "0.5.9"
        assert (info["tp_size"], info["mem_fraction_static"], info["trust_remote_code"]) == (
            8, 0.85, True)
        assert info["speculative_draft_model_path"] == "/models/d"
        assert info["port"] == proc.port
        # 0.5.9's resolution for KimiK25 (not a listed architecture): (3, 1, 4), 48 requests.
        assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
                info["speculative_num_draft_tokens"], info["max_running_requests"]) == (3, 1, 4, 48)
        assert info["enable_metrics"] is False

    out = generate(proc, 4)
    assert len(out["text"].split()) == 4
    assert out["meta_info"]["completion_tokens"] == 4
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 4}

    code, body = get(proc.url + "/v1/completions", {"Content-Type": "application/json"},  # 0.5.9 needs it
                     body={"model": "kimi", "prompt": "Hello", "max_tokens": 3})
    out = json.loads(body)
    assert code == 200 and out["object"] == "text_completion"
    assert out["usage"]["completion_tokens"] == 3 and out["choices"][0]["text"]
    assert get(proc.url + "/no_such_route")[0] == 404
    assert get(proc.url + "/metrics")[0] == 404  # only with --enable-metrics
    assert stop(proc)[0] == -signal.SIGKILL


# -- generation, meta_info and metrics -----------------------------------------------


def test_meta_info_counts_verify_steps_as_059(launch, sglang_059):
    spec = launch(sglang_059, *KIMI_PATH, *EAGLE, "--skip-server-warmup")
    plain = launch(sglang_059, *KIMI_PATH, "--skip-server-warmup")
    wait_for(spec, "/model_info")
    meta = generate(spec, 256)["meta_info"]
    # One draft+verify pass per step; the prefill gives the first token: 255 tokens at
    # 2.8 a step (the knob's default) are 92 passes.
    assert (meta["completion_tokens"], meta["spec_verify_ct"]) == (256, 92)
    # tokenizer_manager.py:1844-1857
    assert meta["spec_accept_length"] == 256 / 92
    assert meta["spec_draft_token_num"] == 92 * (4 - 1)
    assert meta["spec_accept_rate"] == meta["spec_accept_token_num"] / meta["spec_draft_token_num"]
    histogram = meta["spec_accept_histogram"]  # index: drafts accepted in a step
    assert sum(histogram) == 92
    assert sum(i * n for i, n in enumerate(histogram)) == meta["spec_accept_token_num"]
    assert meta["e2e_latency"] >= 93 * 0.005  # 93 timed passes of 5 ms

    wait_for(plain, "/model_info")
    meta = generate(plain, 16)["meta_info"]
    assert meta["completion_tokens"] == 16 and not any(k.startswith("spec_") for k in meta)


def test_decode_stats_gauges_follow_decode_log_interval(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, *EAGLE, "--enable-metrics", "--skip-server-warmup")
    wait_for(proc, "/model_info")
    text = scrape(proc)  # nothing has run: no sample, not even # HELP, as prometheus_client
    assert "sglang:spec_accept_length" not in text and "sglang:gen_throughput" not in text
    assert value(text, "sglang:cache_config_info") == 1.0  # set at scheduler start-up

    first = generate(proc, 100)["meta_info"]
    passes = first["spec_verify_ct"]
    assert passes < 40
    # Its prefill published every scheduler gauge (log_prefill_stats -> log_stats): the
    # decode ones read 0.0 until a decode-stats window, not "absent".
    text = scrape(proc)
    assert value(text, "sglang:spec_accept_length") == 0.0
    assert value(text, "sglang:gen_throughput") == 0.0
    while passes < 39:  # two tokens: the prefill's and exactly one decode pass
        assert generate(proc, 2)["meta_info"]["spec_verify_ct"] == 1
        passes += 1
    assert value(scrape(proc), "sglang:spec_accept_length") == 0.0  # 39 passes
    generate(proc, 2)  # the 40th decode pass: log_decode_stats
    text = scrape(proc)
    # Over the window: tokens of each request-step (accepted + 1) over request-steps.
    # The first request's passes gave all its tokens but the prefill's; each filler one.
    window_tokens = (first["completion_tokens"] - 1) + (40 - first["spec_verify_ct"])
    assert value(text, "sglang:spec_accept_length") == pytest.approx(window_tokens / 40)
    assert value(text, "sglang:spec_accept_rate") == pytest.approx(window_tokens / (40 * 4))
    assert value(text, "sglang:num_running_reqs") == 1  # the batch of the 40th pass
    throughput = value(text, "sglang:gen_throughput")
    assert 0 < throughput <= window_tokens / (40 * 0.005)  # measured over >= 40 passes
    # meta_info's length counts the prefill's token; the gauge does not.
    assert first["spec_accept_length"] > (first["completion_tokens"] - 1) / first["spec_verify_ct"]

    generate(proc, 1)  # a prefill only: re-publishes the decode values unchanged
    text = scrape(proc)
    assert value(text, "sglang:spec_accept_length") == pytest.approx(window_tokens / 40)
    assert value(text, "sglang:num_running_reqs") == 0


def test_warmup_request_shows_in_the_metrics(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, "--enable-metrics")
    wait_for(proc)
    text = scrape(proc)
    # The server's own warm-up: "The capital city of France is", 8 new tokens.
    assert value(text, "sglang:num_requests_total") == 1
    assert value(text, "sglang:generation_tokens_total") == 8
    assert value(text, "sglang:prompt_tokens_total") == 6
    assert value(text, "sglang:time_to_first_token_seconds_count") == 1
    assert value(text, "sglang:spec_accept_length") == 0.0  # speculative decoding off
    # Health checks generate but are not counted (log_metrics=False).
    assert get(proc.url + "/health")[0] == 200
    assert value(scrape(proc), "sglang:num_requests_total") == 1


def test_latency_histograms_hold_measured_times(launch, sglang_059):
    step = 0.02
    proc = launch(sglang_059, *KIMI_PATH, "--enable-metrics", "--skip-server-warmup",
                  SGLFLEET_STANDIN_STEP_S=str(step))
    wait_for(proc, "/model_info")
    events = stream(proc, 60)  # an output after every pass (stream_interval 1)
    assert events[-1] == "data: [DONE]" and len(events) == 61
    assert json.loads(events[-2][6:])["meta_info"]["completion_tokens"] == 60
    text = scrape(proc)
    ttft = value(text, "sglang:time_to_first_token_seconds_sum")
    assert value(text, "sglang:time_to_first_token_seconds_count") == 1
    assert step <= ttft < 0.5  # one prefill pass
    itl_sum = value(text, "sglang:inter_token_latency_seconds_sum")
    assert value(text, "sglang:inter_token_latency_seconds_count") == 59
    assert step <= itl_sum / 59 < 5 * step  # one decode pass a token
    assert value(text, "sglang:e2e_request_latency_seconds_sum") >= 60 * step

    # Non-streaming: outputs at every 50th token and at the end
    # (scheduler_output_processor_mixin.py:984-988), so TTFT is the time to token 50.
    generate(proc, 60)
    text = scrape(proc)
    assert value(text, "sglang:time_to_first_token_seconds_count") == 2
    assert value(text, "sglang:time_to_first_token_seconds_sum") - ttft >= 50 * step
    assert value(text, "sglang:inter_token_latency_seconds_count") == 59 + 10
    assert value(text, "sglang:e2e_request_latency_seconds_count") == 2
    assert value(text, "sglang:generation_tokens_total") == 120
    assert value(text, "sglang:num_requests_total") == 2
    assert value(text, "sglang:prompt_tokens_total") == 1 + 2  # "Hi", "Hello there"
    # The HTTP middleware counts a response once its last byte is written, in the handler's thread:
    # on a busy machine the client's next scrape may come first (a bounded wait, not a sleep).
    deadline = time.monotonic() + 5
    while value(text, "sglang:http_responses_total", endpoint="/generate", status_code="200") != 2 \
            and time.monotonic() < deadline:
        time.sleep(0.05)
        text = scrape(proc)
    assert value(text, "sglang:http_responses_total", endpoint="/generate", status_code="200") == 2


def _collector_definitions(package: Path) -> dict[str, dict]:
    """name -> documentation and buckets of each metric 0.5.9 defines with literal arguments."""
    found = {}
    for path in ("sglang/srt/metrics/collector.py", "sglang/srt/utils/common.py",
                 "sglang/srt/metrics/cpu_monitor.py"):
        tree = ast.parse((package / path).read_text())
        lists = {node.targets[0].id: ast.literal_eval(node.value)  # bucket_... = [0.1, ...]
                 for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 and isinstance(node.targets[0], ast.Name)
                 and node.targets[0].id.startswith("bucket_") and isinstance(node.value, ast.List)}
        for node in ast.walk(tree):
            if getattr(node, "func", None) is None or getattr(node.func, "id", "") not in (
                    "Gauge", "Counter", "Histogram", "GaugeHistogram"):
                continue
            kw = {k.arg: k.value for k in node.keywords}
            if isinstance(kw.get("name"), ast.Constant) and isinstance(
                    kw.get("documentation"), ast.Constant):
                bucket = kw.get("buckets")
                found[kw["name"].value] = {
                    "doc": kw["documentation"].value,
                    "buckets": ast.literal_eval(bucket) if isinstance(bucket, ast.List)
                    else lists.get(getattr(bucket, "id", None))}
    return found


def test_series_match_the_installed_collector(launch, sglang_059):
    defined = _collector_definitions(sglang_059)
    proc = launch(sglang_059, *KIMI_PATH, *EAGLE, "--enable-metrics")
    wait_for(proc)
    stream(proc, 200)  # a non-streaming one may skip every multiple of 50: no ITL
    text = scrape(proc)
    helps = [line.split(" ", 3) for line in text.splitlines() if line.startswith("# HELP")]
    assert len(helps) > 30
    for _, _, name, doc in helps:
        assert defined[name]["doc"] == doc, name
    for name in ("sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
                 "sglang:e2e_request_latency_seconds", "sglang:num_retractions"):
        bounds = [float(dict(pairs)["le"]) for (n, pairs) in samples(text)
                  if n == name + "_bucket"]
        assert bounds == [float(b) for b in defined[name]["buckets"]] + [float("inf")], name
    scheduler = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
    for (name, pairs) in samples(text):
        keys = {k for k, _ in pairs}
        if name in ("sglang:spec_accept_length", "sglang:gen_throughput",
                    "sglang:num_running_reqs", "sglang:token_usage"):
            assert keys == scheduler, name
        if name.startswith("sglang:time_to_first_token"):
            assert keys - {"le"} == {"model_name"}


def test_a_client_that_hangs_up_aborts_its_request(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, "--enable-metrics", "--skip-server-warmup",
                  SGLFLEET_STANDIN_STEP_S="0.01")
    wait_for(proc, "/model_info")
    body = json.dumps({"text": "x", "sampling_params": {"max_new_tokens": 1000}}).encode()
    with socket.create_connection(("127.0.0.1", proc.port)) as sock:
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(0.3)
    deadline = time.monotonic() + 8  # seen at its next output (token 50) or within 4 s
    while value(scrape(proc), "sglang:num_aborted_requests_total") != 1:
        assert time.monotonic() < deadline, scrape(proc)
        time.sleep(0.2)
    assert value(scrape(proc), "sglang:num_requests_total") is None  # none finished


# -- signals ----------------------------------------------------------------------


def test_sigterm_while_loading_ends_it_at_once(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, warmup=10)
    time.sleep(1)
    started = time.monotonic()
    code, _ = stop(proc)
    assert code == -signal.SIGTERM and time.monotonic() - started < 3


def test_sigterm_drains_in_flight_requests_then_the_server_kills_itself(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, SGLFLEET_STANDIN_STEP_S="0.01", SGLFLEET_STANDIN_TIME_SCALE="1")
    wait_for(proc)
    long = {}
    thread = threading.Thread(target=lambda: long.update(out=generate(proc, 600)))
    thread.start()
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGTERM)
    time.sleep(0.2)  # for the handler to run
    started = time.monotonic()
    assert get(proc.url + "/health") == (503, "")  # at once, no generation
    assert time.monotonic() - started < 0.5
    assert generate(proc, 4)["meta_info"]["completion_tokens"] == 4  # still served
    thread.join(30)
    finished = time.monotonic()
    assert long["out"]["meta_info"]["completion_tokens"] == 600
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL  # kill_process_tree(..., include_parent=True)
    assert time.monotonic() >= finished
    assert "Draining requests and shutting down" in err
    assert "Gracefully exiting... Remaining number of requests 1." in err


def test_059_refuses_at_the_watchdogs_look_with_no_silent_window(launch, sglang_059):
    """0.5.9 kills its tree at the watchdog's look (tokenizer_manager.py:2146-2148): /health answers
    503 until the port refuses. 0.5.14's wait for its schedulers, with nothing answered (held to the
    H200 record in test_standin_http_record.py), is not 0.5.9's, however long it is set."""
    proc = launch(sglang_059, *KIMI_PATH, SGLFLEET_STANDIN_SCHEDULER_EXIT_S="2")
    wait_for(proc)
    os.kill(proc.pid, signal.SIGTERM)
    seen, deadline = [], time.monotonic() + 10
    while not seen or seen[-1] != "refused":
        assert time.monotonic() < deadline, seen
        try:
            seen.append(get(proc.url + "/health", timeout=0.3)[0])
        except OSError as error:  # no answer (a timeout, a reset), or refused
            refused = isinstance(getattr(error, "reason", None), ConnectionRefusedError)
            seen.append("refused" if refused else type(error).__name__)
        time.sleep(0.02)
    # A probe sent as the signal lands may still get 200, before the handler ran (seen once under load).
    seen = seen[next(index for index, outcome in enumerate(seen) if outcome != 200):]
    # A probe the kill meets half answered is reset (one at most); none waits unanswered, as in 0.5.14.
    assert set(seen) - {"ConnectionResetError"} == {503, "refused"} and seen.count("ConnectionResetError") <= 1, seen
    assert proc.wait(10) == -signal.SIGKILL


def test_sglangs_own_waits_are_its_real_ones_unless_scaled(launch, sglang_059):
    """0.5.9's fixed waits by default (5 s SIGTERM watchdog, 1 s looks of /health and of the
    warm-up, cited where they are set); SGLFLEET_STANDIN_TIME_SCALE shrinks each alike."""
    def waits(scale: str | None) -> list[float]:
        env = {**os.environ, "PYTHONPATH": str(STANDIN.parent)}
        env.pop("SGLFLEET_STANDIN_TIME_SCALE", None)
        if scale:
            env["SGLFLEET_STANDIN_TIME_SCALE"] = scale
        code = ("import sglang_standin as s, standin_http as h; "
                "print(s.SIGTERM_WATCHDOG_S, h.HEALTH_POLL_S, h.MODEL_INFO_POLL_S)")
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=STANDIN.parent,
                             capture_output=True, text=True, check=True).stdout
        return [float(word) for word in out.split()]

    assert waits(None) == [5.0, 1.0, 1.0]
    assert waits("0.1") == pytest.approx([0.5, 0.1, 0.1])
    # Scaled, in behaviour: a /health of a server that is up answers in a tenth of a second,
    # and a stop after the first generation ends within the watchdog's half second.
    proc = launch(sglang_059, *KIMI_PATH, SGLFLEET_STANDIN_TIME_SCALE="0.1")
    wait_for(proc)
    started = time.monotonic()
    assert get(proc.url + "/health_generate") == (200, "")
    assert 0.08 <= time.monotonic() - started < 0.8  # at scale 1 it is at least 1 s (the test above)
    started = time.monotonic()
    code, err = stop(proc)
    assert code == -signal.SIGKILL and time.monotonic() - started < 2.0
    assert "Draining requests and shutting down" in err


def test_fault_slow_load_stretches_loading_only(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, fault="slow-load 1.5", warmup=0.2)
    started = time.monotonic()
    wait_listening(proc)
    assert time.monotonic() - started >= 1.3  # 0.2 s of loading, 1.5 s more
    wait_for(proc)
    started = time.monotonic()
    assert generate(proc, 8)["meta_info"]["completion_tokens"] == 8
    assert time.monotonic() - started < 1.0  # once up, as fast as ever: 8 passes of 5 ms


def test_sigint_is_uvicorns_graceful_stop(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH)
    wait_for(proc)
    code, err = stop(proc, signal.SIGINT)
    assert code == -signal.SIGINT and "Shutting down" in err


# -- API key, EAGLE-3, other releases -------------------------------------------------


def test_api_key_guards_all_but_health_and_metrics(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, "--api-key", "s3cret-key", "--enable-metrics")
    wait_for(proc)  # the warm-up sends the key itself
    good = {"Authorization": "Bearer s3cret-key"}
    for path in ("/health", "/health_generate", "/metrics"):
        assert get(proc.url + path)[0] == 200, path
    for path in ("/model_info", "/server_info", "/get_server_info", "/v1/models"):
        assert get(proc.url + path) == (401, '{"error":"Unauthorized"}'), path
        assert get(proc.url + path, {"Authorization": "Bearer wrong"})[0] == 401, path
        assert get(proc.url + path, good)[0] == 200, path
    assert get(proc.url + "/generate", body={"text": "x"})[0] == 401
    assert get(proc.url + "/generate", good, body={"text": "x"})[0] == 200
    code, err = stop(proc)
    assert code == -signal.SIGKILL
    # sglang logs its ServerArgs, the key among them (0.5.9 entrypoints/engine.py:1031): the
    # launch script blanks it on its way to the journal (test_security holds the fleet to that).
    assert "api_key='s3cret-key'" in err


def test_eagle3_with_unpatched_059_dies_like_sglang(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, *EAGLE3)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert ATTRIBUTE_ERROR in err
    assert "Uvicorn running" not in err


def test_eagle3_with_patched_file_turns_healthy(launch, sglang_059_patched):
    proc = launch(sglang_059_patched, *KIMI_PATH, *EAGLE3)
    wait_for(proc)
    assert json.loads(get(proc.url + "/server_info")[1])["speculative_algorithm"] == "EAGLE3"
    assert stop(proc)[0] == -signal.SIGKILL


def test_eagle3_check_follows_the_models_architecture(launch, sglang_059, tmp_path):
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    proc = launch(sglang_059, "--model-path", str(model), *EAGLE3)
    wait_for(proc)
    assert json.loads(get(proc.url + "/model_info")[1])["model_type"] == "llama"


def test_flags_follow_the_installed_release(launch):
    from test_server_flags import python_tree  # the .py files of a wheel, under .cache/

    site = python_tree("0.5.23")
    # 0.5.23 split --cuda-graph-max-bs into -decode/-prefill; argparse's prefix
    # matching then calls the old spelling ambiguous. --attn-dp-size is new.
    proc = launch(site, *KIMI_PATH, "--cuda-graph-max-bs", "64")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill") in err
    proc = launch(site, *KIMI_PATH, "--attn-dp-size", "2", *EAGLE3)
    wait_for(proc)
    info = json.loads(get(proc.url + "/server_info")[1])
    assert (info["version"], info["attn_dp_size"]) == ("0.5.23", 2)


def test_api_key_from_a_config_file_as_sglfleet_launches_it(launch, sglang_059, tmp_path):
    # The launch script keeps the key out of argv: `--config secrets.yaml`, merged as
    # sglang 0.5.9's ConfigArgumentMerger does (config before the command line).
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text("api-key: 'k3y''with-quote'\n")
    proc = launch(sglang_059, *KIMI_PATH, "--config", str(secrets))
    wait_for(proc)
    assert get(proc.url + "/generate", body={"text": "x"})[0] == 401
    good = {"Authorization": "Bearer k3y'with-quote"}
    assert get(proc.url + "/generate", good, body={"text": "x"})[0] == 200
    assert stop(proc)[0] == -signal.SIGKILL


# -- compile caches ---------------------------------------------------------------


SPEC_SHAPE = ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def test_a_cold_start_compiles_before_it_listens_and_a_warm_one_loads_the_cache(launch, sglang_059_patched,
                                                                                tmp_path):
    times, said = [], []
    for _ in range(2):
        started = time.monotonic()
        proc = launch(sglang_059_patched, *KIMI_PATH, *EAGLE3, *SPEC_SHAPE, "--speculative-num-steps", "3",
                      warmup=0.1, SGLFLEET_STANDIN_COMPILE_S="2")
        wait_listening(proc, timeout=30)
        times.append(time.monotonic() - started)
        wait_for(proc)
        _, err = stop(proc)
        assert "Capture cuda graph end" in err
        said.append(err)
    # Cold, it listens only after compiling (a lower bound holds on a busy machine); warm, it says it
    # compiled nothing (what it did, not how long a loaded machine took).
    assert times[0] >= 2.0, times
    assert "3 kernels: 0 from the compile cache, 3 compiled" in said[0]
    kernels = sorted(p.name for p in (tmp_path / "compile" / "triton").rglob("*.cubin"))
    assert [name.split("_")[0] for name in kernels] == ["decode", "draft", "target"]
    assert "3 kernels: 3 from the compile cache, 0 compiled" in said[1]


def test_other_flags_need_other_kernels(launch, sglang_059_patched, tmp_path):
    for steps in ("3", "4"):
        proc = launch(sglang_059_patched, *KIMI_PATH, *EAGLE3, *SPEC_SHAPE, "--speculative-num-steps", steps,
                      warmup=0.1, SGLFLEET_STANDIN_COMPILE_S="0.3")
        wait_for(proc)
        _, err = stop(proc)
        assert "0 from the compile cache, 3 compiled" in err
    assert len(list((tmp_path / "compile" / "triton").rglob("*.cubin"))) == 6


def test_the_first_sampled_request_waits_for_the_sampling_jit_and_greedy_ones_never(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, warmup=0.1, SGLFLEET_STANDIN_SAMPLING_JIT_S="1.5")
    wait_for(proc)
    took = []
    for extra in ({"temperature": 0}, {}, {}):
        started = time.monotonic()
        code, body = get(proc.url + "/generate", body={"text": "Hi", "sampling_params": {
            "max_new_tokens": 4, **extra}})
        assert code == 200, body
        took.append(time.monotonic() - started)
    assert took[0] < 1.0 and took[1] >= 1.5 and took[2] < 1.0, took
    _, err = stop(proc)
    assert "sampling module compiled" in err


def test_a_corrupt_kernel_in_the_cache_crashes_the_next_start_as_on_a_gpu(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, fault="corrupt-cache", warmup=0.1)
    wait_for(proc)  # it runs the kernels it compiled; only what it wrote is bad
    stop(proc)
    proc = launch(sglang_059, *KIMI_PATH, warmup=0.1)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGKILL  # the scheduler's SIGQUIT: the server kills its tree
    assert "device kernel image is invalid" in err and "Received sigquit from a child process" in err


# -- faults -----------------------------------------------------------------------


def test_fault_crash_exits_nonzero_at_start(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, fault="crash")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode != 0
    assert "CUDA error" in err


def test_fault_hang_holds_the_port_and_never_answers(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, fault="hang")
    wait_listening(proc)
    time.sleep(1.0)  # well past the 0.5 s warm-up
    with pytest.raises(OSError):  # socket.timeout / URLError: nothing answers
        get(proc.url + "/health", timeout=1)
    assert proc.poll() is None
    assert stop(proc)[0] == -signal.SIGTERM  # no handler in a hung server


def test_fault_unready_stays_503(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, fault="unready", warmup=0.2)
    wait_for(proc, "/health", 503)
    time.sleep(2.0)  # past the warm-up's first look at /model_info
    assert get(proc.url + "/health")[0] == 503
    assert get(proc.url + "/health_generate")[0] == 503
    assert proc.poll() is None


def test_fault_slow_stretches_loading_and_generation(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, fault="slow", warmup=0.2,
                  SGLFLEET_STANDIN_SLOW_GENERATE="0.5")
    assert wait_listening(proc) > 0  # x10: loading takes 2 s, not 0.2 s
    wait_for(proc, "/health", 200, timeout=20)
    started = time.monotonic()
    assert generate(proc, 8)["meta_info"]["completion_tokens"] == 8
    assert time.monotonic() - started >= 0.5


def test_fault_slow_after_regresses_latency_once_up(launch, sglang_059):
    step = 0.01
    proc = launch(sglang_059, *KIMI_PATH, "--enable-metrics", "--skip-server-warmup",
                  fault="slow-after 2 10", SGLFLEET_STANDIN_STEP_S=str(step))
    wait_for(proc, "/model_info")
    up = time.monotonic()

    def streamed(tokens: int) -> tuple[float, float]:
        """(TTFT, mean inter-token latency) of one streaming generation, from /metrics."""
        before = samples(scrape(proc))
        stream(proc, tokens)
        after = samples(scrape(proc))

        def delta(name):
            key = (name, (("model_name", "/models/kimi"),))
            return after[key] - before.get(key, 0.0)
        return (delta("sglang:time_to_first_token_seconds_sum"),
                delta("sglang:inter_token_latency_seconds_sum")
                / delta("sglang:inter_token_latency_seconds_count"))

    ttft, itl = streamed(20)
    assert time.monotonic() - up < 2, "too slow a machine for this test"
    assert itl < 5 * step
    time.sleep(max(0.0, up + 2.2 - time.monotonic()))
    slow_ttft, slow_itl = streamed(20)
    assert slow_itl >= 8 * step and slow_ttft >= 8 * step
    assert slow_ttft > ttft and slow_itl > itl
    # Bounded: 300 tokens at 10x would add 27 s; a generation gains 5 s at most.
    started = time.monotonic()
    generate(proc, 300)
    assert time.monotonic() - started < 5 + 300 * step + 3


def test_fault_spares_the_release_that_served_when_it_was_set(launch, sglang_059, tmp_path):
    releases = tmp_path / "root" / "releases"
    (releases / "old").mkdir(parents=True)
    (releases / "new").mkdir()
    current = tmp_path / "root" / "current"
    current.symlink_to("releases/new")
    env = {"SGLFLEET_ROOT": str(tmp_path / "root")}

    crashing = launch(sglang_059, *KIMI_PATH, fault="crash\nspare old", **env)
    crashing.communicate(timeout=20)
    assert crashing.returncode != 0  # the new release crashes

    current.unlink()
    current.symlink_to("releases/old")
    spared = launch(sglang_059, *KIMI_PATH, fault="crash\nspare old", **env)
    wait_for(spared)  # the release it rolls back to serves
    assert stop(spared)[0] == -signal.SIGKILL
