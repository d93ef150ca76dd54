"""Verify a freshly built stack from inside its venv; print the result as JSON.

Run with the new venv's python (standard library, plus what the venv has). Checks:
- the Python version is the stack's;
- sglang's version, and that kimi_k25.py and server_args.py are where the patch
  and the stand-in expect them (read from the installed files, no import:
  importing sglang needs the whole CUDA stack);
- every locked wheel is installed with the version its METADATA carries equal to
  the one in its file name, once, and nothing else is installed (``--wheels``);
- the venv holds one CUDA runtime major, the stack's: no libcudart.so.12 beside
  libcudart.so.13, no ``*-cu12`` distribution beside ``*-cu13`` ones, no kernel
  library that needs another libcudart;
- torch imports and torch.version.cuda is the stack's CUDA; torch's arch list
  covers the stack's compute capabilities (read without a GPU too);
- the kernel library (sgl_kernel, from sgl-kernel or sglang-kernel) carries a
  cubin for each of the stack's compute capabilities in the common_ops library
  it loads on such a GPU: read from the ELF fatbins of its .so files, so a
  GPU-less build catches the wheel that would fail with "no kernel image is
  available" on an RTX PRO 6000;
- flashinfer-python, flashinfer-cubin and flashinfer-jit-cache, those installed,
  carry the same version (flashinfer refuses to import otherwise, with a
  message far from the cause);
- with a GPU (not ``--gpu-less``): the host's GPU architecture is in torch's arch
  list, a torch CUDA op runs, sgl_kernel loads its ops and runs one small kernel
  against a torch reference, flashinfer imports. The two common failures,
  "Could not load any common_ops" and "no kernel image is available", are
  reported with their cause and fix.
- with a GPU, for each ``--backend`` (the transfer backend of a PD service on the host): its
  module imports as sglang imports it (``mooncake.engine``, ``nixl._api``), one line on failure.
Checks that cannot run (GPU-less host, a stack without CUDA) are recorded under
"skipped" with the reason. Exit status 0 only when every check that ran passed.

``verify_stack.py --records [PATH...]`` is the full content check of a built
venv, run on request (``verify_stacks = "full"``): every file a wheel installed
against its RECORD hash but the PATHs given (the patched file), one
``changed <path>`` or ``missing <path>`` line per problem.

**Example:**

.. code:: shell

    venv/bin/python verify_stack.py --stack-id cu130-sglang-0.5.23-5c69cec71fa5 --python 3.11 \\
        --sglang 0.5.23 --cuda 13.0 --compute-caps 12.0,10.0,9.0 --wheels wheels.txt \\
        --not-installed uv --gpu-less
"""

import argparse
import base64
import csv
import glob
import hashlib
import importlib
import importlib.metadata as metadata
import importlib.util
import json
import os
import platform
import re
import struct
import sys
import sysconfig
import time

KERNEL_MODULE = "sgl_kernel"  # imported name of both sgl-kernel and sglang-kernel
# The module sglang imports for each PD transfer backend; sglfleet.plan.pd.BACKEND_MODULES (held equal by
# test_probe): this file runs alone in the venv.
BACKEND_MODULES = {"mooncake": "mooncake.engine", "nixl": "nixl._api"}
# The system libraries the backends' wheels load but do not carry (mooncake/engine.so's NEEDED), by the
# Debian/Ubuntu package that has them.
SYSTEM_LIBRARIES = {"libibverbs.so": "libibverbs1", "libmlx5.so": "ibverbs-providers", "libnuma.so": "libnuma1",
                    "libcurl.so": "libcurl4", "libcuda.so": "the NVIDIA driver"}


