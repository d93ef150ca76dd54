"""The SGLang stand-in as a real process, over the real sglang 0.5.9 package files."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from sglfleet import FILES, PROJECT_ROOT
from sglfleet.patcher import apply, load_patch
from sglfleet.upstream import sglang_wheel

STANDIN = FILES / "standin" / "sglang_standin.py"
KIMI = "sglang/srt/models/kimi_k25.py"
ATTRIBUTE_ERROR = ("AttributeError: 'KimiK25ForConditionalGeneration' object has no "
                   "attribute 'set_eagle3_layers_to_capture'")
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/draft"]


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
    """Start the stand-in; every process is killed by its pid at teardown."""
    procs: list[subprocess.Popen] = []

    def start(site: Path, *flags, fault: str | None = None, warmup: float = 0.5, **env):
        port = free_port()
        fault_file = tmp_path / "standin-fault"
        if fault:
            fault_file.write_text(fault + "\n")
        environ = {**os.environ, "PYTHONPATH": str(site),
                   "SGLFLEET_CACHE": str(tmp_path / "cache"),
                   "SGLFLEET_STANDIN_FAULT_FILE": str(fault_file),
                   "SGLFLEET_STANDIN_WARMUP": str(warmup), **env}
        argv = [sys.executable, str(STANDIN), *flags]
        if "--port" not in flags:
            argv += ["--port", str(port)]
        proc = subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        proc.url = f"http://127.0.0.1:{port}"
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


def get(url: str, headers: dict | None = None, body: dict | None = None, timeout: float = 5):
    """(status, body text) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for(proc, path="/health", status=200, timeout=10.0) -> list[int]:
    """Poll until ``path`` answers ``status``; the statuses seen on the way."""
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        try:
            code = get(proc.url + path, timeout=1)[0]
            seen.append(code)
            if code == status:
                return seen
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{path} never answered {status} in {timeout}s (saw {set(seen)})")


def stop(proc) -> tuple[int, str]:
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    return proc.returncode, err


def test_unknown_flag_exits_2_with_argparses_message(launch, sglang_059):
    proc = launch(sglang_059, "--model-path", "/models/kimi", "--no-such-flag")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "launch_server.py: error: unrecognized arguments: --no-such-flag" in err

    proc = launch(sglang_059, "--model-path", "m", "--speculative-algorithm", "EAGLE4")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "argument --speculative-algorithm: invalid choice: 'EAGLE4'" in err


def test_health_is_503_during_warmup_then_200(launch, sglang_059):
    proc = launch(sglang_059, "--model-path", "/models/kimi", warmup=1.0)
    seen = wait_for(proc, "/health", 200)
    assert seen[0] == 503 and set(seen) == {503, 200}
    assert get(proc.url + "/health_generate") == (200, "")
    assert get(proc.url + "/health") == (200, "")
    code, err = stop(proc)
    assert code == 0
    assert "The server is fired up and ready to roll!" in err


def test_endpoints_echo_the_launch(launch, sglang_059):
    proc = launch(sglang_059, "--model", "/models/kimi", "--tp-size", "8",
                  "--speculative-algorithm", "EAGLE", "--speculative-draft-model", "/models/d",
                  "--mem-fraction-static", "0.85", "--trust-remote-code")
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
        assert info["port"] == int(proc.url.rsplit(":", 1)[1])
        # 0.5.9's resolution with speculative decoding: auto steps, 48 running requests.
        assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
                info["speculative_num_draft_tokens"], info["max_running_requests"]) == (3, 1, 4, 48)
        assert info["enable_metrics"] is False

    code, body = get(proc.url + "/generate",
                     body={"text": "Hello", "sampling_params": {"max_new_tokens": 4}})
    out = json.loads(body)
    assert code == 200 and len(out["text"].split()) == 4
    assert out["meta_info"]["completion_tokens"] == 4
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 4}

    code, body = get(proc.url + "/v1/completions",
                     body={"model": "kimi", "prompt": "Hello", "max_tokens": 3})
    out = json.loads(body)
    assert code == 200 and out["object"] == "text_completion"
    assert out["usage"]["completion_tokens"] == 3 and out["choices"][0]["text"]
    assert get(proc.url + "/no_such_route")[0] == 404
    assert stop(proc)[0] == 0


