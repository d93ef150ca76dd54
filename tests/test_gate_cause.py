"""
The gate names what ended a failed start, read from the journal, with the lines real
sglang 0.5.14 logged on an H200 (``tests/data/gpu/kimi-k25-h200-sglang-0.5.14-*.log``,
from ``bench/gpu_kimi.py``). Pure: the unit's state and journal are given.
"""

import pytest

from sglfleet import PROJECT_ROOT
from sglfleet.host import gate
from sglfleet.host.gate import GateFailed, GateSettings, start_failure_cause, wait_until_healthy
from sglfleet.host.layout import LAYOUT

LOGS = PROJECT_ROOT / "tests" / "data" / "gpu"
LACKS = ("the model class KimiK25ForConditionalGeneration lacks get_embed_and_head: "
         "the EAGLE-3 patch did not apply")
BROKEN = ("sglang cannot import srt/models/kimi_k25.py (unexpected indent (kimi_k25_variant.py, line 861)), "
          "so it does not know KimiK25ForConditionalGeneration: the file does not parse (methods appended "
          "after EntryClass?); reinstall the stack's sglang and let sglfleet patch it")


def gpu_log(variant: str) -> list[str]:
    return (LOGS / f"kimi-k25-h200-sglang-0.5.14-{variant}.log").read_text(errors="replace").splitlines()


@pytest.mark.parametrize("variant, cause", [
    ("removed", LACKS),  # 0.5.14's class without the three methods, as 0.5.9 has it
    ("appended_dedented", LACKS),  # the methods as functions after EntryClass: the class still lacks them
    ("appended", BROKEN),  # the methods indented after EntryClass: the file does not parse
    ("shipped", None),  # it served: nothing ended it
    ("patched", None),
])
def test_the_cause_read_from_the_gpus_log(variant, cause):
    assert start_failure_cause(gpu_log(variant)) == cause


@pytest.mark.parametrize("lines, cause", [
    # The three methods, each named as sglang's AttributeError names it.
    (["AttributeError: 'KimiK25ForConditionalGeneration' object has no attribute 'set_eagle3_layers_to_capture'"],
     "the model class KimiK25ForConditionalGeneration lacks set_eagle3_layers_to_capture: "
     "the EAGLE-3 patch did not apply"),
    # Another attribute is not the patch's business: the last exception is named as it is.
    (["[2026-12-02 07:09:43] Scheduler hit an exception: Traceback (most recent call last):",
      "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"],
     "the server ended with AcceleratorError: CUDA error: an illegal memory access was encountered"),
    # Import errors sglang ignores (a kernel the stack lacks) name no cause without a failure.
    (["[2026-12-02 07:09:41] Ignore import error when loading sglang.srt.models.mimo_v2: "
      "Can not import FA3 in sgl_kernel. Please check your installation."], None),
    ([], None),
])
def test_the_cause_of_other_lines(lines, cause):
    assert start_failure_cause(lines) == cause


def test_a_failed_unit_fails_the_gate_with_its_cause(monkeypatch):
    monkeypatch.setattr(gate.service, "properties", lambda layout=None: {"ActiveState": "failed",
                                                                        "SubState": "failed"})
    monkeypatch.setattr(gate.service, "journal_lines", lambda layout=None, lines=400: gpu_log("removed"))
    with pytest.raises(GateFailed) as failed:
        wait_until_healthy("http://127.0.0.1:9", GateSettings(), 0, LAYOUT)
    assert str(failed.value) == f"unit: {LAYOUT.unit} failed (failed): {LACKS}"


def test_a_failed_unit_with_a_journal_that_names_nothing_fails_as_before(monkeypatch):
    monkeypatch.setattr(gate.service, "properties", lambda layout=None: {"ActiveState": "failed",
                                                                        "SubState": "failed"})
    monkeypatch.setattr(gate.service, "journal_lines", lambda layout=None, lines=400: [])
    with pytest.raises(GateFailed) as failed:
        wait_until_healthy("http://127.0.0.1:9", GateSettings(), 0, LAYOUT)
    assert str(failed.value) == f"unit: {LAYOUT.unit} failed (failed)"