def version_of(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def public(version):
    """The version without its local label: 0.6.4+cu130 -> 0.6.4."""
    return version.split("+", 1)[0] if version else version


def normalize(name):
    """PEP 503 name: Flash_Infer.python -> flash-infer-python."""
    return re.sub(r"[-_.]+", "-", name).lower()


# --------------------------------------------------------------------------
# ELF and CUDA fatbins, read without CUDA
# --------------------------------------------------------------------------

FATBIN_MAGIC = 0xBA55ED50
FATBIN_PTX, FATBIN_CUBIN = 1, 2
# Entry flags, as nvcc 13 writes them (checked against -gencode sm_90/90a/100f/120a builds):
FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a: runs on exactly that capability
FLAG_FAMILY = 0x200000  # sm_100f: runs on the family (same major, same or higher minor)


def elf_sections(f):
    """{section name: (file offset, size)} of a 64-bit little-endian ELF file."""
    f.seek(0)
    ident = f.read(64)
    if len(ident) < 64 or ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", ident, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    headers = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
    f.seek(headers[shstrndx][4])
    names = f.read(headers[shstrndx][5])
    out = {}
    for h in headers:
        end = names.index(b"\0", h[0])
        out[names[h[0]:end].decode("ascii", "replace")] = (h[4], h[5])
    return out


def elf_needed(path):
    """The DT_NEEDED entries (libraries the dynamic linker loads) of an ELF file."""
    with open(path, "rb") as f:
        sections = elf_sections(f)
        if ".dynamic" not in sections or ".dynstr" not in sections:
            return []
        f.seek(sections[".dynstr"][0])
        strings = f.read(sections[".dynstr"][1])
        f.seek(sections[".dynamic"][0])
        dynamic = f.read(sections[".dynamic"][1])
    needed = []
    for tag, value in struct.iter_unpack("<qQ", dynamic[: len(dynamic) // 16 * 16]):
        if tag == 0:
            break
        if tag == 1:  # DT_NEEDED
            needed.append(strings[value:strings.index(b"\0", value)].decode("ascii", "replace"))
    return needed


def fatbin_entries(path):
    """
    ``(kind, arch, variant)`` of every entry in the ELF's embedded CUDA fatbins.

    kind is "cubin" (machine code) or "ptx"; arch is e.g. 120 for sm_120;
    variant is "a" (arch-specific), "f" (family) or "". Only entry headers are
    read, never the payloads: a 1 GB library costs a few thousand small reads.
    """
    entries = set()
    with open(path, "rb") as f:
        section = elf_sections(f).get(".nv_fatbin")
        if section is None:
            return entries
        pos, end = section
        end += pos
        while pos + 16 <= end:
            f.seek(pos)
            magic, _version, header_size, fat_size = struct.unpack("<IHHQ", f.read(16))
            if magic != FATBIN_MAGIC:
                pos += 8  # fatbins are 8-byte aligned; skip padding between them
                continue
            entry, stop = pos + header_size, min(pos + header_size + fat_size, end)
            while entry + 48 <= stop:
                f.seek(entry)
                header = f.read(48)
                kind, _, entry_header, payload = struct.unpack_from("<HHIQ", header, 0)
                (arch,) = struct.unpack_from("<I", header, 28)
                (flags,) = struct.unpack_from("<Q", header, 40)
                if entry_header == 0:
                    break
                if kind in (FATBIN_PTX, FATBIN_CUBIN):
                    variant = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
                    entries.add(("cubin" if kind == FATBIN_CUBIN else "ptx", arch, variant))
                entry += entry_header + payload
            pos = max(stop, pos + 8)
    return entries


def sm_name(arch, variant=""):
    return "sm_%d%s" % (arch, variant)


def capability(cc):
    """'12.0' -> (12, 0)."""
    major, minor = cc.split(".")
    return int(major), int(minor)


def runs_on(arch, variant, cc):
    """Whether a cubin for sm_<arch><variant> runs on a GPU of compute capability ``cc``."""
    major, minor = capability(cc)
    if arch // 10 != major:
        return False
    if variant == "a":
        return arch % 10 == minor
    return arch % 10 <= minor  # plain and family cubins run on later minors of their major


def arch_list_covers(arch_list, cc):
    """Whether torch's arch list (sm_90, sm_100a, compute_120, ...) has machine code for ``cc``."""
    for entry in arch_list:
        match = re.fullmatch(r"sm_(\d+)([af]?)", entry)
        if match and runs_on(int(match.group(1)), match.group(2), cc):
            return True
    return False


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------


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


def wheel_name_version(filename):
    """``torch-2.9.1+cu130-cp311-...whl`` -> ("torch", "2.9.1+cu130") (PEP 427 file names)."""
    name, version = filename.split("-")[:2]
    return normalize(name), version


def check_dist_versions(wheels_file, not_installed, result):
    """Each locked wheel installed once, its METADATA version equal to its file name's; nothing more."""
    with open(wheels_file) as f:
        wanted = dict(wheel_name_version(line.strip()) for line in f if line.strip().endswith(".whl"))
    for name in not_installed:
        wanted.pop(normalize(name), None)
    installed = {}
    for dist in metadata.distributions(path=[p for p in sys.path if p.startswith(sys.prefix)]):
        installed.setdefault(normalize(dist.metadata["Name"] or "?"), []).append(dist.version)
    wrong = {name: {"metadata": installed.get(name), "wheel": version}
             for name, version in wanted.items()
             if [v.lower() for v in installed.get(name, [])] != [version.lower()]}
    extra = sorted(set(installed) - set(wanted))
    result["checks"]["dist_versions"] = {"ok": not wrong and not extra, "value": len(wanted),
                                         "mismatched": wrong, "not_in_lock": extra}


def cuda_majors_in_venv(kernel_dir=None):
    """{major: [where seen]} of the CUDA runtimes the venv holds or its kernel library needs."""
    seen = {}
    for site in [p for p in sys.path if p.startswith(sys.prefix) and os.path.isdir(p)]:
        for path in glob.glob(os.path.join(site, "**", "libcudart.so.*"), recursive=True):
            match = re.search(r"libcudart\.so\.(\d+)", os.path.basename(path))
            if match:
                seen.setdefault(int(match.group(1)), []).append(os.path.relpath(path, sys.prefix))
    for dist in metadata.distributions(path=[p for p in sys.path if p.startswith(sys.prefix)]):
        name = normalize(dist.metadata["Name"] or "")
        # nvidia-cudnn-cu13, nvshmem4py-cu13, cupy-cuda12x; torch 2.9.1+cu130.
        match = re.search(r"-cu(?:da)?(\d{2})x?$", name) or re.search(r"\+cu(\d{2})\d$", dist.version)
        if match:
            seen.setdefault(int(match.group(1)), []).append(f"{name} {dist.version}")
    for path in sorted(glob.glob(os.path.join(kernel_dir, "**", "*.so"), recursive=True)) if kernel_dir else ():
        for lib in elf_needed(path):
            match = re.fullmatch(r"libcudart\.so\.(\d+)", lib)
            if match:
                seen.setdefault(int(match.group(1)), []).append(f"{os.path.relpath(path, kernel_dir)} needs {lib}")
    return seen


def check_cuda_runtime(cuda, kernel_dir, result):
    seen = cuda_majors_in_venv(kernel_dir)
    if cuda is None and not seen:
        result["skipped"]["cuda_runtime"] = "stack has no CUDA"
        return
    expected = {int(cuda.split(".")[0])} if cuda else set(seen)
    ok = set(seen) == expected and len(expected) == 1
    result["checks"]["cuda_runtime"] = {"ok": ok, "value": sorted(seen), "expected": sorted(expected),
                                        "seen": {str(k): v[:5] for k, v in seen.items()}}


def import_torch(result):
    try:
        return importlib.import_module("torch")
    except Exception as e:  # a broken wheel fails here; say how
        result["checks"]["torch_import"] = {"ok": False, "value": f"{type(e).__name__}: {e}"}
        return None


def torch_arch_list(torch):
    """torch's compiled arch list; get_arch_list() is empty without a GPU, the flags are not."""
    if torch.cuda.is_available():
        return list(torch.cuda.get_arch_list())
    flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
    return flags.split() if flags else []


def check_torch(torch, cuda, compute_caps, result):
    checks = result["checks"]
    checks["torch_cuda"] = {"ok": torch.version.cuda == cuda, "value": torch.version.cuda, "expected": cuda,
                            "torch": torch.__version__}
    if compute_caps:
        arch_list = torch_arch_list(torch)
        missing = [cc for cc in compute_caps if not arch_list_covers(arch_list, cc)]
        checks["torch_arch_list"] = {"ok": not missing, "value": arch_list, "expected": compute_caps,
                                     "missing": missing}


def common_ops_for(kernel_dir, cc):
    """The common_ops library sgl_kernel loads on a GPU of ``cc`` (sglang-kernel 0.4: sm90/ on
    9.0, sm100/ on any other; older sgl-kernel: one library in the package folder)."""
    subdir = "sm90" if cc == "9.0" else "sm100"
    for pattern in (os.path.join(kernel_dir, subdir, "common_ops.*.so"), os.path.join(kernel_dir, "common_ops.*.so")):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def check_kernel_cubins(kernel_dir, compute_caps, result):
    libraries = {}
    for path in sorted(glob.glob(os.path.join(kernel_dir, "**", "*.so"), recursive=True)):
        cubins = sorted({(a, v) for kind, a, v in fatbin_entries(path) if kind == "cubin"})
        if cubins:
            libraries[os.path.relpath(path, kernel_dir)] = cubins
    problems = []
    for cc in compute_caps:
        library = common_ops_for(kernel_dir, cc)
        if library is None:
            problems.append(f"no common_ops library for {cc}")
            continue
        cubins = libraries.get(os.path.relpath(library, kernel_dir), [])
        if not any(runs_on(a, v, cc) for a, v in cubins):
            problems.append(
                f"{KERNEL_MODULE}/{os.path.relpath(library, kernel_dir)} has no cubin for compute capability {cc} "
                f"(it has {', '.join(sm_name(a, v) for a, v in cubins) or 'none'}): its kernels fail with "
                f"'no kernel image is available' there; use a kernel wheel built for sm_{cc.replace('.', '')}")
    result["checks"]["kernel_cubins"] = {
        "ok": not problems, "expected": list(compute_caps), "problems": problems,
        "value": {lib: [sm_name(a, v) for a, v in cubins] for lib, cubins in libraries.items()}}


def check_flashinfer_versions(cuda, result):
    versions = {d: version_of(d) for d in ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")}
    installed = {d: v for d, v in versions.items() if v}
    if cuda is None and not installed:
        result["skipped"]["flashinfer_versions"] = "stack has no CUDA"
        return
    agree = "flashinfer-python" in installed and len({public(v) for v in installed.values()}) == 1
    result["checks"]["flashinfer_versions"] = {"ok": agree, "value": versions}
    if installed and "flashinfer-cubin" not in installed and "flashinfer-jit-cache" not in installed:
        result["info"]["flashinfer"] = ("no flashinfer-cubin or flashinfer-jit-cache: flashinfer compiles its kernels "
                                        "on first use and downloads its prebuilt cubins at run time")


def explain(error, torch):
    """One line for the two failures users hit, with the cause and the fix; the error itself otherwise."""
    text = f"{type(error).__name__}: {error}"
    if "Could not load any common_ops" in text:
        # sgl_kernel lists each attempt's error after this heading; the first names the cause
        # (an undefined torch symbol, a missing libcudart.so.N).
        detail = " ".join(text.partition("Error details from previous import attempts:")[2].split())[:400]
        return (f"sgl_kernel could not load any common_ops library: its build does not match torch "
                f"{torch.__version__} (CUDA {torch.version.cuda}) or the CUDA runtime in this venv ({detail}); "
                f"install the kernel wheel built for this torch")
    if "no kernel image is available" in text:
        return ("no kernel image is available for this GPU: the wheel carries no cubin for its architecture; "
                "use a build that includes it (see kernel_cubins)")
    return " ".join(text.split())[:500]


def check_backends(backends, result):
    """Each PD transfer backend imports as sglang imports it: one line naming the cause and fix otherwise."""
    for backend in backends:
        module = BACKEND_MODULES.get(backend)
        name = f"backend_{backend}"
        if module is None:
            result["checks"][name] = {"ok": False, "value": f"unknown transfer backend {backend!r}"}
            continue
        try:
            importlib.import_module(module)
            result["checks"][name] = {"ok": True, "value": module}
        except Exception as e:
            result["checks"][name] = {"ok": False, "value": backend_failure(backend, module, e)}


def backend_failure(backend, module, error):
    """One line: which backend, the import's error, and the fix (a missing system library, or the wheel)."""
    text = " ".join(f"{type(error).__name__}: {error}".split())[:400]
    missing = next((package for library, package in SYSTEM_LIBRARIES.items() if library in text), None)
    if missing and "cannot open shared object file" in text:
        fix = f"install {missing} on the host (apt install {missing})" if " " not in missing else f"install {missing}"
    elif isinstance(error, ModuleNotFoundError):
        fix = "the stack's lock lacks its wheel: add it to the stack and re-lock"
    else:
        fix = "see the error"
    return f"the {backend} transfer backend does not import ({module}): {text}; {fix}"


def check_gpu(torch, result):
    """On a GPU host: architecture in torch's list, a torch op, sgl_kernel's ops and one kernel, flashinfer."""
    checks = result["checks"]
    if not torch.cuda.is_available():
        checks["gpu_arch"] = {"ok": False, "value": "torch.cuda.is_available() is False"}
        return
    arch_list = torch.cuda.get_arch_list()
    caps = sorted({"%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    missing = [cc for cc in caps if not arch_list_covers(arch_list, cc)]
    checks["gpu_arch"] = {"ok": not missing, "value": ["sm_" + cc.replace(".", "") for cc in caps],
                          "arch_list": arch_list,
                          "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}
    try:
        value = float((torch.ones(1024, device="cuda") * 2).sum().item())
        checks["torch_kernel"] = {"ok": value == 2048.0, "value": value}
    except Exception as e:
        checks["torch_kernel"] = {"ok": False, "value": explain(e, torch)}
    try:
        kernel = importlib.import_module(KERNEL_MODULE)
        checks["sgl_kernel_import"] = {"ok": True, "value": getattr(kernel, "__version__", None)}
    except Exception as e:
        checks["sgl_kernel_import"] = {"ok": False, "value": explain(e, torch)}
        kernel = None
    if kernel is not None:
        try:
            x = torch.randn(8, 256, device="cuda", dtype=torch.float16)
            out = kernel.silu_and_mul(x)
            reference = torch.nn.functional.silu(x[:, :128]) * x[:, 128:]
            torch.cuda.synchronize()
            error = float((out.float() - reference.float()).abs().max().item())
            checks["sgl_kernel_run"] = {"ok": error < 1e-2, "value": "silu_and_mul", "max_abs_error": error}
        except Exception as e:
            checks["sgl_kernel_run"] = {"ok": False, "value": explain(e, torch)}
    try:
        flashinfer = importlib.import_module("flashinfer")
        checks["flashinfer_import"] = {"ok": True, "value": getattr(flashinfer, "__version__", None)}
    except Exception as e:
        checks["flashinfer_import"] = {"ok": False, "value": explain(e, torch)}


def record_problems(site_packages: str, skip: tuple = ()) -> list[str]:
    """
    Every file a wheel installed whose bytes no longer match its RECORD hash, or
    that is gone: ``changed <path>`` / ``missing <path>`` (the full content check).
    ``skip``: paths (as RECORD writes them) checked elsewhere, e.g. a patched file.
    """
    problems = []
    for record in sorted(glob.glob(os.path.join(site_packages, "*.dist-info", "RECORD"))):
        with open(record, newline="") as handle:
            for row in csv.reader(handle):
                if len(row) < 2 or not row[1].startswith("sha256=") or row[0] in skip:
                    continue  # RECORD itself, files a wheel lists without a hash, files patched on purpose
                path = os.path.normpath(os.path.join(site_packages, row[0]))
                try:
                    with open(path, "rb") as installed:
                        digest = hashlib.sha256(installed.read()).digest()
                except OSError:
                    problems.append(f"missing {row[0]}")
                    continue
                if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != row[1][len("sha256="):]:
                    problems.append(f"changed {row[0]}")
    return problems


def main(argv=None):
    if (sys.argv[1:] if argv is None else argv)[:1] == ["--records"]:
        # The full content check of an installed venv: every RECORD hash, one line per problem.
        problems = record_problems(sysconfig.get_paths()["purelib"], tuple((sys.argv[2:] if argv is None else argv[1:])))
        print("\n".join(problems))
        return 1 if problems else 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack-id", required=True)
    parser.add_argument("--python", required=True, help="expected major.minor, e.g. 3.11")
    parser.add_argument("--sglang", help="expected sglang version")
    parser.add_argument("--cuda", help="expected torch.version.cuda; absent for a GPU-less stack")
    parser.add_argument("--compute-caps", default="", help="the stack's compute capabilities, e.g. 12.0,10.0,9.0")
    parser.add_argument("--wheels", help="the stack's wheel file names, one a line (wheels.txt)")
    parser.add_argument("--not-installed", action="append", default=[],
                        help="a locked package that is not installed in the venv (uv)")
    parser.add_argument("--gpu-less", action="store_true")
    parser.add_argument("--backend", action="append", default=[],
                        help="a PD service's transfer backend on the host (mooncake, nixl), imported with a GPU")
    args = parser.parse_args(argv)
    compute_caps = [cc for cc in args.compute_caps.split(",") if cc]

    found_python = "%d.%d" % sys.version_info[:2]
    result = {
        "stack_id": args.stack_id,
        "python": platform.python_version(),
        "checks": {"python": {"ok": found_python == args.python, "value": found_python, "expected": args.python}},
        "skipped": {},
        "info": {},
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    checks, skipped = result["checks"], result["skipped"]
    if args.sglang:
        check_sglang(args.sglang, result)
    if args.wheels:
        check_dist_versions(args.wheels, args.not_installed, result)
    spec = importlib.util.find_spec(KERNEL_MODULE)  # locates the package, imports nothing
    kernel_dir = os.path.dirname(spec.origin) if spec and spec.origin else None
    check_cuda_runtime(args.cuda, kernel_dir, result)

    torch = None
    if args.cuda is None and version_of("torch") is None:
        skipped.update({"torch_cuda": "stack has no CUDA", "gpu_arch": "stack has no CUDA"})
    else:
        torch = import_torch(result)
        if torch is not None:
            check_torch(torch, args.cuda, compute_caps, result)
    if kernel_dir and compute_caps:
        check_kernel_cubins(kernel_dir, compute_caps, result)
    elif args.cuda:
        checks["kernel_cubins"] = {"ok": False, "value": f"{KERNEL_MODULE} is not installed"}
    else:
        skipped["kernel_cubins"] = "stack has no CUDA"
    check_flashinfer_versions(args.cuda, result)

    if args.gpu_less or torch is None:
        reason = "GPU-less host" if args.gpu_less else ("stack has no CUDA" if args.cuda is None else "torch failed")
        # sgl_kernel loads libcuda at import; without a driver it cannot.
        for name in ("gpu_arch", "torch_kernel", "sgl_kernel_import", "sgl_kernel_run", "flashinfer_import",
                     *(f"backend_{backend}" for backend in args.backend)):
            skipped.setdefault(name, reason)
    else:
        check_gpu(torch, result)
        # Their libraries need libcuda and the host's rdma-core: only a GPU host loads them.
        check_backends(args.backend, result)
    result["ok"] = all(check["ok"] for check in checks.values())
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
