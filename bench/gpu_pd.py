"""
Two records on one GPU, from one start of three real sglang servers of the tiny Llama
(``gpu_acceptance.write_models``, random weights):

1. **Prefill and decode** (issue 31, item 7): a ``--disaggregation-mode prefill`` and a
   ``--disaggregation-mode decode`` server, ``--disaggregation-transfer-backend nixl``, each
   its own port (the prefill its own ``--disaggregation-bootstrap-port``), behind
   sglang-router 0.3.2's PD load balancer (``launch_router --mini-lb --pd-disaggregation``).
   Recorded: the flags, requests through the balancer (``/generate``, streamed and not,
   ``/v1/completions``), each role asked directly without bootstrap fields, the
   prefill's bootstrap server (``/health``, ``/route``), each role's log lines.
2. **A patch set on 0.5.14** (issue 33, item 7): ``api_key_not_logged_annotated``
   applied by sglfleet's own engine (``patchsets.apply_sets``, one rename, as
   ``operations/patch.patch_sets`` writes it) to a copy of the site's
   ``sglang/srt/server_args.py`` (the site hard-linked, the patched file a new inode),
   then a server started from that copy with ``--api-key``: it serves, and its
   logged ``ServerArgs`` line is kept.

The carry (``prepare``): the nixl 1.5.1 wheels (``nixl`` and ``nixl-cu13``) cut to what
the UCX plugin loads (``NIXL_KEEP``: the bindings, ``libnixl``, the UCX plugin, UCX and
what they link; 7.7 MB as xz), and sglang-router 0.3.2's Python files without its 92 MB
Rust extension: ``router_args`` imports one function from it
(``get_available_tool_call_parsers``, the choices of ``--tool-call-parser``), which a
stub module answers with an empty list; ``--mini-lb`` never reaches the Rust router.

**Example** (the run of ``tests/data/gpu/pd-h200-sglang-0.5.14.json``; carry [".whl", ".gpucarry"],
timeout_s 600, 166 s on a warm machine):

.. code:: shell

    # here: the wheels (pip download --no-deps: nixl==1.5.1 nixl-cu13==1.5.1 sglang-router==0.3.2) in /tmp/pdw
    .venv/bin/python bench/gpu_pd.py prepare --wheels /tmp/pdw --into .gpucarry
    mkdir -p .gpucarry/repo && git ls-files bench sglfleet files inventory pyproject.toml | tar -cf - -T - | tar -xf - -C .gpucarry/repo
    # there
    set -o pipefail; mkdir -p /tmp/site /tmp/nixl && tar -xJf .whl/sglang-0.5.14-site.tar.xz -C /tmp/site &&
      tar -xJf .gpucarry/nixl-cu13-1.5.1-ucx.tar.xz -C /tmp/nixl && cd .gpucarry/repo && R=$(cd ../router && pwd) &&
      PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 530 python3 bench/gpu_pd.py run --site /tmp/site \\
      --nixl /tmp/nixl --router $R --out $OUT --budget-s 520 2>&1 | tee -a $OUT/bench.log

    # a rehearsal without a GPU: each server a stand-in that answers the routes asked
    .venv/bin/python bench/gpu_pd.py run --fake --site /tmp/site14 --router .gpucarry/router --out /tmp/pd
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))
sys.path.insert(0, str(PROJECT_ROOT / "bench"))

import gpu_acceptance as acceptance  # noqa: E402

PROMPT = "The capital of France is"
MAX_NEW = 16
PORTS = {"prefill": 30100, "decode": 30200, "patched": 30300, "lb": 30000}
BOOTSTRAP_PORT = 8998
API_KEY = "sk-gpu-pd-patch"  # a throwaway key, on loopback, for a server that lives as long as the run
SERVER_ARGS_FILE = "sglang/srt/server_args.py"
# Each server shares the GPU: a fraction of what is free at its profiling, the KV pool capped;
# no CUDA graphs (what is recorded is the PD hand-over and the start, not decode speed).
SHARED_FLAGS = (*acceptance.TINY_MODEL_FLAGS, "--mem-fraction-static", "0.3", "--max-total-tokens", "16384",
                "--disable-cuda-graph", "--host", "127.0.0.1")
ROLE_FLAGS = {
    "prefill": ("--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl",
                "--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT), "--log-requests", "--enable-metrics"),
    "decode": ("--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl",
               "--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT + 1), "--log-requests",
               "--decode-log-interval", "1", "--enable-metrics"),
    "patched": ("--api-key", API_KEY),
}
# What the UCX plugin of nixl-cu13 1.5.1 loads (readelf's NEEDED, closed over the wheel's libraries).
NIXL_ROOTS = ("nixl_cu13/_bindings.cpython-312-x86_64-linux-gnu.so", "nixl_cu13/_utils.cpython-312-x86_64-linux-gnu.so",
              "nixl_cu13.libs/nixl/libplugin_UCX.so", ".nixl_cu13.mesonpy.libs/plugins/libplugin_UCX.so",
              "nixl_cu13.libs/ucx/libuct_cma.so.0.0.0", "nixl_cu13.libs/ucx/libuct_cuda.so.0.0.0",
              "nixl_cu13.libs/ucx/libucm_cuda.so.0.0.0")
LOG_PATTERNS = re.compile(r"bootstrap|nixl|NIXL|UCX|transfer|disagg|Disagg|Prefill batch|Decode batch|"
                          r"KV|kv_|Receive:|Finish:|server_args=|Uvicorn running|ready to roll|"
                          r"Error|error|Traceback|SIGTERM|Gracefully|Exception")


def log(message: str) -> None:
    print(f"[gpu-pd {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the carry -------------------------------------------------------------------------


def needed_closure(root: Path, roots) -> list[str]:
    """The wheel's files that ``roots`` load, following readelf's NEEDED through the wheel's library folders."""
    folders = [".nixl_cu13.mesonpy.libs", "nixl_cu13.libs", "nixl_cu13.libs/ucx", "nixl_cu13.libs/nixl"]
    index = {}
    for folder in folders:
        for name in os.listdir(root / folder):
            index.setdefault(name, f"{folder}/{name}")
    seen, todo = set(), list(roots)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        dynamic = subprocess.run(["readelf", "-d", str(root / path)], capture_output=True, text=True).stdout
        todo += [index[name] for name in re.findall(r"NEEDED.*\[(.*)\]", dynamic) if name in index]
    return sorted(seen)


