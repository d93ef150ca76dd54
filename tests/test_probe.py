"""The verification probe's pure parts on real files: ELF and fatbin reading, the one-CUDA-major check."""

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglfleet import FILES

from sglfleet.artifacts import upstream, wheelhouse
from sglfleet.artifacts.locking import uv_binary
from sglfleet.artifacts.stacks import load_stack

PROBE = FILES / "probe" / "verify_stack.py"
ARCHS = Path(__file__).parent / "data" / "fatbin" / "archs.so"  # nvcc 13 output, see its README


def load_probe():
    spec = importlib.util.spec_from_file_location("verify_stack", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


probe = load_probe()


def locked(stack_name: str, package: str):
    """A wheel of a locked stack, fetched into the controller's wheelhouse and checked against the lock."""
    file = next(f for f in load_stack(stack_name).files if f.name == package)
    return wheelhouse.fetch(file, stack_name)


def test_fatbin_entries_of_nvcc_output_name_arch_and_variant():
    assert probe.fatbin_entries(ARCHS) == {
        ("cubin", 90, ""), ("cubin", 90, "a"), ("cubin", 100, "f"), ("cubin", 120, "a"), ("ptx", 120, "")}
    assert "libcudart.so.13" in probe.elf_needed(ARCHS)


def test_a_library_without_fatbin_has_no_entries():
    # The probe reads every .so of the kernel package; host-only ELF files carry no .nv_fatbin.
    assert probe.fatbin_entries(os.path.realpath(sys.executable)) == set()
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF"):
        probe.fatbin_entries(PROBE)


def test_which_cubin_runs_on_which_gpu():
    # Arch-specific (a) cubins run on that capability only; plain and family (f) ones
    # on later minors of the same major. B300 is 10.3, DGX Spark's GB10 is 12.1.
    assert probe.runs_on(90, "a", "9.0") and not probe.runs_on(90, "a", "10.0")
    assert probe.runs_on(100, "f", "10.3") and not probe.runs_on(100, "f", "12.0")
    assert probe.runs_on(120, "a", "12.0") and not probe.runs_on(120, "a", "12.1")
    assert probe.runs_on(80, "", "8.9") and not probe.runs_on(89, "", "8.0")
    assert probe.arch_list_covers(["sm_90", "sm_100", "sm_120", "compute_120"], "12.0")
    assert not probe.arch_list_covers(["sm_90", "compute_120"], "12.0")  # PTX alone is not machine code


@pytest.fixture(scope="module")
def sglang_kernel(tmp_path_factory) -> Path:
    """sgl_kernel's .so files from the real sglang-kernel 0.4.10 wheel of stack cu130-sglang-0.5.23,
    without flash_ops (1.1 GB unpacked, not a common_ops library)."""
    wheel = locked("cu130-sglang-0.5.23", "sglang-kernel")
    root = tmp_path_factory.mktemp("sglang-kernel")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(root, [n for n in z.namelist() if n.startswith("sgl_kernel/") and n.endswith(".so")
                            and "flash_ops" not in n])
    return root / "sgl_kernel"


@pytest.mark.large_download  # sglang-kernel 0.4.10: a 373 MB wheel (373,008,902 bytes)
def test_sglang_kernel_0410_carries_cubins_for_the_stack(sglang_kernel):
    result = {"checks": {}}
    probe.check_kernel_cubins(str(sglang_kernel), ["12.0", "10.0", "9.0"], result)
    check = result["checks"]["kernel_cubins"]
    assert check["ok"], check["problems"]
    for variant in ("sm90", "sm100"):
        assert check["value"][f"{variant}/common_ops.abi3.so"] == [
            "sm_80", "sm_89", "sm_90", "sm_90a", "sm_100f", "sm_120a"]
    # FlashMLA has no SM120 kernels: why sglang picks another MLA backend there.
    assert check["value"]["flashmla_ops.abi3.so"] == ["sm_90a", "sm_100f", "sm_103a"]
    assert "libcudart.so.13" in probe.elf_needed(sglang_kernel / "sm100" / "common_ops.abi3.so")


@pytest.mark.large_download  # the same 373 MB wheel, cached after the test above
def test_a_gpu_the_kernel_wheel_lacks_is_named_with_the_fix(sglang_kernel):
    # 0.4.10's only SM12x cubin is sm_120a, which a GB10 (12.1) cannot run; B300 (10.3) runs sm_100f.
    result = {"checks": {}}
    probe.check_kernel_cubins(str(sglang_kernel), ["12.1", "10.3"], result)
    check = result["checks"]["kernel_cubins"]
    assert not check["ok"]
    assert check["problems"] == [
        "sgl_kernel/sm100/common_ops.abi3.so has no cubin for compute capability 12.1 (it has sm_80, sm_89, "
        "sm_90, sm_90a, sm_100f, sm_120a): its kernels fail with 'no kernel image is available' there; "
        "use a kernel wheel built for sm_121"]


def venv_with(tmp_path: Path, *wheels: Path) -> Path:
    venv = tmp_path / "venv"
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_NO_CONFIG": "1"}
    subprocess.run([uv_binary(), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, env=env)
    subprocess.run([uv_binary(), "pip", "install", "--quiet", "--offline", "--no-deps", "--python",
                    str(venv / "bin/python"), *map(str, wheels)], check=True, env=env)
    return venv


def cuda_runtime_check(venv: Path) -> dict:
    """The probe's one-CUDA-major check, run by the venv's python as on a host."""
    script = (f"import importlib.util, json\n"
              f"spec = importlib.util.spec_from_file_location('probe', {str(PROBE)!r})\n"
              f"probe = importlib.util.module_from_spec(spec); spec.loader.exec_module(probe)\n"
              f"result = {{'checks': {{}}, 'skipped': {{}}}}\n"
              f"probe.check_cuda_runtime('13.0', None, result)\n"
              f"print(json.dumps(result['checks']['cuda_runtime']))\n")
    done = subprocess.run([str(venv / "bin/python"), "-c", script], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_one_cuda_runtime_major_passes_and_a_second_is_named(tmp_path):
    runtime13 = locked("cu130-sglang-0.5.23", "nvidia-cuda-runtime")  # 2.2 MB, libcudart.so.13
    runtime12 = upstream.wheel("nvidia-cuda-runtime-cu12", "12.9.79")  # 3.5 MB, libcudart.so.12
    only13 = cuda_runtime_check(venv_with(tmp_path / "a", runtime13))
    assert (only13["ok"], only13["value"]) == (True, [13])

    both = cuda_runtime_check(venv_with(tmp_path / "b", runtime13, runtime12))
    assert (both["ok"], both["value"], both["expected"]) == (False, [12, 13], [13])
    assert any(seen.endswith("libcudart.so.12") for seen in both["seen"]["12"])
    assert "nvidia-cuda-runtime-cu12 12.9.79" in both["seen"]["12"]


def test_the_common_ops_failure_seen_on_a_gpu_is_explained_by_its_first_cause():
    # sgl_kernel's own ImportError from a real H200: sglang-kernel 0.4.10 (torch 2.14.1) beside torch 2.11.
    seen = (Path(__file__).parent / "data" / "gpu" / "sglang-kernel-0.4.10-on-torch-2.11-import-error.txt").read_text()
    error = ImportError(seen[seen.index("\n[sgl_kernel] CRITICAL"):].rstrip())

    class Torch:  # the probe reads only these two names of torch
        __version__ = "2.11.0+cu130"
        version = type("version", (), {"cuda": "13.0"})

    line = probe.explain(error, Torch)
    assert "\n" not in line
    assert line.startswith("sgl_kernel could not load any common_ops library: its build does not match torch "
                           "2.11.0+cu130 (CUDA 13.0)")
    assert "undefined symbol: _ZN3c104cuda19CUDAErrorLogCaptureC1Ev" in line
    assert line.endswith("install the kernel wheel built for this torch")


def test_a_kernel_error_the_probe_does_not_know_is_kept_in_one_line():
    line = probe.explain(RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be reported later"), None)
    assert line == "RuntimeError: CUDA error: out of memory CUDA kernel errors might be reported later"


def test_no_kernel_image_names_the_missing_cubin_as_the_cause():
    # cudaErrorNoKernelImageForDevice's text, as torch raises it (not reproduced on the H200:
    # every sglang-kernel build carries sm_90)
    error = RuntimeError("CUDA error: no kernel image is available for execution on the device")
    assert probe.explain(error, None).startswith("no kernel image is available for this GPU: the wheel carries no "
                                                 "cubin for its architecture")


def test_the_probe_imports_what_sglang_imports_for_each_backend():
    from sglfleet.plan.pd import BACKEND_MODULES
    assert probe.BACKEND_MODULES == BACKEND_MODULES


# mooncake-transfer-engine-cuda13 0.3.14's cp311 wheel, unpacked and imported on a machine without
# rdma-core (seen while writing this): its engine.so needs the host's libibverbs.
MOONCAKE_WITHOUT_RDMA_CORE = ImportError("libibverbs.so.1: cannot open shared object file: No such file or directory")


@pytest.mark.parametrize("backend, module, error, fragments", [
    ("mooncake", "mooncake.engine", MOONCAKE_WITHOUT_RDMA_CORE,
     ["the mooncake transfer backend does not import (mooncake.engine)", "libibverbs.so.1",
      "apt install libibverbs1"]),
    ("nixl", "nixl._api", ModuleNotFoundError("No module named 'nixl'", name="nixl"),
     ["the nixl transfer backend does not import (nixl._api)", "lock lacks its wheel"]),
])
def test_a_backend_that_does_not_import_is_one_line_with_its_fix(backend, module, error, fragments):
    line = probe.backend_failure(backend, module, error)
    assert "\n" not in line
    for fragment in fragments:
        assert fragment in line, line


def test_each_backend_asked_for_is_a_check(monkeypatch):
    imported = []

    def fake_import(name):
        imported.append(name)
        if name == "nixl._api":
            raise ModuleNotFoundError("No module named 'nixl'", name="nixl")

    monkeypatch.setattr(probe.importlib, "import_module", fake_import)
    result = {"checks": {}}
    probe.check_backends(["mooncake", "nixl"], result)
    assert imported == ["mooncake.engine", "nixl._api"]
    assert result["checks"]["backend_mooncake"] == {"ok": True, "value": "mooncake.engine"}
    assert not result["checks"]["backend_nixl"]["ok"]
