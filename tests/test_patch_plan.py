"""`sglfleet patch plan`: each patch set's status on a release's own files, through the console script."""

import subprocess
import sys
from pathlib import Path

import pytest

from sglfleet.artifacts.patchsets import load_set, load_sets
from sglfleet.artifacts.upstream import sglang_file

SGLFLEET = str(Path(sys.executable).with_name("sglfleet"))


def sglfleet(*args) -> subprocess.CompletedProcess:
    return subprocess.run([SGLFLEET, *map(str, args)], capture_output=True, text=True, timeout=120)


def statuses(stdout: str) -> dict[str, str]:
    return {line.split(": ")[0].strip(): line.split(": ")[1] for line in stdout.splitlines()[1:]}


def test_plan_on_0_5_9_applies_the_kimi_set_and_two_backports():
    result = sglfleet("patch", "plan", "--sglang", "0.5.9")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "sglang 0.5.9:"
    assert statuses(result.stdout) == {
        "api_key_not_logged": "applies", "api_key_not_logged_annotated": "not for this version",
        "kimi_k25_eagle3": "applies", "rerank_template_sandboxed": "applies", "server_info_keys_redacted": "applies",
        **dict.fromkeys(["server_info_keys_redacted_kv_events", "launch_command_keys_redacted",
                         "server_info_keys_redacted_msgspec", "server_info_keys_redacted_watermark",
                         "server_info_keys_redacted_watermark_0522"], "not for this version"),
        "sm120_symm_mem": "applies"}
    assert "server_info_keys_redacted: applies: sglang/srt/entrypoints/http_server.py (function server_info); " \
           "local" in result.stdout
    assert "sm120_symm_mem: applies: sglang/srt/distributed/device_communicators/torch_symm_mem.py " \
           "(TorchSymmMemCommunicator.__init__); sgl-project/sglang#24548" in result.stdout


def test_plan_on_0_5_23_finds_the_kimi_methods_upstream():
    result = sglfleet("patch", "plan", "--sglang", "0.5.23")
    assert result.returncode == 0, result.stderr
    assert statuses(result.stdout) == {
        "api_key_not_logged": "not for this version", "api_key_not_logged_annotated": "not for this version",
        "kimi_k25_eagle3": "upstream", "rerank_template_sandboxed": "upstream",
        **dict.fromkeys(["server_info_keys_redacted", "server_info_keys_redacted_kv_events",
                         "server_info_keys_redacted_msgspec", "server_info_keys_redacted_watermark_0522"],
                        "not for this version"),
        "launch_command_keys_redacted": "applies", "server_info_keys_redacted_watermark": "applies",
        "sm120_symm_mem": "upstream"}


def test_plan_of_a_stack_reads_its_sglang_version():
    result = sglfleet("patch", "plan", "--stack", "cu130-sglang-0.5.23")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "sglang 0.5.23 (stack cu130-sglang-0.5.23):"


def test_plan_diff_names_each_set_before_its_change():
    result = sglfleet("patch", "plan", "--sglang", "0.5.9", "--diff")
    assert result.returncode == 0, result.stderr
    headers = [line for line in result.stdout.splitlines() if line.startswith("# patch set ")]
    assert [h.split(":")[0] for h in headers] == [
        "# patch set api_key_not_logged", "# patch set kimi_k25_eagle3", "# patch set rerank_template_sandboxed",
        "# patch set server_info_keys_redacted",
        "# patch set sm120_symm_mem"]
    assert "+        if self.device_capability not in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES:" in result.stdout
    assert sglfleet("patch", "plan", "--sglang", "0.5.23", "--diff").stdout.count("# patch set") == 2


def test_an_operator_set_whose_anchor_drifted_is_refused_in_one_line(tmp_path):
    text = load_sets()[-1].path.read_text().replace("if self.device_capability < 9:", "if self.device_capability < 7:")
    (tmp_path / "zz_mine.toml").write_text(text)
    result = sglfleet("patch", "plan", "--sglang", "0.5.9", "--sets-dir", tmp_path)
    assert result.returncode == 1
    assert "  zz_mine: refused: patch set zz_mine: anchor missing: no statement " \
           "`if self.device_capability < 7:` directly in TorchSymmMemCommunicator.__init__\n" in result.stdout


def test_a_set_that_does_not_parse_stops_the_plan(tmp_path):
    (tmp_path / "bad.toml").write_text("summary = \n")
    result = sglfleet("patch", "plan", "--sglang", "0.5.9", "--sets-dir", tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"Error: patch set {tmp_path}/bad.toml: does not parse")


@pytest.mark.parametrize("args", [(), ("--sglang", "0.5.9", "--stack", "dev")])
def test_plan_needs_one_of_sglang_and_stack(args):
    result = sglfleet("patch", "plan", *args)
    assert result.returncode == 2 and "give --sglang VERSION or --stack NAME" in result.stderr


def test_revert_all_removes_every_set(tmp_path):
    from sglfleet.artifacts.patchsets import apply_sets
    symm = load_set(load_sets()[-1].path)
    original = sglang_file("0.5.9", symm.file).read_bytes()
    path = tmp_path / "torch_symm_mem.py"
    path.write_bytes(apply_sets(original, [symm])[0])
    result = sglfleet("patch", "revert", "--all", path)
    assert result.returncode == 0, result.stderr
    assert path.read_bytes() == original
