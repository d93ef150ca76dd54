"""Preflight: nvidia-smi parsing on recorded outputs, and the rules a host must pass for its stack."""

import json
from pathlib import Path

import pytest

from paths import LAYOUT
from sglfleet.artifacts.stacks import load_stack
from sglfleet.facts.gpu import NvidiaGpus, parse
from sglfleet.facts.stack import StackState
from sglfleet.facts.os import HostOs, OsInfo
from sglfleet.plan.preflight import Declared, check, fitting

DATA = Path(__file__).parent / "data" / "nvidia-smi"
GIB = 1 << 30
BOOKWORM = OsInfo(id="debian", version_id="12", pretty="Debian GNU/Linux 12 (bookworm)", glibc="2.36", python="3.11.2")
NO_PYTHON = OsInfo(id="debian", version_id="12", pretty="Debian GNU/Linux 12 (bookworm)", glibc="2.36")


def gpus(name):
    return parse((DATA / name).read_text().splitlines())


@pytest.fixture(scope="module")
def cu130():
    return load_stack("cu130-sglang-0.5.9").for_python("3.11")


@pytest.fixture(scope="module")
def dev():
    return load_stack("dev").for_python("3.11")


def test_h200_recorded_on_real_hardware():
    (gpu,) = gpus("h200.csv")
    assert (gpu.name, gpu.driver, gpu.compute_cap, gpu.memory_mib) == ("NVIDIA H200", "580.159.04", "9.0", 143771)
    assert gpu.driver_major == 580


@pytest.mark.parametrize("fixture, name, cap, driver_major", [
    ("rtx-pro-6000.csv", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 580),
    ("b200.csv", "NVIDIA B200", "10.0", 580),
    ("h100-old-driver.csv", "NVIDIA H100 80GB HBM3", "9.0", 550),
])
def test_eight_gpu_hosts(fixture, name, cap, driver_major):
    found = gpus(fixture)
    assert len(found) == 8
    assert {(g.name, g.compute_cap, g.driver_major) for g in found} == {(name, cap, driver_major)}


def test_unloaded_driver_and_missing_nvidia_smi_give_no_gpus():
    assert gpus("driver-not-loaded.txt") == []
    assert NvidiaGpus.default() == []
    assert NvidiaGpus().requires_command() == "nvidia-smi"


@pytest.mark.parametrize("fixture", ["h200.csv", "rtx-pro-6000.csv", "b200.csv"])
def test_supported_gpus_pass_the_cu130_stack(cu130, fixture):
    assert check("node1", cu130, gpus(fixture), 100 * GIB, False, BOOKWORM) == []


def test_old_driver_names_host_driver_stack_and_fix(cu130):
    problems = check("node2", cu130, gpus("h100-old-driver.csv"), 100 * GIB, False, BOOKWORM)
    assert problems == ["node2: driver 550.54.14 is too old for stack cu130-sglang-0.5.9 (needs 580 or newer)"]


def test_architecture_outside_the_stack(cu130):
    (problem,) = check("node3", cu130, gpus("b300.csv"), 100 * GIB, False, BOOKWORM)
    assert problem.startswith("node3: NVIDIA B300 SXM6 AC has compute capability 10.3")
    assert "supports 12.0, 10.0, 9.0" in problem


