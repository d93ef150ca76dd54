"""Verify a freshly built stack from inside its venv; print the result as JSON.

Run with the new venv's python (stdlib only). Checks:
- the Python version is the stack's;
- sglang's version, and that kimi_k25.py and server_args.py are where the patch
  and the stand-in expect them (read from the installed files, no import:
  importing sglang needs the whole CUDA stack);
- torch.version.cuda is the stack's CUDA;
- the host's GPU architecture (sm_XY) is in torch.cuda.get_arch_list();
- sgl_kernel and flashinfer import, and flashinfer-python, flashinfer-cubin and
  flashinfer-jit-cache carry the same version (flashinfer refuses to import
  otherwise, and the message it gives is far from the cause).
On a GPU-less host, or where the stack has no CUDA, the checks that cannot run
are recorded under "skipped" with the reason. Exit status 0 only when every
check that ran passed.

**Example:**

.. code:: shell

    venv/bin/python verify_stack.py --stack-id dev-0a24832cc36f --python 3.11 --sglang 0.5.9 --gpu-less
"""

import argparse
import importlib
import importlib.metadata as metadata
import json
import platform
import sys
import time


def version_of(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def public(version):
    """The version without its local label: 0.6.4+cu130 -> 0.6.4."""
    return version.split("+", 1)[0] if version else version


def check_sglang(expected, result):
    found = version_of("sglang")
    result["checks"]["sglang_version"] = {"ok": found == expected, "value": found, "expected": expected}
    if found is None:
        return
    dist = metadata.distribution("sglang")
    for name, member in (("kimi_k25_py", "sglang/srt/models/kimi_k25.py"),
                         ("server_args_py", "sglang/srt/server_args.py")):
        path = dist.locate_file(member)
        # Relative to the venv: the probe runs before the build folder is renamed.
        result["checks"][name] = {"ok": path.is_file(), "value": str(path.relative_to(sys.prefix))}


def check_torch(cuda, gpu_less, result):
    checks, skipped = result["checks"], result["skipped"]
    if cuda is None and version_of("torch") is None:
        skipped.update({"torch_cuda": "stack has no CUDA", "gpu_arch": "stack has no CUDA"})
        return
    try:
        torch = importlib.import_module("torch")
    except Exception as e:  # a broken wheel fails here; say how
        checks["torch_import"] = {"ok": False, "value": f"{type(e).__name__}: {e}"}
        return
    checks["torch_cuda"] = {"ok": torch.version.cuda == cuda, "value": torch.version.cuda, "expected": cuda,
                            "torch": torch.__version__}
    if gpu_less:
        skipped["gpu_arch"] = "GPU-less host"
        return
    if not torch.cuda.is_available():
        checks["gpu_arch"] = {"ok": False, "value": "torch.cuda.is_available() is False"}
        return
    arch_list = torch.cuda.get_arch_list()
    archs = sorted({"sm_%d%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    missing = [a for a in archs if a not in arch_list]
    checks["gpu_arch"] = {"ok": not missing, "value": archs, "arch_list": arch_list,
                          "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}


def check_kernels(cuda, gpu_less, result):
    checks, skipped = result["checks"], result["skipped"]
    versions = {d: version_of(d) for d in ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")}
    if cuda is None and not any(versions.values()) and version_of("sgl-kernel") is None:
        skipped.update({"sgl_kernel_import": "stack has no CUDA", "flashinfer_import": "stack has no CUDA",
                        "flashinfer_versions": "stack has no CUDA"})
        return
    agree = len({public(v) for v in versions.values()}) == 1 and None not in versions.values()
    checks["flashinfer_versions"] = {"ok": agree, "value": versions}
    if gpu_less:
        # sgl_kernel loads libcuda at import; without a driver it cannot.
        skipped.update({"sgl_kernel_import": "GPU-less host", "flashinfer_import": "GPU-less host"})
        return
    for module, key in (("sgl_kernel", "sgl_kernel_import"), ("flashinfer", "flashinfer_import")):
        try:
            imported = importlib.import_module(module)
            checks[key] = {"ok": True, "value": getattr(imported, "__version__", None)}
        except Exception as e:
            checks[key] = {"ok": False, "value": f"{type(e).__name__}: {e}"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack-id", required=True)
    parser.add_argument("--python", required=True, help="expected major.minor, e.g. 3.11")
    parser.add_argument("--sglang", help="expected sglang version")
    parser.add_argument("--cuda", help="expected torch.version.cuda; absent for a GPU-less stack")
    parser.add_argument("--gpu-less", action="store_true")
    args = parser.parse_args(argv)

    found_python = "%d.%d" % sys.version_info[:2]
    result = {
        "stack_id": args.stack_id,
        "python": platform.python_version(),
        "checks": {"python": {"ok": found_python == args.python, "value": found_python, "expected": args.python}},
        "skipped": {},
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if args.sglang:
        check_sglang(args.sglang, result)
    check_torch(args.cuda, args.gpu_less, result)
    check_kernels(args.cuda, args.gpu_less, result)
    result["ok"] = all(check["ok"] for check in result["checks"].values())
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
