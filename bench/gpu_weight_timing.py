"""
How long a new revision takes to serve on a real sglang server (issue 43): in place
(``POST /update_weights_from_disk``) against a restart (SIGTERM, the process's end, a new start
on the new revision with the same warm compile caches), side by side in one run; and the
update's time against the checkpoint's size, for an estimate at Kimi K2.5's.

Two models of the same Llama family, real random weights in two revisions each, one bf16
``model.safetensors`` per revision, written on the device just before (so in the page cache):

- ``small``: the weight-update record's tiny Llama (``gpu_weight_updates.write_revisions``:
  8 layers, hidden 256; ``/tmp/rev-a``, ``/tmp/rev-b``);
- ``large``: the same tokenizer and family at ``LARGE`` (16 layers, hidden 2048, about 1.5 GB a
  revision; ``/tmp/large-a``, ``/tmp/large-b``), seeds 11 and 12.

Each is one ``python -m sglang.launch_server`` in a session of its own (``gpu_pd.start``) with
the weight-update record's flags (``gpu_weight_updates.FLAGS``: CUDA graphs up to batch 8, no
speculative decoding) and ``--weight-version rev-a``. Both start at once; the timed part waits
for ``--wait-for`` (a file another bench on the GPU touches when it ends), so nothing else runs
on the GPU while it times. Every time is ``time.monotonic`` in this process; "an answer" is a
greedy ``/generate`` of ``ANSWER_TOKENS`` tokens (``gpu_weight_updates.generate``), asked again
until its ``meta_info.weight_version`` is the one expected.

1. ``answer_alone``: three answers with nothing changed (what an answer itself costs).
2. ``updates`` (``small``, ``UPDATES`` times, rev B, A, B, ...): from sending the update to its
   answer (``update_s``) and to the first answer that carries the new version (``to_answer_s``).
3. ``large_updates`` (``LARGE_UPDATES`` times): the same on the large model; its bytes over
   ``update_s`` give the load rate (GB/s, 1e9 bytes). Then, if ``/proc/sys/vm/drop_caches``
   can be written (root, not read-only), one update after dropping the page cache (``cold``).
4. ``restarts`` (``small``, ``RESTARTS`` times, alternating): SIGTERM to the server's main process
   alone (what sglfleet's launch script passes on), its exit (``stop_s``), every process of its
   session gone (SIGKILL to the session after ``GONE_CAP_S``), a new server on the other revision
   with ``--weight-version`` (same flags, port, environment and compile caches), its port
   listening, ``/health`` 200, and its first answer: ``total_s`` from the SIGTERM to that answer.
5. ``large_restarts`` (``LARGE_RESTARTS``): the same on the large model, if time is left.

``compile_caches`` sizes the caches under ``HOME`` (flashinfer, triton, tvm-ffi, torch) before the
timed part and after it: a restart that compiled nothing leaves them as they were. ``medians`` sums
it up. The transcript (``weight-timing.json``) is written after every step; every server's log
(one per start) is packed into ``weight-timing-logs.tar.xz``.

**Example** (the run of ``tests/data/gpu/weight-timing-h200-sglang-0.5.14.json``, 2026-12-05: 375 s on
a cold machine, in one device call beside ``bench/gpu_reasoning.py``; the carry is made as
``bench/gpu_weight_updates.py``'s docstring says, from this checkout):

.. code:: shell

    # on the device, through the run tool: carry [".cache/bench/gpu-records-carry"], timeout_s 590:
    set -o pipefail; C=$PWD/.cache/bench/gpu-records-carry; ls $C/repo/bench/gpu_reasoning.py >/dev/null || exit 3;
      mkdir -p /tmp/site && tar -xJf $C/sglang-0.5.14-site.tar.xz -C /tmp/site && cd $C/repo &&
      export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 && nvidia-smi --query-gpu=name,memory.used,driver_version --format=csv;
      (timeout 300 python3 bench/gpu_reasoning.py --site /tmp/site --out $OUT > $OUT/reasoning-bench.log 2>&1;
       touch /tmp/reasoning-done) &
      timeout 530 python3 bench/gpu_weight_timing.py --site /tmp/site --out $OUT --budget-s 505 \\
        --wait-for /tmp/reasoning-done 2>&1 | tee $OUT/timing-bench.log | grep -v "^\\[gpu-pd"; wait

    # back here
    cp <files_at>/weight-timing.json tests/data/gpu/weight-timing-h200-sglang-0.5.14.json
    cp <files_at>/timing-bench.log tests/data/gpu/weight-timing-h200-sglang-0.5.14-bench.log
    mkdir -p /tmp/wt && tar -xJf <files_at>/weight-timing-logs.tar.xz -C /tmp/wt &&
      for s in small large small-restart1 small-restart2 small-restart3 large-restart1; do
        cp /tmp/wt/$s.log tests/data/gpu/weight-timing-h200-sglang-0.5.14-$s.log; done

    # a rehearsal without a GPU, against the stand-in (no torch here: configs only; no update route: 404s)
    .venv/bin/python bench/gpu_weight_timing.py --site .cache/standin/sglang-0.5.14-py --out /tmp/wt --standin
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside gpu_acceptance
import gpu_acceptance as acceptance  # noqa: E402
import gpu_pd  # noqa: E402
import gpu_weight_updates as updates  # noqa: E402
from gpu_acceptance import PROJECT_ROOT, Transcript  # noqa: E402
from gpu_weight_updates import exchange, generate, tail  # noqa: E402

LARGE_A, LARGE_B = Path("/tmp/large-a"), Path("/tmp/large-b")
LARGE = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 16, "num_attention_heads": 16,
         "num_key_value_heads": 8, "head_dim": 128}
LARGE_SEEDS = {"large-a": 11, "large-b": 12}
SERVERS = {"small": (30531, updates.REV_A, updates.REV_B), "large": (30532, LARGE_A, LARGE_B)}
PROMPT = "The capital of France is"
ANSWER_TOKENS = 8
UPDATES, LARGE_UPDATES, RESTARTS, LARGE_RESTARTS = 5, 3, 3, 1
POLL_S = 0.05
GONE_CAP_S = 30.0
READY_CAP_S = 240.0
RESTART_RESERVE_S = 75.0  # a restart's stop, warm start and answer, with room
ANSWER_CAP_S = 60.0  # how long answers are asked for until one carries the version (2 s in a rehearsal)
CACHES = (".cache/flashinfer", ".cache/tvm-ffi", ".triton", ".cache/torch", ".cache/torch_extensions", ".nv")
MILESTONES = ("Load weight", "Capture cuda graph", "Capture", "ready to roll", "Uvicorn running", "Update weights",
              "KV Cache is allocated", "SIGTERM", "Gracefully", "Init torch distributed", "Memory pool end")
STARTED: list[dict] = []


def log(message: str) -> None:
    print(f"[gpu-weight-timing {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the models -------------------------------------------------------------------------


def write_large(small: Path) -> dict:
    """The large model's two revisions: the small one's folder (tokenizer, configs) at ``LARGE``'s shapes."""
    found = {}
    for name, folder in (("large-a", LARGE_A), ("large-b", LARGE_B)):
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(small, folder, ignore=shutil.ignore_patterns("*.safetensors"))
        config = {**json.loads((folder / "config.json").read_text()), **LARGE}
        (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
        started = time.monotonic()
        found[name] = {**updates.write_weights(folder, config, LARGE_SEEDS[name]),
                       "written_s": round(time.monotonic() - started, 2)}
    found["config"] = config
    return found


def checkpoint_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.glob("*.safetensors"))