def test_declared_gpus_are_checked_against_nvidia_smi(cu130):
    # A B200 host in the RTX PRO 6000 group: the lint judged its flags as SM120.
    problems = check("gpu-rtx-05", cu130, gpus("b200.csv"), 100 * GIB, False, BOOKWORM,
                     declared=Declared("12.0", 8, 8))
    assert problems == ["gpu-rtx-05: the inventory declares gpu_compute_cap 12.0, but nvidia-smi reports 10.0 "
                        "(8 x NVIDIA B200): put the host in the group of its GPUs, or fix gpu_compute_cap"]
    # Four GPUs where tp_size is 8 (and the inventory says 8).
    problems = check("gpu-rtx-06", cu130, gpus("rtx-pro-6000.csv")[:4], 100 * GIB, False, BOOKWORM,
                     declared=Declared("12.0", 8, 8))
    assert problems == [
        "gpu-rtx-06: the inventory declares gpu_count 8, but nvidia-smi reports 4 GPUs (NVIDIA RTX PRO 6000 "
        "Blackwell Server Edition): fix gpu_count, or find the missing GPUs (nvidia-smi -L; a GPU lost to an Xid "
        "error needs a reset or a reboot)",
        "gpu-rtx-06: tp_size 8 needs 8 GPUs, but nvidia-smi reports 4: set tp_size <= 4 for this host"]
    assert check("gpu-rtx-02", cu130, gpus("rtx-pro-6000.csv"), 100 * GIB, False, BOOKWORM,
                 declared=Declared("12.0", 8, 8)) == []


def test_gpu_less_host_needs_the_inventory_to_say_so(dev, cu130):
    (problem,) = check("node4", dev, [], 100 * GIB, False, BOOKWORM)
    assert problem.startswith("node4: no NVIDIA GPU found") and "gpu_less=True" in problem
    assert check("node4", dev, [], 100 * GIB, True, BOOKWORM) == []
    (problem,) = check("node4", cu130, [], 100 * GIB, True, BOOKWORM)
    assert "needs a GPU" in problem


def test_disk_must_hold_the_wheels_and_the_venv_built_from_them_unless_built(dev):
    unpacked = 100 << 20
    needed = dev.size + unpacked + unpacked // 5  # the wheels, the venv, its bytecode and blocks
    assert check("node1", dev, [], needed, True, BOOKWORM, unpacked=unpacked) == []
    (problem,) = check("node1", dev, [], needed - 1, True, BOOKWORM, unpacked=unpacked)
    assert problem == (f"node1: {needed / GIB:.1f} GiB free under {LAYOUT.stacks} is too little for stack dev "
                       f"(needs {needed / GIB:.1f} GiB: its wheels, {dev.size / GIB:.1f} GiB, and the venv built "
                       f"from them, {(needed - dev.size) / GIB:.1f} GiB): free space or grow the filesystem")
    assert check("node1", dev, [], 0, True, BOOKWORM, built=True, unpacked=unpacked) == []


def test_missing_python(dev):
    (problem,) = check("node1", dev, [], 100 * GIB, True, NO_PYTHON)
    assert problem == ("node1: no python3 found (Debian GNU/Linux 12 (bookworm)), stack dev needs python3 3.10 or "
                       "3.11 or 3.12 or 3.13: install python3 (Debian, Ubuntu: apt install python3 python3-venv)")


def test_stack_state_fact_reads_one_command_output(dev):
    marker = {"stack_id": dev.id, "ok": True, "checks": {}}
    output = [
        "## id", dev.id,
        "## marker", *json.dumps(marker, indent=1).splitlines(), "",
        "## venv", "yes",
        "## python", "Python 3.11.2",
        "## uv",
        "## disk", "overlay 10485760 2097152 8388608 20% /",
        "## stacks", dev.id, "dev-000000000000",
        "## stale", ".build-dev-111111111111",
        "## releases", f"{LAYOUT.current}\t" '{"stack": "dev-000000000000", "id": "r1"}',
        f"{LAYOUT.previous}\t",
        "## wheels", "skipped",
    ]
    state = StackState().process(output)
    assert state.verified and state.wheels is None and not state.uv
    assert (state.python, state.disk_free, state.disk_path) == ("3.11.2", 8388608 * 1024, "/")
    assert state.releases == {"current": "dev-000000000000", "previous": None}
    assert (state.stacks[1:], state.stale) == (["dev-000000000000"], [".build-dev-111111111111"])
    # A marker of another stack, or a failed probe, is not valid.
    output[output.index("## id") + 1] = "dev-ffffffffffff"
    assert not StackState().process(output).verified