def test_generate_is_503_before_ready(launch, sglang_059):
    proc = launch(sglang_059, "--model-path", "/models/kimi", warmup=30)
    wait_for(proc, "/health", 503)
    assert get(proc.url + "/generate", body={"text": "x"})[0] == 503
    assert get(proc.url + "/v1/completions", body={"prompt": "x"})[0] == 503


def test_metrics_only_with_enable_metrics(launch, sglang_059):
    plain = launch(sglang_059, "--model-path", "/models/kimi")
    metered = launch(sglang_059, "--model-path", "/models/kimi", "--enable-metrics")
    spec = launch(sglang_059, "--model-path", "/models/kimi", "--enable-metrics",
                  "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "/d",
                  SGLFLEET_STANDIN_SPEC_ACCEPT_LENGTH="3.1")
    for proc in (plain, metered, spec):
        wait_for(proc)
    assert get(plain.url + "/metrics")[0] == 404

    def series(proc) -> dict[str, float]:
        code, text = get(proc.url + "/metrics")
        assert code == 200
        return {line.split("{")[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines() if line and not line.startswith("#")}

    for proc in (metered, spec):
        get(proc.url + "/generate", body={"text": "x", "sampling_params": {"max_new_tokens": 8}})
        values = series(proc)
        for name in ("sglang:num_running_reqs", "sglang:gen_throughput",
                     "sglang:time_to_first_token_seconds_count"):
            assert name in values
        assert values["sglang:generation_tokens_total"] == 8
        assert values["sglang:gen_throughput"] > 0
    # Speculative decoding off: the series are there and 0, as in 0.5.9.
    assert series(metered)["sglang:spec_accept_length"] == 0
    assert series(metered)["sglang:spec_accept_rate"] == 0
    assert series(spec)["sglang:spec_accept_length"] == 3.1
    assert series(spec)["sglang:spec_accept_rate"] == pytest.approx(3.1 / 4)


def test_api_key_guards_all_but_health_and_metrics(launch, sglang_059):
    proc = launch(sglang_059, "--model-path", "/models/kimi", "--api-key", "s3cret-key",
                  "--enable-metrics")
    wait_for(proc)
    good = {"Authorization": "Bearer s3cret-key"}
    for path in ("/health", "/health_generate", "/metrics"):
        assert get(proc.url + path)[0] == 200, path
    for path in ("/model_info", "/server_info", "/get_server_info", "/v1/models"):
        assert get(proc.url + path) == (401, '{"error": "Unauthorized"}'), path
        assert get(proc.url + path, {"Authorization": "Bearer wrong"})[0] == 401, path
        assert get(proc.url + path, good)[0] == 200, path
    assert get(proc.url + "/generate", body={"text": "x"})[0] == 401
    assert get(proc.url + "/generate", good, body={"text": "x"})[0] == 200
    code, err = stop(proc)
    assert code == 0 and "s3cret-key" not in err


def test_eagle3_with_unpatched_059_dies_like_sglang(launch, sglang_059):
    proc = launch(sglang_059, "--model-path", "/models/kimi", *EAGLE3)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert ATTRIBUTE_ERROR in err


def test_eagle3_with_patched_file_turns_healthy(launch, sglang_059_patched):
    proc = launch(sglang_059_patched, "--model-path", "/models/kimi", *EAGLE3)
    wait_for(proc)
    assert json.loads(get(proc.url + "/server_info")[1])["speculative_algorithm"] == "EAGLE3"
    assert stop(proc)[0] == 0


def test_eagle3_check_follows_the_models_architecture(launch, sglang_059, tmp_path):
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    proc = launch(sglang_059, "--model-path", str(model), *EAGLE3)
    wait_for(proc)
    assert json.loads(get(proc.url + "/model_info")[1])["model_type"] == "llama"


def test_fault_crash_exits_nonzero_at_start(launch, sglang_059):
    proc = launch(sglang_059, "--model-path", "/models/kimi", fault="crash")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode != 0
    assert "CUDA error" in err


def test_fault_hang_holds_the_port_and_never_answers(launch, sglang_059):
    proc = launch(sglang_059, "--model-path", "/models/kimi", fault="hang")
    host, port = proc.url.rsplit("/", 1)[1].split(":")
    deadline = time.monotonic() + 10
    while True:  # wait for the listening socket, bounded
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    time.sleep(1.0)  # well past the 0.5 s warm-up
    with pytest.raises(OSError):  # socket.timeout / URLError: nothing answers
        get(proc.url + "/health", timeout=1)
    assert proc.poll() is None
    assert stop(proc)[0] == 0


def test_fault_unready_stays_503(launch, sglang_059):
    proc = launch(sglang_059, "--model-path", "/models/kimi", fault="unready", warmup=0.2)
    wait_for(proc, "/health", 503)
    time.sleep(1.0)
    assert get(proc.url + "/health")[0] == 503
    assert get(proc.url + "/health_generate")[0] == 503
    assert proc.poll() is None


def test_fault_slow_stretches_warmup_and_generation(launch, sglang_059):
    proc = launch(sglang_059, "--model-path", "/models/kimi", fault="slow", warmup=0.2,
                  SGLFLEET_STANDIN_SLOW_GENERATE="0.5")
    wait_for(proc, "/health", 503)
    time.sleep(0.5)
    assert get(proc.url + "/health")[0] == 503  # x10: 2 s, not 0.2 s
    wait_for(proc, "/health", 200, timeout=10)
    started = time.monotonic()
    assert get(proc.url + "/generate", body={"text": "x"})[0] == 200
    assert time.monotonic() - started >= 0.5


def test_flags_follow_the_installed_release(launch):
    from test_server_flags import python_tree  # the .py files of a wheel, under .cache/

    site = python_tree("0.5.23")
    # 0.5.23 split --cuda-graph-max-bs into -decode/-prefill; argparse's prefix
    # matching then calls the old spelling ambiguous. --attn-dp-size is new.
    proc = launch(site, "--model-path", "/models/kimi", "--cuda-graph-max-bs", "64")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill") in err
    proc = launch(site, "--model-path", "/models/kimi", "--attn-dp-size", "2", *EAGLE3)
    wait_for(proc)
    info = json.loads(get(proc.url + "/server_info")[1])
    assert (info["version"], info["attn_dp_size"]) == ("0.5.23", 2)


def test_api_key_from_a_config_file_as_sglfleet_launches_it(launch, sglang_059, tmp_path):
    # The launch script keeps the key out of argv: `--config secrets.yaml`, merged as
    # sglang 0.5.9's ConfigArgumentMerger does (config before the command line).
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text("api-key: 'k3y''with-quote'\n")
    proc = launch(sglang_059, "--model-path", "/models/kimi", "--config", str(secrets))
    wait_for(proc)
    assert get(proc.url + "/generate", body={"text": "x"})[0] == 401
    good = {"Authorization": "Bearer k3y'with-quote"}
    assert get(proc.url + "/generate", good, body={"text": "x"})[0] == 200
    assert stop(proc)[0] == 0


def test_fault_spares_the_release_that_served_when_it_was_set(launch, sglang_059, tmp_path):
    releases = tmp_path / "root" / "releases"
    (releases / "old").mkdir(parents=True)
    (releases / "new").mkdir()
    current = tmp_path / "root" / "current"
    current.symlink_to("releases/new")
    env = {"SGLFLEET_ROOT": str(tmp_path / "root")}

    crashing = launch(sglang_059, "--model-path", "/models/kimi", fault="crash\nspare old", **env)
    crashing.communicate(timeout=20)
    assert crashing.returncode != 0  # the new release crashes

    current.unlink()
    current.symlink_to("releases/old")
    spared = launch(sglang_059, "--model-path", "/models/kimi", fault="crash\nspare old", **env)
    wait_for(spared)  # the release it rolls back to serves
    assert stop(spared)[0] == 0