# --- one server ------------------------------------------------------------------------


def argv_for(entry: list[str], model: Path, port: int, version: str) -> list[str]:
    return [*entry, "--model-path", str(model), "--port", str(port), *updates.FLAGS, "--weight-version", version]


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_ready(port: int, server: dict, cap_s: float) -> dict:
    """From the server's start: when its port listens, when ``/health`` is 200 (or its end, or the cap)."""
    started, found = server["started"], {}
    while time.monotonic() - started < cap_s:
        if server["proc"].poll() is not None:
            return {**found, "ready": False, "exit": server["proc"].returncode}
        if "listen_s" not in found and listening(port):
            found["listen_s"] = round(time.monotonic() - started, 3)
        if "listen_s" in found:
            answer = gpu_pd.http("GET", f"http://127.0.0.1:{port}/health", timeout=2.0)
            if answer.get("status") == 200:
                return {**found, "ready": True, "ready_s": round(time.monotonic() - started, 3)}
        time.sleep(POLL_S)
    return {**found, "ready": False, "timeout": True}


def answer_with(port: int, version: str, cap_s: float | None = None) -> dict:
    """Greedy answers until one carries ``version``: the last one, how many were asked, how long it took."""
    started, tries, cap_s = time.monotonic(), 0, ANSWER_CAP_S if cap_s is None else cap_s
    while True:
        found = generate(port, None, PROMPT, ANSWER_TOKENS, timeout=60.0)
        tries += 1
        if found["meta_info"].get("weight_version") == version or time.monotonic() - started > cap_s:
            return {"tries": tries, "seconds": round(time.monotonic() - started, 4), "status": found["status"],
                    "weight_version": found["meta_info"].get("weight_version"), "output_ids": found["output_ids"],
                    "error": found["error"], "body": found["body"]}
        time.sleep(0.01)


