"""The stack on the local fleet, through the real pyinfra over SSH: build, no-op, repair, refusals.

The tests use ``fleettest``, a copy of the dev stack under another name (so
another stack id and folder): the dev stack the other tests' services run on
stays untouched, which one test checks on purpose.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paths import LAYOUT
from sglfleet import FILES, PROJECT_ROOT
from deploying import stack_on, tree_digest
from sglfleet.artifacts.stacks import load_stack, lock_path

pytestmark = pytest.mark.fleet

PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
DEPLOY = "tests/data/stack_deploy.py"
NAME = "fleettest"
WHEELHOUSE = LAYOUT.wheelhouse


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Stack files with ``fleettest`` added, and a fresh controller wheelhouse."""
    root = tmp_path_factory.mktemp("stackfleet")
    stacks = root / "stacks"
    shutil.copytree(FILES / "stacks", stacks)
    shutil.copy(stacks / "dev.toml", stacks / f"{NAME}.toml")
    lock_path(NAME, stacks).parent.mkdir(parents=True)
    shutil.copy(lock_path("dev", stacks), lock_path(NAME, stacks))
    return {"SGLFLEET_STACKS": str(stacks), "SGLFLEET_WHEELHOUSE": str(root / "wheelhouse")}


@pytest.fixture(scope="module")
def stack(env):
    return load_stack(NAME, stacks_dir=Path(env["SGLFLEET_STACKS"]))


@pytest.fixture(scope="module")
def built(fleet, stack):
    """The stack each host builds: for its own python3."""
    return {host: stack.for_python(fleet.python_of(host)) for host in fleet.hosts}


@pytest.fixture(scope="module", autouse=True)
def clean(fleet):
    def remove():
        for host in fleet.hosts:
            fleet.exec(host, f"rm -rf {LAYOUT.stacks}/{NAME}-* {LAYOUT.stacks}/.build-{NAME}-*", check=False)
    remove()
    yield
    remove()


def converge(fleet, env, *args, stack_name=NAME):
    done = subprocess.run(
        [PYINFRA, str(fleet.inventory), DEPLOY, "-y", "--data", f"stack={stack_name}", *args],
        cwd=PROJECT_ROOT, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
    )
    return done


def results(output: str) -> dict[str, list[str]]:
    """pyinfra's results table: operation name -> [hosts, success, error, no change]."""
    table = output.split("--> Results:", 1)[-1]
    rows = {}
    for line in table.splitlines():
        match = re.match(r"\s+(Preflight|Stack) \| .*?\s{2,}([\d-]+)\s+([\d-]+)\s+([\d-]+)\s+([\d-]+)\s*$", line)
        if match:
            rows[match.group(1)] = list(match.groups()[1:])
    return rows


def marker(fleet, host, stack):
    return json.loads(fleet.exec(host, f"cat {stack.marker}").stdout)


def digest(fleet, host, paths):
    return tree_digest(fleet, host, *paths.split())  # every entry's metadata and change time, not its bytes


def test_fresh_build_fetches_once_then_converges_to_no_change(fleet, env, built):
    for host in fleet.hosts:  # nothing on the hosts: every wheel and uv must come from the controller
        fleet.exec(host, f"rm -rf {WHEELHOUSE} {LAYOUT.root}/tools/uv-*")
    first = converge(fleet, env)
    assert first.returncode == 0, first.stdout
    assert results(first.stdout)["Stack"][1] == str(len(fleet.hosts))  # changed on every host

    fetched = sum(json.loads(line)["bytes"]
                  for line in (Path(env["SGLFLEET_WHEELHOUSE"]) / "fetches.jsonl").read_text().splitlines())
    # Each file the fleet's Pythons need, once: a wheel every Python takes is fetched once for all.
    needed = sum({f.filename: f.size for stack in built.values() for f in stack.files}.values())
    assert fetched == needed, f"{len(fleet.hosts)} hosts must cost the stack's bytes once"

    for host in fleet.hosts:
        stack = built[host]
        found = marker(fleet, host, stack)
        assert found["stack_id"] == stack.id and found["ok"] is True
        assert set(found["skipped"]) >= {"torch_cuda", "gpu_arch", "sgl_kernel_import"}
        # Built in .build-<id> and renamed: the venv, its scripts and sglang work at the final path.
        out = fleet.exec(host, f"{stack.venv}/bin/python -c 'import importlib.metadata as m; print(m.version(\"sglang\"))'"
                               f" && {stack.venv}/bin/normalizer --version && ls -A {LAYOUT.stacks}").stdout
        assert out.startswith("0.5.9\n") and f".build-{NAME}" not in out

    before = {host: digest(fleet, host, f"{built[host].path} {WHEELHOUSE}") for host in fleet.hosts}
    second = converge(fleet, env)
    assert second.returncode == 0, second.stdout
    # A host that passes preflight has no preflight operation: only the stack's, unchanged everywhere.
    assert results(second.stdout) == {"Stack": [str(len(fleet.hosts)), "-", "-", str(len(fleet.hosts))]}
    assert {host: digest(fleet, host, f"{built[host].path} {WHEELHOUSE}") for host in fleet.hosts} == before
    assert fetched == needed  # and nothing more from the index