def prepare(wheels: Path, into: Path) -> None:
    """nixl cut to its UCX plugin, and sglang-router's Python files with a stub for its Rust module, into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    unpacked = into / "nixl-unpacked"
    shutil.rmtree(unpacked, ignore_errors=True)
    for wheel in sorted(wheels.glob("nixl*-1.5.1-*.whl")):
        zipfile.ZipFile(wheel).extractall(unpacked)
    keep = needed_closure(unpacked, NIXL_ROOTS)
    keep += [str(p.relative_to(unpacked)) for p in unpacked.rglob("*")
             if p.is_file() and (p.suffix in (".py", ".typed") or ".dist-info/" in str(p))
             and not str(p.relative_to(unpacked)).startswith(("nixl_ep", "nixl_cu13.scripts"))]
    archive = into / "nixl-cu13-1.5.1-ucx.tar.xz"
    subprocess.run(["tar", "-cJf", str(archive), "-C", str(unpacked), *sorted(set(keep))], check=True,
                   env={**os.environ, "XZ_OPT": "-9 -T0"})
    shutil.rmtree(unpacked)
    router = into / "router"
    shutil.rmtree(router, ignore_errors=True)
    (wheel,) = wheels.glob("sglang_router-0.3.2-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.endswith(".py") or name.startswith("sglang_router-0.3.2.dist-info/"):
                zf.extract(name, router)
    (router / "sglang_router" / "sglang_router_rs.py").write_text(
        '"""Stub for sglang-router 0.3.2\'s Rust extension (not carried): router_args reads the tool-call\n'
        'parsers for --tool-call-parser\'s choices; --mini-lb never reaches the Rust router."""\n\n\n'
        "def get_available_tool_call_parsers():\n    return []\n")
    log(f"prepared {archive} ({archive.stat().st_size} bytes) and {router}")


# --- HTTP ------------------------------------------------------------------------------


def http(method: str, url: str, body=None, key: str | None = None, timeout: float = 60.0) -> dict:
    """One request; its status, headers, body (parsed where JSON) and time, or the error."""
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    started = time.monotonic()
    answer = {"method": method, "url": url, "body_sent": body, "auth": bool(key)}
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, headers, raw = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, headers, raw = error.code, error.headers, error.read()
    except (OSError, urllib.error.URLError) as error:
        answer.update(error=f"{type(error).__name__}: {error}", seconds=round(time.monotonic() - started, 3))
        return answer
    text = raw.decode("utf-8", errors="replace")
    answer.update(status=status, content_type=headers.get("content-type"), seconds=round(time.monotonic() - started, 3))
    try:
        answer["json"] = json.loads(text)
    except ValueError:
        answer["text"] = text[:4000]
    return answer


