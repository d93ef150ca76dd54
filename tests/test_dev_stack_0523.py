"""The dev stack on sglang 0.5.23, built from its lock into a venv as a host builds it (no fleet).

The venv is made with the stack operation's own install flags (uv, offline,
``--no-index``, ``--require-hashes``, ``--no-deps``) from the controller's
wheelhouse, so the tests read the files hosts get, at the paths they get them.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sglfleet import FILES

from sglfleet.artifacts import wheelhouse
from sglfleet.artifacts.locking import uv_binary
from sglfleet.artifacts.patcher import apply, load_patch, missing_methods
from sglfleet.artifacts.stacks import load_stack
from sglfleet.plan.preflight import disk_needed
from sglfleet.shipped.server_flags import build_parser, load_flags
from test_standin import EAGLE3, STANDIN, free_port, get, wait_for

NAME = "dev-sglang-0.5.23"
KIMI = "sglang/srt/models/kimi_k25.py"


@pytest.fixture(scope="module")
def stack():
    """The stack for this python (the venv below is built with it), as a host of the same python builds it."""
    return load_stack(NAME).for_python("%d.%d" % sys.version_info[:2])


@pytest.fixture(scope="module")
def venv(stack, tmp_path_factory) -> Path:
    """The stack's venv, built offline from the wheelhouse with the flags hosts use."""
    local = wheelhouse.ensure(stack)
    root = tmp_path_factory.mktemp("dev0523")
    links = root / "wheelhouse"
    links.mkdir()
    for f in stack.files:
        (links / f.filename).symlink_to(local[f.filename].path)
    (root / "requirements.txt").write_text(stack.requirements())
    env = {**os.environ, "UV_CACHE_DIR": str(root / "uv-cache"), "UV_NO_CONFIG": "1",
           "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run([uv_binary(), "venv", "--quiet", "--relocatable", "--python", sys.executable,
                    str(root / "venv")], check=True, env=env)
    subprocess.run([uv_binary(), "pip", "install", "--quiet", "--python", str(root / "venv/bin/python"),
                    "--offline", "--no-index", "--find-links", str(links), "--require-hashes", "--no-deps",
                    "--link-mode", "hardlink", "-r", str(root / "requirements.txt")], check=True, env=env)
    return root / "venv"


def site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python3.*/site-packages"))


def test_lock_is_the_dev_stack_with_sglang_0523(stack):
    dev = load_stack("dev").for_python(stack.python)
    assert (stack.sglang_version, stack.cuda, stack.python, stack.no_deps) == ("0.5.23", None, "3.11", True)
    assert stack.complete and all(f.sha256 and f.size for f in stack.files)
    assert {f.name for f in stack.files} == {f.name for f in dev.files}
    sglang = next(f for f in stack.files if f.name == "sglang")
    # 0.5.23 ships compiled wheels; the lock takes the one bookworm's python 3.11 and glibc 2.36 install.
    assert sglang.filename == "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert stack.size < 70_000_000


def test_installed_sglang_is_0523_without_its_cuda_dependencies(venv):
    site = site_packages(venv)
    assert (site / "sglang-0.5.23.dist-info").is_dir()
    assert not list(site.glob("torch*")) and not list(site.glob("sgl_kernel*"))


def test_the_venv_fits_in_the_disk_preflight_asks_for(stack, venv):
    # What the build leaves beside the wheels: every file of the venv as built, bytecode included.
    built = sum(path.stat().st_size for path in venv.rglob("*") if path.is_file() and not path.is_symlink())
    unpacked = wheelhouse.unpacked_size(stack)
    assert unpacked < built <= disk_needed(stack, unpacked) - stack.size


