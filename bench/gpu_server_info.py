"""
What sglang 0.5.14's ``/server_info`` and ``/get_server_info`` show of its keys, with and without
sglfleet's patch sets (issue 41, part 2), and whether its start-up log carries them; one GPU.

Three servers of the acceptance run's tiny Llama (``gpu_acceptance.write_models``, random weights,
``--load-format dummy``), side by side on the GPU, each ``python -m sglang.launch_server`` in a
session of its own (``gpu_pd.start``):

- ``unpatched`` (port 30611): the site as the wheel has it, ``--api-key`` and ``--admin-api-key``;
- ``patched`` (30612): a copy of the site (hard-linked) in which every file a shipped set names for
  0.5.14 is replaced, by one rename, with what ``patchsets.apply_sets`` writes (as the patch step
  does on a host): ``entrypoints/http_server.py`` (``server_info_keys_redacted_kv_events``) and
  ``server_args.py`` (``api_key_not_logged_annotated``); both keys;
- ``patched_admin_only`` (30613): the same copy, ``--admin-api-key`` alone (``/server_info`` is
  NORMAL: with no client key it is open to anyone).

Recorded for each: ``/server_info`` and ``/get_server_info`` asked with no key, the client key and
the admin key (the status; for a 200, ``api_key``, ``admin_api_key`` and ``ssl_keyfile_password``
at the top and in each internal state, whether either key is anywhere in the body, the answer's
field names, the whole body of ``/server_info``); the log's ``server_args=`` line and whether either
key is anywhere in the log. The patch itself as ``gpu_pd.patch_copy`` records it: each file's
sets, outcomes and digests, so that a test can hold the file the GPU ran to what sglfleet writes.

The transcript is ``server-info.json``; each server's log ``server-info-<name>.log``.

**Example** (the carry as ``bench/gpu_http_surface.py`` makes it, this checkout's files in
``.cache/bench/gpu-advisories-carry/repo``; carry [".cache/bench/gpu-records-carry",
".cache/bench/gpu-advisories-carry"], timeout_s 420):

.. code:: shell

    # here (from this worktree: the run tool sends the checkout its session began in)
    C=/work/main/.cache/bench/gpu-advisories-carry; rm -rf $C; mkdir -p $C/repo &&
      (git ls-files bench sglfleet files inventory pyproject.toml; git ls-files -o --exclude-standard bench files) |
      tar -cf - -T - | tar -xf - -C $C/repo

    # there
    set -o pipefail; C=$PWD/.cache/bench; mkdir -p /tmp/site && tar -xJf $C/gpu-records-carry/sglang-0.5.14-site.tar.xz \\
      -C /tmp/site && cd $C/gpu-advisories-carry/repo && export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 &&
      timeout 380 python3 bench/gpu_server_info.py --site /tmp/site --out $OUT --budget-s 360 2>&1 | tee $OUT/bench.log

    # back here
    cp <files_at>/server-info.json tests/data/gpu/server-info-h200-sglang-0.5.14.json
    for s in unpatched patched patched_admin_only; do
      cp <files_at>/server-info-$s.log tests/data/gpu/server-info-h200-sglang-0.5.14-$s.log; done

    # a rehearsal without a GPU: the stand-in over the 0.5.14 sources
    .venv/bin/python bench/gpu_server_info.py --site .cache/standin/sglang-0.5.14-py --out /tmp/si --standin
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside gpu_acceptance
import gpu_acceptance as acceptance  # noqa: E402
import gpu_pd  # noqa: E402
from gpu_acceptance import PROJECT_ROOT, Transcript  # noqa: E402

CLIENT_KEY = "sk-gpu-server-info-client"  # throwaway keys, on loopback, for servers that live as long as the run
ADMIN_KEY = "sk-gpu-server-info-admin"
SECRETS = ("api_key", "admin_api_key", "ssl_keyfile_password")
PORTS = {"unpatched": 30611, "patched": 30612, "patched_admin_only": 30613}
KEYS = {"unpatched": ("--api-key", CLIENT_KEY, "--admin-api-key", ADMIN_KEY),
        "patched": ("--api-key", CLIENT_KEY, "--admin-api-key", ADMIN_KEY),
        "patched_admin_only": ("--admin-api-key", ADMIN_KEY)}
# Three servers share the GPU; no CUDA graphs: what is recorded is what they answer, not their speed.
FLAGS = (*acceptance.TINY_MODEL_FLAGS, "--mem-fraction-static", "0.25", "--max-total-tokens", "8192",
         "--disable-cuda-graph", "--host", "127.0.0.1", "--served-model-name", "tiny-llama")
STARTED: list[dict] = []


def log(message: str) -> None:
    print(f"[gpu-server-info {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def patch_site(site: Path, patched: Path, version: str) -> dict:
    """
    ``site`` hard-linked into ``patched``, and each file a shipped set names for ``version`` replaced,
    by one rename, with what ``apply_sets`` writes (a new inode: the site keeps the wheel's bytes).
    """
    from sglfleet.artifacts import patchsets
    from sglfleet.artifacts.patcher import unified_diff

    if patched.exists():
        shutil.rmtree(patched)
    patched.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(site), str(patched)], check=True)
    sets = patchsets.for_version(patchsets.load_sets(), version)
    record = {}
    for member in patchsets.files(sets):
        path = patched / member
        source = path.read_bytes()
        on_file = patchsets.for_file(sets, version, member)
        new, outcomes = patchsets.apply_sets(source, on_file)
        temporary = path.with_name(path.name + ".sglfleet-tmp")
        temporary.write_bytes(new)
        os.replace(temporary, path)
        record[member] = {
            "sets": [s.name for s in on_file], "outcomes": {s.name: outcome for s, outcome in outcomes},
            "sha256_wheel": hashlib.sha256(source).hexdigest(),
            "sha256_site_original_after": hashlib.sha256((site / member).read_bytes()).hexdigest(),
            "sha256_patched": hashlib.sha256(new).hexdigest(),
            "second_apply_unchanged": patchsets.apply_sets(path.read_bytes(), on_file)[0] == new,
            "diff": unified_diff(source, new, member) if new != source else ""}
    return record


def secrets_of(answer: dict) -> dict:
    """The three fields at the top of a /server_info answer and in each of its internal states."""
    states = answer.get("internal_states") or []
    return {"top": {k: answer.get(k, "absent") for k in SECRETS},
            "internal_states": [{k: s.get(k, "absent") for k in SECRETS} for s in states if isinstance(s, dict)]}


def ask(port: int) -> dict:
    """/server_info and /get_server_info with no key, the client key and the admin key."""
    found = {}
    for path in ("/server_info", "/get_server_info"):
        for who, key in (("no_key", None), ("client_key", CLIENT_KEY), ("admin_key", ADMIN_KEY)):
            answer = gpu_pd.http("GET", f"http://127.0.0.1:{port}{path}", key=key, timeout=30)
            entry = {"status": answer.get("status"), "error": answer.get("error")}
            body = answer.get("json")
            if answer.get("status") == 200 and isinstance(body, dict):
                text = json.dumps(body)
                entry.update(secrets=secrets_of(body), client_key_in_body=CLIENT_KEY in text,
                             admin_key_in_body=ADMIN_KEY in text, fields=sorted(body))
                if path == "/server_info" and "body" not in found:
                    found["body"] = body
            else:
                entry["text"] = (answer.get("text") or json.dumps(body))[:400]
            found[f"{path.strip('/')}:{who}"] = entry
            log(f"{port} {path} {who}: {entry['status']}")
    return found


def the_log(path: Path) -> dict:
    text = path.read_text(errors="replace") if path.exists() else ""
    line = next((ln for ln in text.splitlines() if "server_args=" in ln), None)
    return {"server_args_line": line, "client_key_in_log": CLIENT_KEY in text, "admin_key_in_log": ADMIN_KEY in text,
            "api_key_field_in_line": line is not None and "api_key=" in line.replace("admin_api_key=", ""),
            "admin_api_key_field_in_line": line is not None and "admin_api_key=" in line}


def kill_all() -> None:
    for server in STARTED:
        for pid in [server["proc"].pid, *acceptance.session_processes(server["proc"].pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda signum, frame: (kill_all(), sys.exit(128 + signum)))
    began = time.monotonic()
    deadline = began + args.budget_s
    site = Path(args.site).resolve()
    version = acceptance.versions(str(site)).get("sglang") or acceptance.SGLANG
    transcript = Transcript(out / "server-info.json")
    transcript.save(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    what="/server_info, /get_server_info and the start-up log, with and without sglfleet's "
                         "patch sets (bench/gpu_server_info.py)",
                    versions=acceptance.versions(str(site)), flags=list(FLAGS), keys=KEYS,
                    standin=bool(args.standin))
    patched = Path(args.root) / "site-patched"
    transcript.save(patch=patch_site(site, patched, version))
    log(f"patched: {json.dumps({m: r['outcomes'] for m, r in transcript['patch'].items()})}")
    model, _draft = acceptance.write_models(Path(args.root) / "models")
    servers = {}
    for name, port in PORTS.items():
        entry = ([sys.executable, str(PROJECT_ROOT / "files" / "standin" / "sglang_standin.py")] if args.standin
                 else [sys.executable, "-m", "sglang.launch_server"])
        pythonpath = str(site if name == "unpatched" else patched)
        servers[name] = gpu_pd.start(f"server-info-{name}", [*entry, "--model-path", str(model),
                                                             "--port", str(port), *FLAGS, *KEYS[name]],
                                     pythonpath, out)
        STARTED.append(servers[name])
    try:
        ready = {name: gpu_pd.wait_health(f"http://127.0.0.1:{port}", deadline - 40, servers[name]["proc"])
                 for name, port in PORTS.items()}
        transcript.save(ready=ready)
        log(f"ready: {json.dumps({n: r.get('ready') for n, r in ready.items()})}")
        transcript.save(answers={name: ask(port) for name, port in PORTS.items() if ready[name]["ready"]})
    finally:
        stops = {name: gpu_pd.stop(server) for name, server in servers.items()}
        transcript.save(stops=stops, logs={name: the_log(s["log"]) for name, s in servers.items()},
                        seconds=round(time.monotonic() - began, 1))
    log(f"logs: {json.dumps(transcript['logs'])[:2000]}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", required=True, help="the folder of the server's packages (the unpacked carry)")
    parser.add_argument("--out", required=True, help="where server-info.json and the logs go")
    parser.add_argument("--root", default="/tmp/gpu-server-info", help="the patched site and the models")
    parser.add_argument("--budget-s", type=float, default=360.0, help="the whole run's seconds, stops included")
    parser.add_argument("--standin", action="store_true", help="the stand-in instead of sglang (a rehearsal)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
