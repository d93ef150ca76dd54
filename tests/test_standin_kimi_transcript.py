"""
The stand-in held to real sglang on a GPU, for the mission's own model class.

``tests/data/gpu/kimi-k25-h200-sglang-0.5.14.json`` is the transcript of
``bench/gpu_kimi.py`` on an NVIDIA H200 with sglang 0.5.14: a tiny random-weight
Kimi K2.5 with an EAGLE-3 draft, started through sglfleet's release once for each
``kimi_k25.py`` (as shipped; the three delegation methods removed, as in 0.5.9; that
file patched by sglfleet; the methods appended after ``EntryClass``, indented or as
functions). Here the same bench code starts the stand-in over sglang 0.5.14's own
files (its ``kimi_k25.py`` replaced by each variant, made by the same function), and
each start is compared with the GPU's: whether the port opened, the ``/health``
sequence, a ``/generate`` with EAGLE-3, the log lines that ended it, the exit status,
and the cause the gate reads from them.

Every difference is named in ``DIFFERENCES`` with the source line behind it; a new
one fails a test.
"""

import importlib.util
import json
import re
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from paths import UNIT
from sglfleet import FILES, PROJECT_ROOT
from sglfleet.host import gate
from sglfleet.host.gate import start_failure_cause
from test_server_flags import python_tree
from test_standin_gpu_transcript import load_bench

TRANSCRIPT = PROJECT_ROOT / "tests" / "data" / "gpu" / "kimi-k25-h200-sglang-0.5.14.json"
RUN1 = TRANSCRIPT.with_name("kimi-k25-h200-sglang-0.5.14-run1.json")
KIMI = "sglang/srt/models/kimi_k25.py"
SERVING = ("shipped", "patched")
FAILING = ("removed", "appended", "appended_dedented")

# The lines that say why a start ended, as both print them (the timestamp left off).
KEY_LINE = re.compile(r"Scheduler hit an exception|Received sigquit|^\w+Error: |"
                      r"Ignore import error when loading sglang\.srt\.(models|multimodal\.processors)\.kimi_k25|"
                      r"Cannot find model module")

DIFFERENCES = {
    "time to fail": "the GPU fails 34-51 s after the start (imports, model load, memory pools, seven servers "
                    "starting at once); the stand-in within its standin_warmup_s: files/standin/sglang_standin.py "
                    "calls model_class_check before, and eagle3_check right after, its warm-up sleep; the GPU "
                    "logs two 'Load weight end' and two 'KV Cache is allocated' before the exception, the "
                    "stand-in one 'Load weight end' and no KV cache",
    "time to serve": "the GPU listens after 137-150 s (CUDA graphs, triton compiles) and answers 200 about 14 s "
                     "later (its image warm-up); the stand-in after standin_warmup_s and standin_compile_s "
                     "(bench/gpu_acceptance.py ONE_GPU)",
    "traceback frames": "the GPU's traceback runs scheduler.py:4211 -> eagle_worker_v2.py:319 -> torch's "
                        "nn.Module.__getattr__; the stand-in's through files/standin/standin_model.py "
                        "eagle3_check (the class loaded with stubs): only the exception line is the same",
    "file name": "the GPU's import error names kimi_k25_variant.py: bench/kimi_trace_hook.py loads the file "
                 "under test by that name; on a host, and in the stand-in, it is kimi_k25.py",
    "other import errors": "the GPU also logs 'Ignore import error' for mimo_v2 and others (FA3, left out of "
                           "the carry: bench/gpu_acceptance.py KERNEL_LEFT_OUT); the stand-in logs none",
    "spec_verify_ct": "31 on the GPU for 32 tokens (random weights accept no draft token); the stand-in's "
                      "accept length is SGLFLEET_STANDIN_SPEC_ACCEPT_LENGTH (files/standin/sglang_standin.py)",
}