def test_flags_of_the_installed_0523_are_read(venv, tmp_path):
    flags = load_flags(site_packages(venv) / "sglang/srt/server_args.py", cache_dir=tmp_path)
    # Declared as dataclass fields in sglang/srt/arg_groups/fields/*.py, not add_argument calls.
    assert (site_packages(venv) / "sglang/srt/arg_groups/fields").is_dir()
    assert flags.prog == "sglang serve" and len(flags.flags) > 500
    # 0.5.23 takes any registered algorithm name: a plain string, no choices (0.5.9 listed five).
    algorithm = flags.spec("--speculative-algorithm")
    assert (algorithm.type, algorithm.choices) == ("str", None) and "EAGLE3" in algorithm.help
    assert flags.aliases["--speculative-draft-model"] == "--speculative-draft-model-path"
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        assert flags.spec(flag).type == "int"
    args = build_parser(flags).parse_args(["--model-path", "m", "--tp", "8", *EAGLE3])
    assert (args.tp_size, args.speculative_algorithm) == (8, "EAGLE3")


def test_patch_finds_the_methods_and_leaves_kimi_k25_byte_identical(venv):
    kimi = site_packages(venv) / KIMI
    before = kimi.read_bytes()
    patch = load_patch()
    assert missing_methods(before, patch) == []
    assert apply(before, patch) == before
    sglfleet = str(Path(sys.executable).with_name("sglfleet"))
    for verb in ("verify", "diff", "apply"):
        done = subprocess.run([sglfleet, "patch", verb, str(kimi)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert verb != "diff" or done.stdout == ""
    assert hashlib.sha256(kimi.read_bytes()).digest() == hashlib.sha256(before).digest()


def test_standin_runs_on_the_stack_with_eagle3(venv, tmp_path):
    # The venv's own python, no PYTHONPATH: the stand-in finds sglang as it does on a host.
    port = free_port()
    env = {**os.environ, "SGLFLEET_CACHE": str(tmp_path / "cache"), "SGLFLEET_STANDIN_WARMUP": "0.2",
           "SGLFLEET_STANDIN_FAULT_FILE": str(tmp_path / "fault")}
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen([str(venv / "bin/python"), str(STANDIN), "--model-path", "/models/kimi",
                             "--port", str(port), *EAGLE3], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.url = f"http://127.0.0.1:{port}"
    try:
        wait_for(proc, timeout=30)
        status, body = get(proc.url + "/server_info")
        info = json.loads(body) if status == 200 else {}
        assert (info.get("version"), info.get("speculative_algorithm")) == ("0.5.23", "EAGLE3"), body
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)


def probe(venv: Path, wheels: list[str], *args: str) -> tuple[int, dict]:
    listing = venv.parent / "wheels.txt"
    listing.write_text("\n".join(wheels) + "\n")
    done = subprocess.run([str(venv / "bin/python"), str(FILES / "probe" / "verify_stack.py"), "--stack-id", "x",
                           "--python", "%d.%d" % sys.version_info[:2], "--sglang", "0.5.23", "--wheels", str(listing), *args],
                          capture_output=True, text=True)
    return done.returncode, json.loads(done.stdout)


def test_probe_passes_the_built_stack_and_checks_each_version_against_the_lock(stack, venv):
    wheels = [f.filename for f in stack.files]
    code, result = probe(venv, wheels, "--not-installed=uv", "--gpu-less")
    assert (code, result["ok"]) == (0, True), result
    assert result["checks"]["dist_versions"] == {"ok": True, "value": len(stack.venv_files), "mismatched": {},
                                                 "not_in_lock": []}
    assert set(result["skipped"]) >= {"torch_cuda", "gpu_arch", "sgl_kernel_import", "kernel_cubins", "cuda_runtime"}

    # uv is in the lock but never in the venv: without --not-installed it is reported missing.
    code, result = probe(venv, wheels, "--gpu-less")
    assert code == 1 and result["checks"]["dist_versions"]["mismatched"] == {
        "uv": {"metadata": None, "wheel": "0.13.9"}}
    # A lock that names another sglang than the one installed.
    other = [w.replace("sglang-0.5.23-", "sglang-0.5.22-") for w in wheels]
    code, result = probe(venv, other, "--not-installed=uv", "--gpu-less")
    assert code == 1 and result["checks"]["dist_versions"]["mismatched"] == {
        "sglang": {"metadata": ["0.5.23"], "wheel": "0.5.22"}}
