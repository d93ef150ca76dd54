"""The lint against sglang 0.5.9's real flag set (from the real wheel) and GPU architectures."""

import pytest

from sglfleet import PROJECT_ROOT
from sglfleet.plan.flagsets import flagset_for
from sglfleet.plan.lint import Finding, lint
from sglfleet.plan.schema import validate_host_data
from sglfleet.plan.validation import check_inventory, load_inventory

BASE = {"stack": "cu130-sglang-0.5.9", "model_path": "moonshotai/Kimi-K2.5", "trust_remote_code": True,
        "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3", "tp_size": 8}
SM120, SM100 = ["12.0"] * 8, ["10.0"] * 8


@pytest.fixture(scope="module")
def flags():
    return flagset_for("0.5.9")


def findings(flags, caps=SM100, version="0.5.9", **data):
    return [str(f) for f in lint("gpu1", validate_host_data("gpu1", {**BASE, **data}), flags, caps, version)]


def test_production_values_lint_clean(flags):
    assert findings(flags, speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4,
                    extra_flags=["--max-running-requests", "64", "--attention-backend", "triton"]) == []


def test_example_production_inventory_lints_clean_but_for_what_needs_the_internet():
    found = check_inventory(load_inventory(str(PROJECT_ROOT / "inventory" / "prod.py")))
    assert len(found) == 3, found
    model, draft, stack = found
    # Kimi K2.5 is pinned, but its manifest must be written where the Hub can be reached.
    assert ": error: model_revision: model moonshotai/Kimi-K2.5@4d01dfe0332d has no manifest" in model
    assert "run `sglfleet model lock moonshotai/Kimi-K2.5@4d01dfe0332d63057c186e0b262165819efb6611` " \
           "where https://huggingface.co can be reached" in model
    # The draft's commit is not known: it stays unpinned, and the lint says so.
    assert ": error: speculative_draft_model_revision: lightseekorg/kimi-k2.5-eagle3: no revision" in draft
    assert ": error: stack: stack cu130-sglang-0.5.9: the lock is incomplete" in stack, found
    assert "run `sglfleet lock cu130-sglang-0.5.9` where download.pytorch.org" in stack


def test_finding_names_host_severity_key_and_fix():
    finding = Finding("error", "gpu1", "tp_size", "= 9; set tp_size <= 8")
    assert str(finding) == "gpu1: error: tp_size: = 9; set tp_size <= 8"


def test_misspelt_flag_gets_the_closest_real_one(flags):
    assert findings(flags, extra_flags=["--enable-metric"]) == [
        "gpu1: error: extra_flags: --enable-metric is not a flag of sglang 0.5.9; did you mean --enable-metrics?"]


def test_an_abbreviated_flag_is_named_as_the_abbreviation_it_is(flags):
    # sglang 0.5.9's parser has allow_abbrev on: it would take --max-running-req.
    (line,) = findings(flags, extra_flags=["--max-running-req", "64"])
    assert line == ("gpu1: error: extra_flags: --max-running-req is an abbreviation of --max-running-requests, "
                    "which sglang 0.5.9 accepts; write --max-running-requests in full")
    # An abbreviation of a flag a key owns is also that key's.
    found = findings(flags, extra_flags=["--speculative-num-step", "3"])
    assert any("--speculative-num-step is an abbreviation of --speculative-num-steps" in f for f in found), found
    assert any("set through the key speculative_num_steps" in f for f in found), found
    # Ambiguous prefixes are refused by argparse, and here as unknown flags.
    (line,) = findings(flags, extra_flags=["--enable-", "1"])
    assert "--enable- is not a flag of sglang 0.5.9" in line


def test_extra_flag_values_are_checked_as_sglangs_parser_would(flags):
    (choice,) = findings(flags, extra_flags=["--attention-backend", "flashattn"])
    assert "--attention-backend flashattn: not one of triton" in choice
    (number,) = findings(flags, extra_flags=["--max-running-requests", "many"])
    assert "not a valid int" in number
    (missing,) = findings(flags, extra_flags=["--max-running-requests"])
    assert "needs a value" in missing


def test_a_flag_owned_by_a_key_must_go_through_the_key(flags):
    # --tensor-parallel-size is tp_size's alias in 0.5.9
    (line,) = findings(flags, extra_flags=["--tensor-parallel-size", "4"])
    assert "is set through the key tp_size; set tp_size instead" in line


def test_eagle_numbers_all_three_or_none(flags):
    (line,) = findings(flags, speculative_num_steps=3, speculative_num_draft_tokens=4)
    assert line.startswith("gpu1: error: speculative_eagle_topk: speculative_num_steps, "
                           "speculative_num_draft_tokens given without speculative_eagle_topk")