def wait_health(url: str, deadline: float, proc: subprocess.Popen) -> dict:
    """Poll ``/health`` until 200, the process ends, or the deadline; the states seen, in order."""
    seen, started = [], time.monotonic()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return {"ready": False, "exit": proc.returncode, "states": seen}
        answer = http("GET", f"{url}/health", timeout=5)
        state = answer.get("status", "refused")
        if not seen or seen[-1][0] != state:
            seen.append([state, round(time.monotonic() - started, 2)])
        if state == 200:
            return {"ready": True, "states": seen, "seconds": round(time.monotonic() - started, 2)}
        time.sleep(0.5)
    return {"ready": False, "timeout": True, "states": seen}


# --- the servers -----------------------------------------------------------------------


def lib_path() -> str:
    """The folders of the CUDA runtime that nixl's UCX CUDA module links (torch's nvidia wheels), if any."""
    found = {os.path.dirname(p) for p in glob.glob(os.path.join(os.path.dirname(os.__file__), "..", "**",
                                                                   "libcudart.so.13*"), recursive=True)}
    found |= {os.path.dirname(p) for path in sys.path if path
              for p in glob.glob(os.path.join(path, "nvidia", "**", "libcudart.so.13*"), recursive=True)}
    return ":".join(sorted(os.path.realpath(f) for f in found))


def start(name: str, argv: list[str], pythonpath: str, out: Path, extra_env=None) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    log_path = out / f"{name}.log"
    handle = open(log_path, "w")
    proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log(f"{name}: pid {proc.pid}: {' '.join(argv)}")
    return {"name": name, "proc": proc, "log": log_path, "argv": argv, "started": time.monotonic(),
            "pythonpath": pythonpath}


def stop(server: dict, timeout_s: float = 20.0) -> dict:
    proc = server["proc"]
    if proc.poll() is not None:
        return {"exit": proc.returncode, "already_ended": True}
    began = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
        killed = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed = True
    return {"exit": proc.returncode, "seconds": round(time.monotonic() - began, 2), "sigkill": killed}


def log_lines(path: Path, limit: int = 200) -> list[str]:
    """The log's lines about bootstrap, transfer, batches, requests and errors (the first ``limit``)."""
    if not path.exists():
        return []
    lines = [line.rstrip()[:1500] for line in path.read_text(errors="replace").splitlines() if LOG_PATTERNS.search(line)]
    return lines[:limit]


def server_args_line(path: Path) -> str | None:
    for line in path.read_text(errors="replace").splitlines() if path.exists() else ():
        if "server_args=ServerArgs(" in line:
            return line
    return None


def patch_copy(site: Path, patched: Path) -> dict:
    """The site hard-linked into ``patched``, and its server_args.py replaced, by one rename, by sglfleet's patch sets for 0.5.14."""
    from sglfleet.artifacts import patchsets
    from sglfleet.artifacts.patcher import unified_diff

    if patched.exists():
        shutil.rmtree(patched)
    subprocess.run(["cp", "-al", str(site), str(patched)], check=True)
    path = patched / SERVER_ARGS_FILE
    source = path.read_bytes()
    sets = patchsets.for_file(patchsets.load_sets(), acceptance.SGLANG, SERVER_ARGS_FILE)
    new, outcomes = patchsets.apply_sets(source, sets)
    temporary = path.with_name(path.name + ".sglfleet-tmp")
    temporary.write_bytes(new)
    os.replace(temporary, path)  # a new inode: the hard-linked original stays as the wheel has it
    again, _ = patchsets.apply_sets(path.read_bytes(), sets)
    return {"file": SERVER_ARGS_FILE, "sets": [s.name for s in sets],
            "outcomes": {s.name: outcome for s, outcome in outcomes},
            "sha256_wheel": hashlib.sha256(source).hexdigest(),
            "sha256_site_original_after": hashlib.sha256((site / SERVER_ARGS_FILE).read_bytes()).hexdigest(),
            "sha256_patched": hashlib.sha256(new).hexdigest(),
            "second_apply_unchanged": again == new,
            "verify_failures": {s.name: s.verify.failures(new, s.target, s.function) for s in sets},
            "diff": unified_diff(source, new, SERVER_ARGS_FILE)}


