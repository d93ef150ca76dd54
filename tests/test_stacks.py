"""Stacks: definitions and locks, `sglfleet lock`, the controller's wheelhouse, and the plans of the stack operation."""

import dataclasses
import hashlib
import http.server
import shutil
import threading
from functools import partial

import pytest

from paths import LAYOUT
from reaching import closed_port
from sglfleet import FILES

from sglfleet.artifacts import wheelhouse
from sglfleet.artifacts.locking import best_wheel, merge, reachable, resolve, target_tags
from sglfleet.artifacts.stacks import StackError, load_stack, lock_path, newest_glibc, stack_id
from sglfleet.facts.stack import StackHostState
from sglfleet.plan.stack_commands import build_commands, collect_commands

STACKS = FILES / "stacks"


@pytest.fixture()
def stacks_copy(tmp_path):
    """A copy of files/stacks to break on purpose."""
    shutil.copytree(STACKS, tmp_path / "stacks")
    return tmp_path / "stacks"


def test_dev_stack_is_complete_hashed_and_small():
    whole = load_stack("dev")
    assert whole.pythons == ("3.10", "3.11", "3.12", "3.13")
    stack = whole.for_python("3.11")
    assert stack.id == stack_id("dev", lock_path("dev").read_bytes()) + "-cp311"
    assert stack.id.startswith("dev-") and len(stack.id) == len("dev-") + 12 + len("-cp311")
    assert stack.venv == f"{LAYOUT.stacks}/{stack.id}/venv"
    assert (stack.sglang_version, stack.cuda, stack.python, stack.no_deps) == ("0.5.9", None, "3.11", True)
    assert stack.complete and all(f.sha256 and f.size and f.url.startswith("https://") for f in stack.files)
    assert stack.size < 40_000_000
    # uv is shipped to hosts from its wheel but not installed into the venv.
    assert stack.uv.filename.startswith("uv-") and "uv" not in {f.name for f in stack.venv_files}
    requirements = stack.requirements().splitlines()[1:]
    assert len(requirements) == len(stack.venv_files)
    assert "sglang==0.5.9 --hash=sha256:" + next(f.sha256 for f in stack.files if f.name == "sglang") in requirements


def test_each_python_of_a_stack_gets_its_own_wheels_id_and_glibc():
    whole = load_stack("dev")
    built = {python: whole.for_python(python) for python in whole.pythons}
    assert len({stack.id for stack in built.values()}) == 4 and built["3.13"].id.endswith("-cp313")
    for python, stack in built.items():
        names = [f.name for f in stack.files]
        assert len(names) == len(set(names)) == len(built["3.11"].files)  # one wheel a package
        tag = "cp" + python.replace(".", "")
        compiled = [f.filename for f in stack.files if f.name in ("orjson", "pyyaml", "charset-normalizer")]
        assert len(compiled) == 3 and all(f"-{tag}-{tag}-" in name for name in compiled), compiled
        assert stack.glibc == "2.17" and stack.python == python
    # A pure wheel every Python takes is one file, locked once, with no marker.
    sglang = [f for f in whole.files if f.name == "sglang"]
    assert len(sglang) == 1 and sglang[0].pythons == whole.pythons
    assert built["3.11"].for_python("3.13").files == built["3.13"].files  # from any of them, every file
    with pytest.raises(StackError, match=r"stack dev serves python 3.10, 3.11, 3.12, 3.13, not 3.9: add it"):
        whole.for_python("3.9")
    assert whole.serves("3.13.5") and not whole.serves("3.14.0") and not whole.serves(None)
    sglang_0523 = load_stack("dev-sglang-0.5.23")
    assert sglang_0523.pythons == ("3.11", "3.12", "3.13") and not sglang_0523.serves("3.10.12")
    assert {f.filename for f in sglang_0523.for_python("3.13").files if f.name == "sglang"} == {
        "sglang-0.5.23-cp313-cp313-manylinux_2_34_x86_64.whl"}
    assert sglang_0523.for_python("3.12").glibc == "2.34"  # sglang's own wheels