def test_topk_one_means_draft_tokens_is_steps_plus_one(flags):
    assert findings(flags, speculative_num_steps=5, speculative_eagle_topk=1, speculative_num_draft_tokens=4) == [
        "gpu1: error: speculative_num_draft_tokens: = 4, but with speculative_eagle_topk = 1 sglang forces it "
        "to speculative_num_steps + 1 = 6; set speculative_num_draft_tokens = 6"]
    assert findings(flags, speculative_num_steps=5, speculative_eagle_topk=4, speculative_num_draft_tokens=8) == []


def test_kimi_k25_needs_a_draft_model(flags):
    (line,) = findings(flags, speculative_draft_model_path=None)
    assert line.startswith("gpu1: error: speculative_draft_model_path: KimiK25 has no built-in draft layers")
    assert findings(flags, speculative_draft_model_path=None, speculative_algorithm="NGRAM") == []


def test_sm120_torch_symm_mem_by_version(flags):
    (line,) = findings(flags, SM120, enable_torch_symm_mem=True)
    assert line.startswith("gpu1: error: enable_torch_symm_mem: sglang 0.5.9 on SM120 (declared) fails at start-up")
    assert "KeyError 12" in line and "set enable_torch_symm_mem = False" in line
    assert findings(flags, SM100, enable_torch_symm_mem=True) == []
    (later,) = findings(flags, SM120, "0.5.14", enable_torch_symm_mem=True)
    assert later.startswith("gpu1: warning: enable_torch_symm_mem")


def test_sm120_torch_symm_mem_with_the_backport_is_a_warning(flags):
    data = {**BASE, "enable_torch_symm_mem": True}
    (line,) = [str(f) for f in lint("gpu1", validate_host_data("gpu1", data), flags, SM120, "0.5.9",
                                     patch_sets=("kimi_k25_eagle3", "sm120_symm_mem"))]
    assert line.startswith("gpu1: warning: enable_torch_symm_mem: sglang 0.5.9 with patch set sm120_symm_mem "
                           "has no torch symmetric-memory all-reduce for SM120")


def test_sm120_allreduce_fusion_is_a_warning(flags):
    (line,) = findings(flags, SM120, enable_flashinfer_allreduce_fusion=True)
    assert line.startswith("gpu1: warning: enable_flashinfer_allreduce_fusion: ignored on SM120")
    assert findings(flags, SM100, enable_flashinfer_allreduce_fusion=True) == []


def test_unknown_architecture_says_what_was_not_checked(flags):
    (line,) = findings(flags, None, enable_torch_symm_mem=True)
    assert line.startswith("gpu1: warning: gpu_compute_cap: unknown")


def test_tp_size_beyond_the_hosts_gpus(flags):
    (line,) = findings(flags, ["12.0"] * 4)
    assert line == "gpu1: error: tp_size: = 8, but the host has 4 GPUs (declared); set tp_size <= 4"


def test_the_lint_says_whether_a_capability_was_declared_or_measured(tmp_path, monkeypatch):
    from sglfleet.facts.gpu import parse
    from sglfleet.plan.measured import measured_caps, record
    from sglfleet.plan.validation import _compute_caps

    monkeypatch.setenv("SGLFLEET_CACHE", str(tmp_path))
    config = validate_host_data("gpu1", {**BASE, "gpu_compute_cap": "12.0", "gpu_count": 8})
    assert _compute_caps("gpu1", config) == (["12.0"] * 8, "declared: gpu_compute_cap 12.0")
    # What preflight measured (a B200, whatever the inventory says) wins, and says so.
    b200 = parse((PROJECT_ROOT / "tests" / "data" / "nvidia-smi" / "b200.csv").read_text().splitlines())
    record("gpu1", b200)
    caps, source = _compute_caps("gpu1", config)
    assert caps == ["10.0"] * 8 and source.startswith("measured by preflight on ")
    assert measured_caps("gpu2") is None


def test_bake_needs_metrics_and_says_what_happens_without_a_router(flags):
    (line,) = findings(flags, gate_bake_s=60, enable_metrics=False, router_url="http://r:1", listen_host="0.0.0.0")
    assert line == "gpu1: error: gate_bake_s: the bake reads sglang's /metrics; set enable_metrics = True or gate_bake_s = 0"
    (line,) = findings(flags, gate_bake_s=60)
    assert line.startswith("gpu1: warning: gate_bake_s: no router_url: the bake judges whatever traffic")


