"""A patch set's verdict on a release, kept in the controller's cache under the set, the file and the engine."""

import json

import pytest

from sglfleet.artifacts.patchsets import load_set, load_sets
from sglfleet.plan import patch_verdicts


@pytest.fixture
def verdicts(tmp_path, monkeypatch):
    """The verdicts' folder, in a cache of the test's own (the tests call ``refusal.__wrapped__``: no in-process memo)."""
    monkeypatch.setenv("SGLFLEET_CACHE", str(tmp_path))
    return tmp_path / "patch-verdicts"


def kept(folder) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


def test_a_set_that_applies_is_kept_as_no_refusal(verdicts):
    kimi = next(s for s in load_sets() if s.name == "kimi_k25_eagle3")
    assert patch_verdicts.refusal.__wrapped__("0.5.9", kimi) is None
    assert kept(verdicts) == [{"set": "kimi_k25_eagle3", "version": "0.5.9", "refusal": None}]


def test_a_drifted_set_is_refused_and_its_refusal_kept(verdicts, tmp_path):
    text = load_sets()[-1].path.read_text().replace("if self.device_capability < 9:", "if self.device_capability < 7:")
    (tmp_path / "zz_mine.toml").write_text(text)
    mine = load_set(tmp_path / "zz_mine.toml")
    refusal = patch_verdicts.refusal.__wrapped__("0.5.9", mine)
    assert refusal.startswith("patch set zz_mine: anchor missing: no statement `if self.device_capability < 7:`")
    assert kept(verdicts) == [{"set": "zz_mine", "version": "0.5.9", "refusal": refusal}]


def test_a_kept_verdict_is_read_not_computed_again(verdicts):
    kimi = next(s for s in load_sets() if s.name == "kimi_k25_eagle3")
    patch_verdicts.refusal.__wrapped__("0.5.9", kimi)
    (path,) = verdicts.glob("*.json")
    path.write_text(json.dumps({"set": "kimi_k25_eagle3", "version": "0.5.9", "refusal": "as kept"}))
    assert patch_verdicts.refusal.__wrapped__("0.5.9", kimi) == "as kept"


def test_another_version_or_a_changed_set_asks_afresh(verdicts, tmp_path):
    symm = next(s for s in load_sets() if s.name == "sm120_symm_mem")
    assert patch_verdicts.refusal.__wrapped__("0.5.9", symm) is None
    assert patch_verdicts.refusal.__wrapped__("0.5.10", symm) is None
    (tmp_path / "sm120_symm_mem.toml").write_text(symm.path.read_text().replace(
        "if self.device_capability < 9:", "if self.device_capability < 7:"))
    changed = load_set(tmp_path / "sm120_symm_mem.toml")
    assert "anchor missing" in patch_verdicts.refusal.__wrapped__("0.5.9", changed)
    assert [(v["version"], v["refusal"] is None) for v in kept(verdicts)].count(("0.5.9", True)) == 1
    assert len(kept(verdicts)) == 3
