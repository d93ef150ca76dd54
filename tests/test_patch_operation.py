"""The patch operation, run by the real pyinfra over SSH against the local fleet."""

import base64
import hashlib
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sglfleet import PROJECT_ROOT
from sglfleet.artifacts.patcher import apply, load_patch
from sglfleet.artifacts.upstream import sglang_file
from sglfleet.facts.files import ABSENT, PRESENT, FileBytes

PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
DEPLOY = "tests/data/patch_deploy.py"
KIMI_059 = sglang_file("0.5.9", "sglang/srt/models/kimi_k25.py").read_bytes()
# A real sglang file without the class: what a host with the wrong file holds.
NO_CLASS = sglang_file("0.5.9", "sglang/srt/models/kimi_vl.py").read_bytes()


@pytest.fixture
def target(fleet):
    """A kimi_k25.py path on every host: 0.5.9's file, but the last host's lacks the class."""
    if len(fleet.hosts) < 2:
        pytest.skip("needs a fleet of two hosts or more")
    directory = f"/opt/sglfleet-test/patch-{uuid.uuid4().hex[:8]}"
    path = f"{directory}/kimi_k25.py"
    for host in fleet.hosts:
        data = NO_CLASS if host == fleet.hosts[-1] else KIMI_059
        fleet.exec(host, f"mkdir -p {directory} && echo {base64.b64encode(data).decode()} | base64 -d > {path}"
                         f" && chown nobody:nogroup {path} && chmod 640 {path}")
    yield path
    for host in fleet.hosts:
        fleet.exec(host, f"rm -rf {directory}", check=False)


def remote(fleet, path) -> dict[str, tuple[str, ...]]:
    """host -> (sha256, inode, mode, owner, group) of ``path``, and no stray temp file."""
    states = {}
    for host in fleet.hosts:
        out = fleet.exec(host, f"sha256sum {path} | cut -d' ' -f1; stat -c '%i %a %U %G' {path}; "
                               f"ls -A $(dirname {path})").stdout.split()
        assert out[5:] == ["kimi_k25.py"], f"{host}: stray files {out[5:]}"
        states[host] = tuple(out[:5])
    return states


def pyinfra(fleet, path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYINFRA, str(fleet.inventory), DEPLOY, *args],
        cwd=PROJECT_ROOT, env={**os.environ, "SGLFLEET_TEST_PATCH_TARGET": path},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,  # pyinfra logs to stderr
        text=True, timeout=300,
    )


@pytest.mark.parametrize("data", [b"", b"a\r\nb", "caf\u00e9\n".encode("latin-1"), KIMI_059])
def test_file_bytes_gives_exact_bytes(data):
    # The command prints the marker, then base64 -w0 on one line (empty for an empty file).
    assert FileBytes().process([PRESENT, base64.b64encode(data).decode()]) == data
    assert FileBytes().process([PRESENT]) == b""


def test_file_bytes_gives_none_for_a_missing_file():
    assert FileBytes().process([ABSENT]) is None


@pytest.mark.fleet
def test_dry_run_with_diff_prints_the_diff_and_changes_nothing(fleet, target):
    before = remote(fleet, target)

    result = pyinfra(fleet, target, "--dry", "--diff")

    assert result.returncode == 0, result.stdout
    good, bad = fleet.hosts[:-1], fleet.hosts[-1]
    for host in good:
        assert f"[{host}] Will patch {target}" in result.stdout
    assert "+     def set_eagle3_layers_to_capture(self, layer_ids=None):" in result.stdout
    assert f"[{bad}] will fail: cannot patch {target}: no class KimiK25ForConditionalGeneration" in result.stdout
    assert remote(fleet, target) == before


@pytest.mark.fleet
def test_run_patches_then_reports_no_change_and_a_refusal_fails_only_its_host(fleet, target):
    good, bad = fleet.hosts[:-1], fleet.hosts[-1]
    before = remote(fleet, target)

    first = pyinfra(fleet, target, "-y")

    output = first.stdout
    assert first.returncode != 0  # one host failed
    assert re.search(rf"\[{bad}\] cannot patch {re.escape(target)}: no class KimiK25ForConditionalGeneration", output)
    assert f"[{bad}] Error" in output
    after = remote(fleet, target)
    assert after[bad] == before[bad]  # untouched
    expected = hashlib.sha256(apply(KIMI_059, load_patch())).hexdigest()
    for host in good:
        assert f"[{host}] Success" in output
        sha, inode, *mode_owner = after[host]
        assert sha == expected
        assert inode != before[host][1]  # replaced by rename
        assert mode_owner == ["640", "nobody", "nogroup"]

    second = pyinfra(fleet, target, "-y", "-v", *[arg for host in good for arg in ("--limit", host)])

    assert second.returncode == 0, second.stdout
    for host in good:
        assert f"[{host}] noop: class KimiK25ForConditionalGeneration in {target} has the methods" in second.stdout
        assert f"[{host}] No changes" in second.stdout
    assert bad not in second.stdout
    assert remote(fleet, target) == after