def test_server_must_fit_the_host(flags):
    (line,) = findings(flags, None, gpu_less=True)
    assert line.startswith("gpu1: error: server: SGLang needs GPUs")
    (line,) = findings(flags, server="standin")
    assert line.startswith("gpu1: warning: server: the stand-in serves no model")


def test_the_lint_follows_the_stacks_sglang_version():
    # 0.5.23 declares its flags as dataclass fields and renamed --cuda-graph-max-bs.
    flags_0523 = flagset_for("0.5.23")
    found = findings(flags_0523, version="0.5.23", stack="dev-sglang-0.5.23", cuda_graph_max_bs=64,
                     speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    assert found == ["gpu1: error: cuda_graph_max_bs: --cuda-graph-max-bs is not a flag of sglang 0.5.23; "
                     "set cuda_graph_max_bs = None and pass --cuda-graph-max-bs-decode in extra_flags (its closest "
                     "flag in 0.5.23), or use a stack whose sglang has --cuda-graph-max-bs"]
    assert findings(flags_0523, version="0.5.23", stack="dev-sglang-0.5.23",
                    extra_flags=["--cuda-graph-max-bs-decode", "64"]) == []


def test_the_lint_refuses_a_python3_that_preflight_measured_and_the_stack_cannot_serve(tmp_path, monkeypatch):
    from sglfleet.artifacts.stacks import load_stack
    from sglfleet.facts.os import OsInfo
    from sglfleet.plan.measured import measured_os, record
    from sglfleet.plan.preflight import interpreter_problems
    from sglfleet.plan.validation import _interpreter_findings

    monkeypatch.setenv("SGLFLEET_CACHE", str(tmp_path))
    config = validate_host_data("gpu1", {**BASE, "stack": "cu130-sglang-0.5.23"})
    stack = load_stack("cu130-sglang-0.5.23", allow_unhashed=True)
    assert _interpreter_findings("gpu1", config, stack, "error") == []  # nothing measured: nothing to say
    jammy = OsInfo(id="ubuntu", version_id="22.04", pretty="Ubuntu 22.04.5 LTS", glibc="2.35", python="3.10.12")
    record("gpu1", [], jammy)  # a GPU-less read still records the OS
    assert measured_os("gpu1")[0] == jammy
    (finding,) = _interpreter_findings("gpu1", config, stack, "error")
    # The line preflight says on the host, with where the lint has it from.
    (said,) = interpreter_problems("gpu1", stack, jammy, ["cu130-sglang-0.5.9"])
    assert str(finding) == said.replace("gpu1: ", "gpu1: error: stack: ", 1) + f" ({measured_os('gpu1')[1]})"
    assert "python3 is 3.10.12" in said and "cu130-sglang-0.5.9" in said
    # Before a deploy connects it only warns: its preflight measures again.
    assert _interpreter_findings("gpu1", config, stack, "warning")[0].severity == "warning"


def test_parsers_are_checked_against_the_stacks_own_sglang(flags):
    assert findings(flags, reasoning_parser="kimi_k2", tool_call_parser="kimi_k2") == []
    assert findings(flags, reasoning_parser="kimi-k2") == [
        "gpu1: error: reasoning_parser: 'kimi-k2' is not a --reasoning-parser of sglang 0.5.9; did you mean 'kimi_k2'?"]
    (line,) = findings(flags, tool_call_parser="nonesuch")
    assert line.startswith("gpu1: error: tool_call_parser: 'nonesuch' is not a --tool-call-parser of sglang 0.5.9; "
                           "pick one of deepseekv3, ")
    # 0.5.9 has no parser called kimi_k3; 0.5.23 (choices computed at parse time, names read from its
    # parser_names modules) does, and takes "auto" too.
    assert findings(flags, reasoning_parser="kimi_k3")[0].startswith("gpu1: error: reasoning_parser: 'kimi_k3'")
    newer = flagset_for("0.5.23")
    assert findings(newer, version="0.5.23", reasoning_parser="kimi_k3", tool_call_parser="auto") == []
    assert findings(newer, version="0.5.23", tool_call_parser="kimi_k9")[0].startswith(
        "gpu1: error: tool_call_parser: 'kimi_k9' is not a --tool-call-parser of sglang 0.5.23")


def test_parsers_render_as_sglangs_flags():
    from sglfleet.plan.release import launch_args
    args = launch_args(validate_host_data("gpu1", {**BASE, "reasoning_parser": "kimi_k2",
                                                   "tool_call_parser": "kimi_k2"}).launch)
    assert args[args.index("--reasoning-parser") + 1] == "kimi_k2"
    assert args[args.index("--tool-call-parser") + 1] == "kimi_k2"