def load_kimi_bench():
    """bench/gpu_kimi.py as a module (its gpu_acceptance the one the other transcript test loads)."""
    load_bench()
    sys.path.insert(0, str(PROJECT_ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("gpu_kimi", PROJECT_ROOT / "bench" / "gpu_kimi.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_kimi"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def transcript() -> dict:
    return json.loads(TRANSCRIPT.read_text())


def key_lines(lines: list[str]) -> list[str]:
    """The lines that ended a start, each once, the timestamp and the bench's file name left off."""
    found = []
    for line in lines:
        text = re.sub(r"^\[[^\]]*\] ", "", line.strip()).replace("kimi_k25_variant.py", "kimi_k25.py")
        if KEY_LINE.search(text) and text not in found:
            found.append(text)
    return found


def variant_site(tree: Path, source: bytes, folder: Path) -> Path:
    """sglang 0.5.14's files the stand-in reads, with ``kimi_k25.py`` replaced by ``source``."""
    for name in ("sglang/__init__.py", "sglang/version.py", "sglang/_version.py", "sglang/srt/server_args.py"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).symlink_to(tree / name)
    (folder / KIMI).parent.mkdir(parents=True, exist_ok=True)
    (folder / KIMI).write_bytes(source)
    return folder


@pytest.fixture(scope="module")
def standin(tmp_path_factory, transcript) -> dict:
    """Each variant's start on the stand-in, through the bench's own ``one_start``, all at once."""
    kimi = load_kimi_bench()
    tree = python_tree("0.5.14")
    shipped = (tree / KIMI).read_bytes()
    assert kimi.hashlib.sha256(shipped).hexdigest() == transcript["variants"]["shipped"]["sha256"]
    variants = kimi.kimi_variants(shipped)
    root = tmp_path_factory.mktemp("kimi")
    model, draft = kimi.write_kimi(root / "models")

    def one(name):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        site = variant_site(tree, variants[name], root / "sites" / name)
        config = kimi.config_for("standin", model, draft, list(kimi.KIMI_FLAGS), port,
                                 served_model_name="tiny-kimi-k25", standin_warmup_s=1.0)
        record = kimi.one_start(name, None, config, root, str(site), root, ready_s=60.0)
        record["log"] = (root / f"{name}.log").read_text(errors="replace").splitlines()
        return name, record

    with ThreadPoolExecutor(len(variants)) as pool:
        return dict(pool.map(one, variants))


def states(record: dict) -> list[str]:
    return [entry["state"] for entry in record["health"]]


def test_the_transcript_names_its_run_and_shows_the_failure_and_the_fix(transcript):
    versions = transcript["versions"]
    assert (versions["gpu"], versions["sglang"], versions["torch"]) == ("NVIDIA H200", "0.5.14", "2.11.0")
    assert transcript["date"].startswith("2026-")
    assert transcript["model"]["target"]["architectures"] == ["KimiK25ForConditionalGeneration"]
    assert transcript["model"]["draft"]["architectures"] == ["LlamaForCausalLMEagle3"]
    for run in (transcript, json.loads(RUN1.read_text())):
        for name in SERVING:
            assert run["summary"][name]["health"] == ["refused", "503", "200"]
            assert run["summary"][name]["spec_verify_ct"] > 0  # EAGLE-3 ran
        for name in FAILING:
            assert run["summary"][name]["health"] == ["refused"]  # the port never opened
            assert run["summary"][name]["generate_status"] is None


def test_the_gpu_traced_which_delegation_methods_sglang_calls_and_in_what_order(transcript):
    sys.path.insert(0, str(FILES / "standin"))
    from standin_model import EAGLE3_CALLS

    def kimi_events(name):
        return [(event["event"], event["method"], event["caller"].split(":")[0])
                for event in transcript["starts"][name]["trace"]
                if event["class"] == "KimiK25ForConditionalGeneration" and event["event"] in ("call", "missing")]

    for name in SERVING:
        assert kimi_events(name) == [("call", "get_embed_and_head", "srt/speculative/eagle_worker_v2.py"),
                                     ("call", "set_eagle3_layers_to_capture", "srt/model_executor/model_runner.py")]
    for name in ("removed", "appended_dedented"):
        assert kimi_events(name) == [("missing", "get_embed_and_head", "srt/speculative/eagle_worker_v2.py")]
    assert [event["event"] for event in transcript["starts"]["appended"]["trace"]] == ["import-failed"] * 2
    # set_embed_and_head is never called on the target; the stand-in calls the two others in the GPU's order.
    order = next(calls for since, calls in EAGLE3_CALLS if since <= (0, 5, 14))
    assert list(order) == [method for _, method, _ in kimi_events("shipped")]


@pytest.mark.parametrize("name", SERVING + FAILING)
def test_the_standin_starts_as_the_gpu_did(standin, transcript, name):
    gpu, ours = transcript["starts"][name], standin[name]
    assert (ours["listen_s"] is None) == (gpu["listen_s"] is None)
    assert states(ours) == states(gpu)
    assert ours["exit_status_on_its_own"] == gpu["exit_status_on_its_own"]
    assert ours["stop"]["exit_status"] == gpu["stop"]["exit_status"]
    if name in SERVING:
        assert ours["generate"]["status"] == gpu["generate"]["status"] == 200
        assert ours["generate"]["meta_info"]["spec_verify_ct"] > 0  # value: DIFFERENCES["spec_verify_ct"]
    else:
        assert "generate" not in ours and "generate" not in gpu


@pytest.mark.parametrize("name", FAILING)
def test_the_standin_ends_a_failed_start_with_the_gpus_lines(standin, transcript, name):
    gpu = key_lines(TRANSCRIPT.with_name(f"kimi-k25-h200-sglang-0.5.14-{name}.log").read_text(
        errors="replace").splitlines())
    ours = key_lines(standin[name]["log"])
    assert ours == gpu, DIFFERENCES["traceback frames"]
    # At the same stage: after the weights ("Load weight end"), or before any model load for a file that
    # does not parse; nothing listened in either.
    def loaded_first(lines):
        first = next(i for i, line in enumerate(lines) if KEY_LINE.search(line))
        return any("Load weight end" in line for line in lines[:first])

    gpu_log = TRANSCRIPT.with_name(f"kimi-k25-h200-sglang-0.5.14-{name}.log").read_text(errors="replace")
    assert loaded_first(standin[name]["log"]) == loaded_first(gpu_log.splitlines()) == (name != "appended")
    # And the gate reads the same cause from either.
    assert start_failure_cause(standin[name]["log"]) == start_failure_cause(
        [line.replace("kimi_k25_variant.py", "kimi_k25.py") for line in gpu])


def test_every_difference_is_named():
    assert set(DIFFERENCES) == {"time to fail", "time to serve", "traceback frames", "file name",
                                "other import errors", "spec_verify_ct"}


def test_the_gate_names_the_cause_of_the_standins_failed_start(standin, monkeypatch):
    # The unit failed; its journal holds what the stand-in logged.
    monkeypatch.setattr(gate.service, "properties", lambda layout=None: {"ActiveState": "failed",
                                                                        "SubState": "failed"})
    monkeypatch.setattr(gate.service, "journal_lines", lambda layout=None, lines=400: standin["removed"]["log"])
    with pytest.raises(gate.GateFailed) as failed:
        gate.wait_until_healthy("http://127.0.0.1:9", gate.GateSettings(), 0, gate.LAYOUT)
    assert str(failed.value) == (f"unit: {UNIT} failed (failed): the model class "
                                 "KimiK25ForConditionalGeneration lacks get_embed_and_head: "
                                 "the EAGLE-3 patch did not apply")


def test_the_host_tools_gate_names_the_cause_of_a_failed_start(tmp_path, transcript):
    # The host tool's own gate (sglfleet-release gate) on the stand-in's start of the file without the
    # methods names the cause, read from the journal (here the server's log, as the bench answers it).
    kimi = load_kimi_bench()
    bench = sys.modules["gpu_acceptance"]
    tree = python_tree("0.5.14")
    site = variant_site(tree, kimi.kimi_variants((tree / KIMI).read_bytes())["removed"], tmp_path / "site")
    model, draft = kimi.write_kimi(tmp_path / "models")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = kimi.config_for("standin", model, draft, list(kimi.KIMI_FLAGS), port, standin_warmup_s=0.5)
    layout = bench.BenchLayout(root=str(tmp_path / "host"), service="sglang", etc=str(tmp_path / "host" / "etc"))
    bench.stage(config, layout, sys.executable)
    unit = bench.render_unit(config, layout=layout)
    server = bench.start(layout, unit, str(site), "standin", tmp_path / "server.log")
    try:
        result = bench.host_tool(layout, server.proc, "gate", log=server.log)
    finally:
        bench.stop(server, 10.0)
    assert result["exit_status"] == 1
    release = result["messages"][0].split()[4].rstrip(":")
    assert result["messages"] == [
        f"gate failed on release {release}: unit: {UNIT} failed (failed): the model class "
        "KimiK25ForConditionalGeneration lacks get_embed_and_head: the EAGLE-3 patch did not apply"]


def test_the_patched_start_ran_what_sglfleet_patch_apply_writes(tmp_path, transcript):
    # The GPU's "patched" file was made by the patch engine; the console script writes the same bytes.
    import hashlib
    import subprocess

    kimi = load_kimi_bench()
    path = tmp_path / "kimi_k25.py"
    path.write_bytes(kimi.kimi_variants((python_tree("0.5.14") / KIMI).read_bytes())["removed"])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == transcript["variants"]["removed"]["sha256"]
    done = subprocess.run([str(Path(sys.executable).with_name("sglfleet")), "patch", "apply", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert hashlib.sha256(path.read_bytes()).hexdigest() == transcript["variants"]["patched"]["sha256"]
