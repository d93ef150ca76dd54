"""`sglfleet patch diff|apply|verify|revert FILE`, through the installed console script."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglfleet.artifacts.upstream import sglang_file

SGLFLEET = str(Path(sys.executable).with_name("sglfleet"))
KIMI = "sglang/srt/models/kimi_k25.py"


def sglfleet(*args) -> subprocess.CompletedProcess:
    return subprocess.run([SGLFLEET, *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.fixture
def kimi_059(tmp_path) -> Path:
    path = tmp_path / "kimi_k25.py"
    shutil.copyfile(sglang_file("0.5.9", KIMI), path)
    path.chmod(0o640)
    return path


def test_diff_prints_what_apply_would_do_and_changes_nothing(kimi_059):
    before = kimi_059.read_bytes()
    result = sglfleet("patch", "diff", kimi_059)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"--- a/{str(kimi_059).lstrip('/')}\n")
    assert "+    def set_eagle3_layers_to_capture(self, layer_ids=None):\n" in result.stdout
    assert kimi_059.read_bytes() == before


def test_diff_prints_nothing_when_nothing_is_needed(tmp_path):
    path = tmp_path / "kimi_k25.py"
    shutil.copyfile(sglang_file("0.5.23", KIMI), path)
    result = sglfleet("patch", "diff", path)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_apply_verify_revert_round_trip(kimi_059):
    original = kimi_059.read_bytes()
    assert sglfleet("patch", "verify", kimi_059).returncode == 1

    applied = sglfleet("patch", "apply", kimi_059)
    assert applied.returncode == 0, applied.stderr
    patched = kimi_059.read_bytes()
    assert patched != original
    assert sglfleet("patch", "verify", kimi_059).returncode == 0

    again = sglfleet("patch", "apply", kimi_059)
    assert again.returncode == 0 and "unchanged" in again.stdout
    assert kimi_059.read_bytes() == patched
    assert sglfleet("patch", "diff", kimi_059).stdout == ""

    assert sglfleet("patch", "revert", kimi_059).returncode == 0
    assert kimi_059.read_bytes() == original


def test_verify_passes_on_upstream_with_the_methods(tmp_path):
    path = tmp_path / "kimi_k25.py"
    shutil.copyfile(sglang_file("0.5.23", KIMI), path)
    result = sglfleet("patch", "verify", path)
    assert result.returncode == 0
    assert "has set_eagle3_layers_to_capture, get_embed_and_head, set_embed_and_head" in result.stdout


def test_verify_names_what_is_missing(kimi_059):
    result = sglfleet("patch", "verify", kimi_059)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"sglfleet patch: {kimi_059}: class KimiK25ForConditionalGeneration lacks "
        "set_eagle3_layers_to_capture, get_embed_and_head, set_embed_and_head "
        "(run `sglfleet patch apply`)"
    ]


def test_apply_is_atomic_and_keeps_mode_and_owner(kimi_059):
    if os.geteuid() == 0:
        os.chown(kimi_059, 65534, 65534)  # nobody: an owner other than the one running
    before = kimi_059.stat()
    assert sglfleet("patch", "apply", kimi_059).returncode == 0
    after = kimi_059.stat()
    assert after.st_ino != before.st_ino  # replaced by rename, not rewritten in place
    assert (after.st_mode, after.st_uid, after.st_gid) == (before.st_mode, before.st_uid, before.st_gid)
    assert sorted(p.name for p in kimi_059.parent.iterdir()) == ["kimi_k25.py"]  # no temp left


def test_apply_through_a_symlink_keeps_the_link(kimi_059, tmp_path):
    link = tmp_path / "link.py"
    link.symlink_to(kimi_059)
    assert sglfleet("patch", "apply", link).returncode == 0
    assert link.is_symlink()
    assert b"# >>> sglfleet patch kimi_k25_eagle3" in kimi_059.read_bytes()


@pytest.mark.parametrize("command", ["diff", "apply", "verify"])
def test_refusal_is_one_line_non_zero_and_leaves_the_file(tmp_path, command):
    path = tmp_path / "kimi_k25.py"
    path.write_bytes(b"class KimiK25ForConditionalGeneration(:\n    pass\n")
    before = (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino)
    result = sglfleet("patch", command, path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"sglfleet patch: {path}: the file does not parse: line 1: ")
    assert (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino) == before


def test_missing_class_is_refused(tmp_path):
    path = tmp_path / "kimi_k25.py"
    shutil.copyfile(sglang_file("0.5.9", "sglang/srt/models/kimi_vl.py"), path)
    result = sglfleet("patch", "apply", path)
    assert result.returncode == 1
    assert result.stderr == (
        f"sglfleet patch: {path}: no class KimiK25ForConditionalGeneration in the file; "
        "is this the right file and version?\n"
    )


@pytest.mark.parametrize("name", ["missing.py", "."])
def test_missing_or_unreadable_file_is_refused(tmp_path, name):
    result = sglfleet("patch", "apply", tmp_path / name)
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1
    assert "cannot read it: " in result.stderr