def update_once(port: int, model: Path, version: str) -> dict:
    t0 = time.monotonic()
    answer = exchange(port, "POST", "/update_weights_from_disk", {"model_path": str(model), "weight_version": version},
                      timeout=300.0)
    t1 = time.monotonic()
    first = answer_with(port, version, None if answer.get("status") == 200 else 0.0)
    t2 = time.monotonic()
    return {"model_path": str(model), "weight_version": version, "status": answer.get("status"),
            "body": (answer.get("body") or answer.get("error") or "")[:300], "update_s": round(t1 - t0, 4),
            "to_answer_s": round(t2 - t0, 4), "answer": first}


def restart_once(name: str, server: dict, port: int, model: Path, version: str, entry: list[str], site: str,
                 out: Path) -> tuple[dict, dict]:
    """SIGTERM to the main process, its end and its session's, a new server on ``model``, its first answer."""
    proc, session = server["proc"], server["proc"].pid
    before = acceptance.session_processes(session)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(GONE_CAP_S + 30)
    except Exception:  # subprocess.TimeoutExpired: the session's SIGKILL below ends it
        pass
    t_exit = time.monotonic()
    killed = []
    while acceptance.session_processes(session):
        if time.monotonic() - t0 > GONE_CAP_S:
            killed = list(acceptance.session_processes(session).values())
            with contextlib.suppress(ProcessLookupError):
                os.killpg(session, signal.SIGKILL)
            proc.wait(30)
            break
        time.sleep(POLL_S)
    t_gone = time.monotonic()
    new = gpu_pd.start(name, argv_for(entry, model, port, version), site, out)
    STARTED.append(new)
    ready = wait_ready(port, new, READY_CAP_S)
    first = answer_with(port, version) if ready.get("ready") else None
    t_answer = time.monotonic()
    record = {"model_path": str(model), "weight_version": version, "processes_before": len(before),
              "exit_status": proc.returncode, "stop_s": round(t_exit - t0, 3), "all_gone_s": round(t_gone - t0, 3),
              "sigkilled_after_cap": killed, "start_after_sigterm_s": round(new["started"] - t0, 3),
              "start_to_listen_s": ready.get("listen_s"), "start_to_ready_s": ready.get("ready_s"),
              "start_to_answer_s": round(t_answer - new["started"], 3) if first else None,
              "total_s": round(t_answer - t0, 3) if first else None, "ready": ready, "answer": first,
              "log": new["log"].name, "milestones": milestones(new["log"])}
    return record, new


def milestones(path: Path, limit: int = 40) -> list[str]:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return [line[:300] for line in lines if any(m in line for m in MILESTONES)
            and "server_args=" not in line][:limit]