def test_corrupted_and_partial_wheels_are_replaced(fleet, env, built):
    host = fleet.hosts[1]
    stack = built[host]
    sglang = next(f for f in stack.files if f.name == "sglang")
    psutil = next(f for f in stack.files if f.name == "psutil")
    # Transfers land in a run's own .incoming-<token> folder: a killed run's, two hours old, holds a partial.
    killed = f"{WHEELHOUSE}/.incoming-killedrun"
    fleet.exec(host, f"echo corrupt >> {WHEELHOUSE}/{sglang.filename} && mkdir -p {killed}"
                     f" && head -c 1000 {WHEELHOUSE}/{psutil.filename} > {killed}/{psutil.filename}.part"
                     f" && touch -d '2 hours ago' {killed}"
                     f" && rm {WHEELHOUSE}/{psutil.filename} && rm -rf {stack.path}")
    done = converge(fleet, env)
    assert done.returncode == 0, done.stdout
    assert results(done.stdout)["Stack"][1:] == ["1", "-", str(len(fleet.hosts) - 1)]
    sums = fleet.exec(host, f"cd {WHEELHOUSE} && sha256sum {sglang.filename} {psutil.filename} && ls -AR").stdout
    assert sglang.sha256 in sums and psutil.sha256 in sums and ".part" not in sums
    assert marker(fleet, host, stack)["ok"] is True


def test_killed_build_is_completed_and_the_stack_in_use_stays_intact(fleet, env, built):
    host = fleet.hosts[0]
    stack = built[host]
    in_use = stack_on(fleet, host).path
    before = digest(fleet, host, in_use) + fleet.exec(host, f"readlink {LAYOUT.current}", check=False).stdout
    # What a build killed halfway leaves: a venv with part of the wheels, no marker.
    build = f"{LAYOUT.stacks}/.build-{stack.id}"
    uv = LAYOUT.uv(stack.uv.version)
    fleet.exec(host, f"rm -rf {stack.path} && mkdir -p {build} && {uv} venv -q --python python{stack.python} {build}/venv"
                     f" && UV_CACHE_DIR={build}/.c {uv} pip install -q --offline --no-index --find-links {WHEELHOUSE}"
                     f" --no-deps --python {build}/venv/bin/python idna packaging")
    done = converge(fleet, env, "--limit", host)
    assert done.returncode == 0, done.stdout
    assert marker(fleet, host, stack)["ok"] is True
    assert f".build-{NAME}" not in fleet.exec(host, f"ls -A {LAYOUT.stacks}").stdout
    after = digest(fleet, host, in_use) + fleet.exec(host, f"readlink {LAYOUT.current}", check=False).stdout
    assert after == before


def test_too_little_disk_fails_that_host_alone_with_a_clear_message(fleet, env, built):
    host = fleet.hosts[-1]
    stack = built[host]
    stacks = LAYOUT.stacks
    # A small filesystem for the stack folder, holding what was there, with less free than a build takes.
    fleet.exec(host, f"rm -rf {stack.path} && used=$(du -sk {stacks} | cut -f1) && mkdir -p /tmp/stacks-copy"
                     f" && cp -a {stacks}/. /tmp/stacks-copy/ && mount -t tmpfs -o size=$((used + 4096))k tmpfs {stacks}"
                     f" && cp -a /tmp/stacks-copy/. {stacks}/ && rm -rf /tmp/stacks-copy")
    try:
        done = converge(fleet, env)
    finally:
        fleet.exec(host, f"umount -l {stacks}")
    assert done.returncode != 0
    assert re.search(rf"\[{host}\] {host}: [\d.]+ GiB free under {stacks} is too little for stack {NAME} "
                     rf"\(needs [\d.]+ GiB: its wheels, [\d.]+ GiB, and the venv built from them, [\d.]+ GiB\): "
                     rf"free space or grow the filesystem", done.stdout)
    assert results(done.stdout)["Preflight"][2] == "1"  # the other hosts passed
    assert fleet.exec(host, f"test -e {stack.path}", check=False).returncode != 0


def test_lock_with_a_wrong_hash_refuses_before_any_host_is_touched(fleet, env, stack):
    stacks = Path(env["SGLFLEET_STACKS"])
    shutil.copy(stacks / "dev.toml", stacks / "badhash.toml")
    lock_path("badhash", stacks).parent.mkdir(parents=True, exist_ok=True)
    sglang = next(f for f in stack.files if f.name == "sglang")
    lock_path("badhash", stacks).write_text(
        lock_path(NAME, stacks).read_text().replace(sglang.sha256, hashlib.sha256(b"not sglang").hexdigest()))
    before = {host: digest(fleet, host, f"{LAYOUT.stacks} {LAYOUT.wheelhouse}") for host in fleet.hosts}
    done = converge(fleet, env, stack_name="badhash")
    assert done.returncode != 0
    assert f"{sglang.filename} from {sglang.url} has sha256" in done.stdout
    assert "the lock says" in done.stdout and "sglfleet lock badhash" in done.stdout
    assert {host: digest(fleet, host, f"{LAYOUT.stacks} {LAYOUT.wheelhouse}") for host in fleet.hosts} == before