FAKE = '''
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1]); role = sys.argv[sys.argv.index("--role") + 1]
print("server_args=ServerArgs(fake=True, role=%r)" % role, flush=True)
class H(BaseHTTPRequestHandler):
    def _send(self, status, body):
        raw = json.dumps(body).encode(); self.send_response(status)
        self.send_header("Content-Type", "application/json"); self.send_header("Content-Length", str(len(raw)))
        self.end_headers(); self.wfile.write(raw)
    def do_GET(self):
        self._send(200, {"role": role, "path": self.path})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        print("Receive: " + json.dumps(body), flush=True)
        if role == "decode" and "bootstrap_room" not in body:
            return self._send(400, {"error": "no bootstrap fields"})
        self._send(200, {"text": " w1", "meta_info": {"role": role}})
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def server_argv(name: str, model: Path, fake: bool) -> list[str]:
    if fake:
        return [sys.executable, "-c", FAKE, "--port", str(PORTS[name]), "--role", name]
    return [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model),
            "--served-model-name", "tiny-llama", "--port", str(PORTS[name]), *SHARED_FLAGS, *ROLE_FLAGS[name]]


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    deadline = began + args.budget_s
    transcript = acceptance.Transcript(out / "pd.json")
    patch_record = acceptance.Transcript(out / "patch.json")
    date = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    versions = acceptance.versions(args.site)
    for name in ("nixl", "nixl-cu13", "sglang-router"):
        try:
            from importlib import metadata
            versions[name] = next(iter(metadata.distributions(name=name, path=[args.nixl or "", args.router]))).version
        except StopIteration:
            versions[name] = None
    transcript.save(date=date, versions=versions, prompt=PROMPT, max_new_tokens=MAX_NEW)
    patch_record.save(date=date, versions=versions)

    model, _draft = acceptance.write_models(Path("/tmp/gpu-pd-models"))
    patch_record.save(patch=patch_copy(Path(args.site), Path("/tmp/site-patched")))
    log(f"patched: {patch_record['patch']['outcomes']}")

    cuda_libs = lib_path()
    pd_path = ":".join(p for p in (args.nixl, args.site) if p)
    pd_env = {"LD_LIBRARY_PATH": ":".join(p for p in (cuda_libs, os.environ.get("LD_LIBRARY_PATH")) if p)}
    servers = {
        "prefill": start("prefill", server_argv("prefill", model, args.fake), pd_path, out, pd_env),
        "decode": start("decode", server_argv("decode", model, args.fake), pd_path, out, pd_env),
        "patched": start("patched", server_argv("patched", model, args.fake), "/tmp/site-patched", out),
    }
    transcript.save(flags={name: s["argv"][1:] for name, s in servers.items() if name != "patched"},
                    pythonpath=pd_path, ld_library_path_added=cuda_libs)
    patch_record.save(flags=servers["patched"]["argv"][1:])
    try:
        ready = {}
        for name, server in servers.items():
            ready[name] = wait_health(f"http://127.0.0.1:{PORTS[name]}", deadline - 150, server["proc"])
            ready[name]["since_start_s"] = round(time.monotonic() - server["started"], 2)
            log(f"{name}: {ready[name]}")
        transcript.save(health={k: ready[k] for k in ("prefill", "decode")})
        patch_record.save(health=ready["patched"])

        # The patch set: the server serves, with and without its key, and what it logged.
        base = f"http://127.0.0.1:{PORTS['patched']}"
        if ready["patched"]["ready"]:
            patch_record.save(requests={
                "models_with_key": http("GET", f"{base}/v1/models", key=API_KEY),
                "models_without_key": http("GET", f"{base}/v1/models"),
                "generate_with_key": http("POST", f"{base}/generate", {"text": PROMPT, "sampling_params": {
                    "max_new_tokens": MAX_NEW, "temperature": 0}}, key=API_KEY),
            })
        line = server_args_line(servers["patched"]["log"])
        patch_record.save(server_args_line=line,
                          key_in_log=API_KEY in servers["patched"]["log"].read_text(errors="replace"),
                          api_key_field_in_line=None if line is None else "api_key=" in line)
        log(f"patched server: key in log {patch_record['key_in_log']}, api_key= in ServerArgs "
            f"{patch_record['api_key_field_in_line']}")

        # The PD pair through the load balancer.
        lb = None
        if ready["prefill"]["ready"] and ready["decode"]["ready"]:
            lb = start("lb", [sys.executable, "-m", "sglang_router.launch_router", "--mini-lb", "--pd-disaggregation",
                              "--prefill", f"http://127.0.0.1:{PORTS['prefill']}", str(BOOTSTRAP_PORT),
                              "--decode", f"http://127.0.0.1:{PORTS['decode']}",
                              "--host", "127.0.0.1", "--port", str(PORTS["lb"])],
                       f"{args.router}:{args.site}", out)
            servers["lb"] = lb
            transcript.save(lb_flags=lb["argv"][1:])
            lb_url = f"http://127.0.0.1:{PORTS['lb']}"
            for _ in range(60):
                if http("GET", f"{lb_url}/health", timeout=2).get("status") is not None:
                    break
                time.sleep(0.5)
            greedy = {"max_new_tokens": MAX_NEW, "temperature": 0}
            requests = {}
            requests["lb_generate"] = http("POST", f"{lb_url}/generate", {"text": PROMPT, "sampling_params": greedy},
                                           timeout=45)
            requests["lb_generate_stream"] = http("POST", f"{lb_url}/generate", {
                "text": PROMPT, "sampling_params": greedy, "stream": True}, timeout=45)
            requests["lb_completions"] = http("POST", f"{lb_url}/v1/completions", {
                "model": "tiny-llama", "prompt": PROMPT, "max_tokens": MAX_NEW, "temperature": 0}, timeout=45)
            transcript.save(requests=requests)
        direct = {
            "decode_without_bootstrap": http("POST", f"http://127.0.0.1:{PORTS['decode']}/generate", {
                "text": PROMPT, "sampling_params": {"max_new_tokens": MAX_NEW, "temperature": 0}}, timeout=20),
            "prefill_without_bootstrap": http("POST", f"http://127.0.0.1:{PORTS['prefill']}/generate", {
                "text": PROMPT, "sampling_params": {"max_new_tokens": MAX_NEW, "temperature": 0}}, timeout=20),
        }
        boot = f"http://127.0.0.1:{BOOTSTRAP_PORT}"
        direct["bootstrap_health"] = http("GET", f"{boot}/health", timeout=10)
        direct["bootstrap_route_no_query"] = http("GET", f"{boot}/route", timeout=10)
        direct["bootstrap_route_info"] = http("GET", f"{boot}/route?prefill_dp_rank=-1&prefill_cp_rank=-1"
                                              "&target_tp_rank=-1&target_pp_rank=-1", timeout=10)
        direct["bootstrap_route_rank0"] = http("GET", f"{boot}/route?prefill_dp_rank=0&prefill_cp_rank=0"
                                               "&target_tp_rank=0&target_pp_rank=0", timeout=10)
        for role in ("prefill", "decode"):
            info = http("GET", f"http://127.0.0.1:{PORTS[role]}/server_info", timeout=10)
            body = info.pop("json", None)
            if isinstance(body, dict):
                info["disaggregation"] = {k: v for k, v in body.items() if "disagg" in k or "bootstrap" in k}
            direct[f"{role}_server_info"] = info
            metrics = http("GET", f"http://127.0.0.1:{PORTS[role]}/metrics", timeout=10)
            text = metrics.pop("text", "") or ""
            metrics["families"] = sorted({ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")})
            direct[f"{role}_metrics"] = metrics
        transcript.save(direct=direct)
    finally:
        stops = {name: stop(server) for name, server in reversed(list(servers.items()))}
        logs = {name: log_lines(server["log"]) for name, server in servers.items()}
        transcript.save(stops={k: v for k, v in stops.items() if k != "patched"},
                        log_lines={k: v for k, v in logs.items() if k != "patched"},
                        seconds=round(time.monotonic() - began, 1))
        patch_record.save(stop=stops.get("patched"), log_lines=logs.get("patched"),
                          server_args_line=server_args_line(servers["patched"]["log"]),
                          key_in_log=API_KEY in servers["patched"]["log"].read_text(errors="replace"))
        log(f"stops: {stops}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--wheels", type=Path, required=True)
    p.add_argument("--into", type=Path, default=PROJECT_ROOT / ".gpucarry")
    r = sub.add_parser("run")
    r.add_argument("--site", required=True)
    r.add_argument("--nixl", default="")
    r.add_argument("--router", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--budget-s", type=float, default=540)
    r.add_argument("--fake", action="store_true", help="stand-ins that answer the routes asked, for a rehearsal")
    r.add_argument("--port-offset", type=int, default=0, help="added to every port (a rehearsal beside other servers)")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.wheels, args.into)
        return 0
    global BOOTSTRAP_PORT
    PORTS.update({name: port + args.port_offset for name, port in PORTS.items()})
    BOOTSTRAP_PORT += args.port_offset
    ROLE_FLAGS["prefill"] = (*ROLE_FLAGS["prefill"][:5], str(BOOTSTRAP_PORT), *ROLE_FLAGS["prefill"][6:])
    ROLE_FLAGS["decode"] = (*ROLE_FLAGS["decode"][:5], str(BOOTSTRAP_PORT + 1), *ROLE_FLAGS["decode"][6:])
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