def cache_sizes() -> dict:
    """Bytes and files of each compile cache under HOME."""
    home, found = Path(os.path.expanduser("~")), {}
    for name in CACHES:
        folder = home / name
        if folder.exists():
            files = [p for p in folder.rglob("*") if p.is_file()]
            found[name] = {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    return found


def drop_page_cache() -> str | None:
    """Drop the page cache (the checkpoints' pages): None when done, else why not."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return None
    except OSError as error:
        return f"{type(error).__name__}: {error}"


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


def medians(record: dict) -> dict:
    small = [u for u in record.get("updates", []) if u["status"] == 200]
    large = [u for u in record.get("large_updates", []) if u["status"] == 200]
    restarts = [r for r in record.get("restarts", []) if r["total_s"] is not None]
    large_restarts = [r for r in record.get("large_restarts", []) if r["total_s"] is not None]
    size = record.get("checkpoint_bytes", {})
    out = {"answer_alone_s": median(a["seconds"] for a in record.get("answer_alone", [])),
           "small_update_s": median(u["update_s"] for u in small),
           "small_update_to_answer_s": median(u["to_answer_s"] for u in small),
           "small_restart_total_s": median(r["total_s"] for r in restarts),
           "small_restart_stop_s": median(r["stop_s"] for r in restarts),
           "small_restart_all_gone_s": median(r["all_gone_s"] for r in restarts),
           "small_restart_start_to_ready_s": median(r["start_to_ready_s"] for r in restarts),
           "small_restart_start_to_answer_s": median(r["start_to_answer_s"] for r in restarts),
           "large_update_s": median(u["update_s"] for u in large),
           "large_update_to_answer_s": median(u["to_answer_s"] for u in large),
           "large_restart_total_s": median(r["total_s"] for r in large_restarts),
           "counts": {"updates": len(small), "large_updates": len(large), "restarts": len(restarts),
                      "large_restarts": len(large_restarts)}}
    if out["large_update_s"] and size.get("large"):
        out["large_update_gb_per_s"] = round(size["large"] / 1e9 / out["large_update_s"], 3)
        if out["small_update_s"] is not None:  # the size-independent part taken off
            out["large_update_gb_per_s_less_small"] = round(
                (size["large"] - size["small"]) / 1e9 / max(out["large_update_s"] - out["small_update_s"], 1e-6), 3)
    return out


# --- the run ----------------------------------------------------------------------------


def kill_all() -> None:
    for server in STARTED:
        for pid in [server["proc"].pid, *acceptance.session_processes(server["proc"].pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def pack_logs(out: Path) -> None:
    files = sorted({server["log"] for server in STARTED if server["log"].exists()})
    with tarfile.open(out / "weight-timing-logs.tar.xz", "w:xz") as archive:
        for path in files:
            archive.add(path, arcname=path.name)
    for path in files:
        path.unlink()


def run(args) -> int:
    global ANSWER_CAP_S
    if args.standin:  # its weight_version is not the flag's, and it has no update route
        ANSWER_CAP_S = 2.0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def ended(signum, frame):
        kill_all()
        pack_logs(out)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, ended)
    began = time.monotonic()
    deadline = began + args.budget_s
    site = str(Path(args.site).resolve())
    entry = ([sys.executable, str(PROJECT_ROOT / "files" / "standin" / "sglang_standin.py")] if args.standin
             else [sys.executable, "-m", "sglang.launch_server"])
    transcript = Transcript(out / "weight-timing.json")
    transcript.save(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    what="a new revision served: update in place against restart (bench/gpu_weight_timing.py)",
                    versions=acceptance.versions(site), flags=list(updates.FLAGS), prompt=PROMPT,
                    answer_tokens=ANSWER_TOKENS, home=os.path.expanduser("~"))
    small_models = updates.write_revisions(Path(args.root))
    servers = {"small": gpu_pd.start("small", argv_for(entry, updates.REV_A, SERVERS["small"][0], "rev-a"), site, out)}
    STARTED.append(servers["small"])
    large_models = write_large(updates.REV_A)
    servers["large"] = gpu_pd.start("large", argv_for(entry, LARGE_A, SERVERS["large"][0], "rev-a"), site, out)
    STARTED.append(servers["large"])
    sizes = {"small": checkpoint_bytes(updates.REV_A), "large": checkpoint_bytes(LARGE_A)}
    transcript.save(models={"small": {k: small_models[k] for k in ("rev-a", "rev-b", "target_config")},
                            "large": large_models}, checkpoint_bytes=sizes)
    log(f"checkpoints: {sizes}")
    try:
        ready = {name: wait_ready(SERVERS[name][0], server, max(10.0, deadline - time.monotonic() - 60))
                 for name, server in servers.items()}
        transcript.save(first_start=ready)
        log(f"ready: {ready}")
        if args.wait_for:
            waited = time.monotonic()
            while not Path(args.wait_for).exists() and time.monotonic() - waited < args.wait_cap_s:
                time.sleep(0.5)
            transcript.save(waited_for_other_bench_s=round(time.monotonic() - waited, 1),
                            other_bench_done=Path(args.wait_for).exists())
        transcript.save(compile_caches_before=cache_sizes())
        if ready["small"].get("ready"):
            port = SERVERS["small"][0]
            transcript.save(answer_alone=[answer_with(port, "rev-a") for _ in range(3)])
            done = []
            for index in range(UPDATES):
                name = "rev-b" if index % 2 == 0 else "rev-a"
                model = updates.REV_B if name == "rev-b" else updates.REV_A
                done.append(update_once(port, model, f"{name}-{index + 1}"))
                log(f"small update {index + 1}: {done[-1]['status']} {done[-1]['update_s']} s, "
                    f"answer at {done[-1]['to_answer_s']} s")
                transcript.save(updates=done)
        if ready["large"].get("ready"):
            port = SERVERS["large"][0]
            transcript.save(large_answer_alone=[answer_with(port, "rev-a") for _ in range(2)])
            done = []
            for index in range(LARGE_UPDATES):
                name = "rev-b" if index % 2 == 0 else "rev-a"
                model = LARGE_B if name == "rev-b" else LARGE_A
                done.append(update_once(port, model, f"{name}-{index + 1}"))
                log(f"large update {index + 1}: {done[-1]['status']} {done[-1]['update_s']} s")
                transcript.save(large_updates=done)
            why_not = "a rehearsal: the page cache is this machine's" if args.standin else drop_page_cache()
            cold = {"dropped": why_not is None, "why_not": why_not}
            if why_not is None:
                model, name = (LARGE_A, "rev-a") if LARGE_UPDATES % 2 == 1 else (LARGE_B, "rev-b")
                cold["update"] = update_once(port, model, f"{name}-cold")
                log(f"large update after dropping the page cache: {cold['update']['update_s']} s")
            transcript.save(large_update_cold=cold)
        for name, count, key in (("small", RESTARTS, "restarts"), ("large", LARGE_RESTARTS, "large_restarts")):
            port, rev_a, rev_b = SERVERS[name]
            done = []
            for index in range(count):
                if servers[name]["proc"].poll() is not None or time.monotonic() > deadline - RESTART_RESERVE_S:
                    break
                running = transcript.get("updates" if name == "small" else "large_updates") or [{"weight_version": "rev-a"}]
                last = (done[-1] if done else running[-1])["weight_version"]
                version, model = ("rev-a", rev_a) if last.startswith("rev-b") else ("rev-b", rev_b)
                record, servers[name] = restart_once(f"{name}-restart{index + 1}", servers[name], port, model,
                                                     f"{version}-restart{index + 1}", entry, site, out)
                done.append(record)
                log(f"{name} restart {index + 1}: stop {record['stop_s']} s, ready {record['start_to_ready_s']} s "
                    f"after its start, answer {record['total_s']} s after the SIGTERM")
                transcript.save(**{key: done})
        transcript.save(compile_caches_after=cache_sizes())
        transcript.save(medians=medians(transcript))
        log(f"medians: {json.dumps(transcript['medians'])}")
    finally:
        stops = {name: gpu_pd.stop(server) for name, server in servers.items()}
        transcript.save(stops=stops, first_start_milestones={
            name: milestones(out / f"{name}.log") for name in SERVERS},
            ending_lines={name: tail(s["log"], 8) for name, s in servers.items()},
            seconds=round(time.monotonic() - began, 1))
        pack_logs(out)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", required=True, help="the folder of the server's packages (the unpacked carry)")
    parser.add_argument("--out", required=True, help="where weight-timing.json and the logs go")
    parser.add_argument("--root", default="/tmp/gpu-weight-timing", help="where write_models writes")
    parser.add_argument("--budget-s", type=float, default=500.0, help="the whole run's seconds, stops included")
    parser.add_argument("--wait-for", help="a file whose existence says the GPU is this bench's alone")
    parser.add_argument("--wait-cap-s", type=float, default=240.0, help="how long to wait for it at most")
    parser.add_argument("--standin", action="store_true", help="the stand-in instead of sglang (a rehearsal)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