def test_the_lock_names_each_wheels_pythons_with_a_pep_508_marker():
    text = lock_path("dev").read_text()
    assert 'requires-python = ">=3.10, <3.14"' in text
    assert "marker = \"python_version == '3.13'\"" in text
    assert newest_glibc(["a-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                         "b-1-cp311-cp311-manylinux_2_34_x86_64.whl", "c-1-py3-none-any.whl"]) == "2.34"
    assert newest_glibc(["c-1-py3-none-any.whl"]) is None
    assert merge({"3.11": [{"name": "a", "version": "1", "wheel": {"name": "a-1-cp311.whl"}},
                           {"name": "b", "version": "1", "wheel": {"name": "b-1-py3-none-any.whl"}}],
                  "3.13": [{"name": "a", "version": "1", "wheel": {"name": "a-1-cp313.whl"}},
                           {"name": "b", "version": "1", "wheel": {"name": "b-1-py3-none-any.whl"}}]}) == [
        {"name": "a", "version": "1", "wheel": {"name": "a-1-cp311.whl"}, "pythons": ["3.11"]},
        {"name": "a", "version": "1", "wheel": {"name": "a-1-cp313.whl"}, "pythons": ["3.13"]},
        {"name": "b", "version": "1", "wheel": {"name": "b-1-py3-none-any.whl"}, "pythons": ["3.11", "3.13"]}]


def test_cu130_stack_says_what_it_needs_and_refuses_until_completed():
    stack = load_stack("cu130-sglang-0.5.9")
    assert (stack.cuda, stack.compute_caps, stack.min_driver) == ("13.0", ("12.0", "10.0", "9.0"), 580)
    assert stack.overrides == ("flashinfer-python==0.6.4", "flashinfer-cubin==0.6.4",
                               "nixl-cu12; sys_platform == 'never'", "outlines==0.1.11; python_version < '3.13'")
    assert stack.pythons == ("3.10", "3.11", "3.12", "3.13")  # torch 2.9.1+cu130 has cp310-cp313 builds
    versions = {f.name: f.version for f in stack.files}
    assert (versions["sglang"], versions["flashinfer-python"], versions["flashinfer-cubin"]) == ("0.5.9", "0.6.4", "0.6.4")
    # The PD transfer backends come from PyPI: this lock carries them already.
    assert (versions["mooncake-transfer-engine-cuda13"], versions["nixl"], versions["nixl-cu13"]) == (
        "0.3.14", "1.5.1", "1.5.1")
    assert {u["name"] for u in stack.unresolved} == {"torch", "torchvision", "torchaudio", "sgl-kernel", "flashinfer-jit-cache"}
    with pytest.raises(StackError, match=r"run `sglfleet lock cu130-sglang-0.5.9` where download.pytorch.org"):
        stack.require_complete()


def test_cu130_0523_stack_is_complete_from_pypi_for_each_python_with_one_cuda_major():
    whole = load_stack("cu130-sglang-0.5.23")
    whole.require_complete()
    assert (whole.cuda, whole.compute_caps, whole.min_driver, whole.pythons) == (
        "13.0", ("12.0", "10.0", "9.0"), 580, ("3.11", "3.12", "3.13"))
    assert all(f.sha256 and f.size and f.url.startswith("https://files.pythonhosted.org/") for f in whole.files)
    # Three overrides: nvidia-cutlass-dsl's and nixl's cu12 flavours dropped; outlines left out on 3.13
    # (no outlines-core wheel).
    assert whole.overrides == ("nvidia-cutlass-dsl-libs-cu12; sys_platform == 'never'",
                               "nixl-cu12; sys_platform == 'never'",
                               "outlines==0.1.11; python_version < '3.13'")
    for python, count in {"3.11": 211, "3.12": 211, "3.13": 205}.items():
        stack = whole.for_python(python)
        tag = "cp" + python.replace(".", "")
        versions = {f.name: f.version for f in stack.files}
        # sglang 0.5.23's own pins (its METADATA), unchanged: no override touches them.
        assert {name: versions[name] for name in ("sglang", "torch", "sglang-kernel", "flashinfer-python",
                                                  "transformers")} == {
            "sglang": "0.5.23", "torch": "2.14.1", "sglang-kernel": "0.4.10", "flashinfer-python": "0.7.2",
            "transformers": "5.19.0"}
        wheels = {f.name: f.filename for f in stack.files}
        assert wheels["torch"] == f"torch-2.14.1-{tag}-{tag}-manylinux_2_28_x86_64.whl"
        assert wheels["sglang"] == f"sglang-0.5.23-{tag}-{tag}-manylinux_2_34_x86_64.whl"
        assert int(versions["cuda-python"].split(".")[0]) >= 13
        assert "nvidia-cutlass-dsl-libs-cu13" in versions
        assert not [name for name in versions if name.endswith("-cu12")]
        assert ("outlines-core" in versions) == (python != "3.13")
        # The PD transfer backends, their CUDA 13 builds (about 110 MB of wheels together).
        assert {name: versions.get(name) for name in ("mooncake-transfer-engine-cuda13", "nixl", "nixl-cu13")} == {
            "mooncake-transfer-engine-cuda13": "0.3.14", "nixl": "1.5.1", "nixl-cu13": "1.5.1"}
        assert wheels["nixl-cu13"] == f"nixl_cu13-1.5.1-{tag}-{tag}-manylinux_2_28_x86_64.whl"
        assert len(stack.files) == count and 4.0e9 < stack.size < 4.5e9 and stack.glibc == "2.34"


def test_unknown_stack_lists_the_available_ones():
    with pytest.raises(StackError, match=r"no stack named 'nope' .*available: cu130-sglang-0.5.23, "
                                         r"cu130-sglang-0.5.9, dev, dev-sglang-0.5.23, gateway-smg-1.13.0\)"):
        load_stack("nope")


def test_a_user_adds_a_stack_by_adding_a_file(stacks_copy):
    (stacks_copy / "mine.toml").write_text((stacks_copy / "dev.toml").read_text())
    with pytest.raises(StackError, match=r"stack mine has no lock .*run `sglfleet lock mine`"):
        load_stack("mine", stacks_dir=stacks_copy)


def test_unhashed_lock_refused_unless_allowed(stacks_copy):
    lock = lock_path("dev", stacks_copy)
    text = lock.read_text()
    sha = load_stack("dev").files[0].sha256
    lock.write_text(text.replace(f'hashes = {{ sha256 = "{sha}" }}', 'hashes = { sha256 = "" }'))
    with pytest.raises(StackError, match=r"1 locked files have no sha256 .*allow_unhashed_lock=True"):
        load_stack("dev", stacks_dir=stacks_copy)
    stack = load_stack("dev", allow_unhashed=True, stacks_dir=stacks_copy)
    assert stack.files[0].sha256 is None or stack.files[0].sha256 == ""


def test_definition_edited_after_locking_is_refused(stacks_copy):
    definition = stacks_copy / "dev.toml"
    definition.write_text(definition.read_text() + "\n# edited\n")
    with pytest.raises(StackError, match=r"dev.toml changed since it was locked: run `sglfleet lock dev`"):
        load_stack("dev", stacks_dir=stacks_copy)


def test_wheel_selection_takes_the_best_tag_for_the_hosts():
    tags = target_tags("3.11", "x86_64-manylinux_2_36")
    entry = {"wheels": [
        {"url": "https://x/charset_normalizer-3.5.3-py3-none-any.whl"},
        {"url": "https://x/charset_normalizer-3.5.3-cp311-cp311-manylinux_2_28_x86_64.whl"},
        {"url": "https://x/charset_normalizer-3.5.3-cp312-cp312-manylinux_2_28_x86_64.whl"},
        {"url": "https://x/charset_normalizer-3.5.3-cp311-cp311-manylinux_2_39_x86_64.whl"},
    ]}
    assert best_wheel(entry, tags)["name"] == "charset_normalizer-3.5.3-cp311-cp311-manylinux_2_28_x86_64.whl"
    torch = {"wheels": [{"url": "https://x/torch-2.9.1%2Bcu130-cp311-cp311-manylinux_2_28_x86_64.whl"}]}
    assert best_wheel(torch, tags)["name"] == "torch-2.9.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert best_wheel({"wheels": [{"url": "https://x/a-1-cp312-cp312-manylinux_2_28_x86_64.whl"}]}, tags) is None


def test_reachable_tells_a_live_server_from_a_closed_port(index):
    _, url, _ = index
    assert reachable(f"{url}/simple/") is True  # 404 is an answer
    assert reachable(f"http://127.0.0.1:{closed_port()}/simple/", timeout=2) is False


def test_lock_marks_unreachable_sources_unresolved_and_resolves_the_rest(tmp_path):
    """A real resolution against PyPI, with one index that really cannot be reached (a closed port)."""
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "split.toml").write_text(f"""
python = "3.11"
platform = "x86_64-manylinux_2_36"
uv = "0.13.9"

[indexes]
private = "http://127.0.0.1:{closed_port()}/simple"

[[package]]
name = "packaging"
version = "24.2"

[[package]]
name = "six"
version = "1.17.0"
index = "private"
""")
    text, unresolved = resolve("split", stacks_dir=stacks)
    assert [(u["name"], u["source"]) for u in unresolved] == [("six", unresolved[0]["source"])]
    assert unresolved[0]["source"].startswith("127.0.0.1:")
    assert 'name = "packaging"\nversion = "24.2"' in text and 'name = "six"' not in text.split("[tool.sglfleet]")[0]
    assert text.count("[[packages]]") == text.count("hashes = { sha256 = ") == 2  # packaging and uv


def test_dev_lock_resolves_to_one_hashed_wheel_each():
    text, unresolved = resolve("dev")
    assert unresolved == []
    assert 'name = "sglang"\nversion = "0.5.9"' in text and 'no-deps = ["sglang"]' in text
    assert 'name = "numpy"' not in text  # sglang came without its dependencies
    assert text.count("[[packages]]") == text.count(".whl\", url =") == text.count("hashes = { sha256 = ")


@pytest.fixture()
def index(tmp_path):
    """A loopback HTTP server standing in for the package index, counting requests."""
    served = tmp_path / "index"
    served.mkdir()
    hits = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield served, f"http://127.0.0.1:{server.server_port}", hits
    server.shutdown()


def local_stack(stacks_copy, served, url, sha_of=None):
    """The dev stack with its files served from the loopback index."""
    stack = load_stack("dev", stacks_dir=stacks_copy)
    files = []
    for f in stack.files[:3]:
        data = f"wheel {f.filename}".encode()
        (served / f.filename).write_bytes(data)
        sha = (sha_of or (lambda d: hashlib.sha256(d).hexdigest()))(data)
        files.append(f.__class__(f.name, f.version, f.filename, f"{url}/{f.filename}", sha, len(data)))
    return dataclasses.replace(stack, files=tuple(files))


def test_wheelhouse_fetches_each_file_once_and_verifies(tmp_path, monkeypatch, stacks_copy, index):
    served, url, hits = index
    monkeypatch.setenv("SGLFLEET_WHEELHOUSE", str(tmp_path / "wh"))
    stack = local_stack(stacks_copy, served, url)
    first = wheelhouse.ensure(stack)
    for _ in range(3):  # three hosts planned: nothing more from the index
        assert wheelhouse.ensure(stack) == first
    assert len(hits) == 3 and wheelhouse.fetched_bytes() == sum(f.size for f in stack.files)
    for f in stack.files:
        assert first[f.filename].path == tmp_path / "wh" / f.sha256 / f.filename
        assert hashlib.sha256(first[f.filename].path.read_bytes()).hexdigest() == f.sha256


def test_wheelhouse_refuses_bytes_that_differ_from_the_lock(tmp_path, monkeypatch, stacks_copy, index):
    served, url, hits = index
    monkeypatch.setenv("SGLFLEET_WHEELHOUSE", str(tmp_path / "wh"))
    stack = local_stack(stacks_copy, served, url, sha_of=lambda data: "0" * 64)
    with pytest.raises(StackError, match=r"stack dev: .* has sha256 .*the lock says 0000.*sglfleet lock dev"):
        wheelhouse.ensure(stack)
    assert not list((tmp_path / "wh").rglob("*.whl*"))  # nothing unverified is kept


def test_a_run_checks_a_stack_s_wheels_once_and_bytes_that_differ_stop_it_while_planning(
        tmp_path, monkeypatch, stacks_copy, index):
    # The operations fetch no wheel: the task hands them these, checked once a run, and a
    # PyinfraError raised while the deploy is planned stops the run before any host changes.
    from pyinfra.api.exceptions import PyinfraError

    from sglfleet.controller.wheels import host_wheels
    from sglfleet.record.run import RunRecord

    served, url, hits = index
    monkeypatch.setenv("SGLFLEET_WHEELHOUSE", str(tmp_path / "wh"))
    good = local_stack(stacks_copy, served, url)
    checked, ensure = [], wheelhouse.ensure
    monkeypatch.setattr(wheelhouse, "ensure",
                        lambda stack, **kwargs: checked.append(stack.id) or ensure(stack, **kwargs))
    run = RunRecord()  # one run: its record keeps what it fetched
    wheels = host_wheels(run, good)
    assert host_wheels(run, good) is wheels and checked == [good.id]  # once a run, however many hosts take it
    assert wheels == ensure(good) and len(hits) == 3
    bad = local_stack(stacks_copy, served, url, sha_of=lambda data: "0" * 64)
    with pytest.raises(PyinfraError, match=r"stack dev: .* has sha256 .*the lock says 0000.*sglfleet lock dev"):
        host_wheels(RunRecord(), bad)  # the next run


def state(stack, **kwargs):
    return StackHostState(stack_id=stack.id, **kwargs)


def test_build_is_offline_hash_checked_verified_and_renamed_when_complete():
    stack = load_stack("dev").for_python("3.13")
    assert build_commands(stack, state(stack, marker={"stack_id": stack.id, "ok": True}, venv=True), True) == []
    commands = build_commands(stack, state(stack), gpu_less=True)
    script = commands[-1]
    for flag in ("--offline", "--no-index", f"--find-links {LAYOUT.wheelhouse}", "--require-hashes",
                 "--overrides", "--no-deps", "--relocatable", "--gpu-less", f"mv -T {LAYOUT.stacks}/.build-{stack.id}"):
        assert flag in script
    assert f"--wheels {LAYOUT.stacks}/.build-{stack.id}/wheels.txt --not-installed=uv" in script
    assert "--compute-caps" not in script  # dev has none
    assert "uv venv --quiet --relocatable --python python3.13 " in script  # the host's own interpreter
    assert f"--stack-id {stack.id} --python 3.13" in script  # the marker names it
    cu130 = load_stack("cu130-sglang-0.5.23").for_python("3.11")
    assert "--cuda 13.0 --compute-caps 12.0,10.0,9.0 --wheels" in build_commands(cu130, state(cu130), False)[-1]
    assert "--backend" not in build_commands(cu130, state(cu130), False)[-1]  # no PD service
    assert "--gpu-less --backend=mooncake" not in script
    pd = build_commands(cu130, state(cu130), False, backends=["mooncake", "nixl"])[-1]
    assert "--backend=mooncake --backend=nixl" in pd  # each PD service's backend, imported by the probe
    assert any("zipfile" in c for c in commands if isinstance(c, str))  # uv from its own wheel
    assert script.index("verify_stack.py") < script.index("mv -T")  # verified before it is in place


def test_collect_keeps_current_previous_and_a_few_more():
    stack = load_stack("dev")
    host = state(stack, stacks=[stack.id, "dev-a", "dev-b", "dev-c", "dev-d"], stale=[".build-dev-x"],
                 releases={"current": "dev-c", "previous": "dev-d"})
    (command,) = collect_commands(stack, host, keep=1)
    assert command.startswith(f"flock {LAYOUT.stacks_lock} sh -c ")
    # with the stack its compile caches, and their archives for every GPU and driver
    assert (f"rm -rf -- {LAYOUT.stacks}/dev-b {LAYOUT.cache_dir}/compile/dev-b "
            f"{LAYOUT.compile_archives}/dev-b+* {LAYOUT.stacks}/.build-dev-x\n") in command
    assert "wheels.txt" in command
    assert collect_commands(stack, state(stack, stacks=[stack.id, "dev-a"]), keep=1) == []
