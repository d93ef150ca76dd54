"""
One sglang server over two node ranks (``--nnodes 2``) on one GPU (issue 45): the order of their
start, and what a rank's end does to the other, recorded so that the stand-in
(``files/standin/standin_multinode.py``) can be held to it.

**One GPU, not two.** Both ranks are processes of one host on its one GPU (``--tp-size 2 --nnodes 2``:
one GPU per node rank, ``gpu_id`` 0 in each). NCCL refuses two ranks of one host on one GPU
("Duplicate GPU detected"); its check compares host hashes, which ``NCCL_HOSTID`` overrides: rank 0
runs with ``NCCL_HOSTID=mn-node0``, rank 1 with ``mn-node1``, so NCCL takes them for two hosts and
talks over its socket transport on loopback (``GROUP_ENV``), as two hosts without InfiniBand would.
sglang's custom all-reduce (CUDA IPC) is off (``--disable-custom-all-reduce``). Should a rank refuse
"The memory capacity is unbalanced", the first scenario runs again with
``SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK=0`` and every later one keeps it (0.5.14's ``environ.py``
copies the old ``SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK``'s value into ``..._ENABLE_...``: ``=1`` there
keeps the check on). The model: the acceptance run's tiny Llama (``gpu_acceptance.write_models``,
``--load-format dummy``) with the PD record's flags for a shared GPU (``gpu_pd.SHARED_FLAGS``).

Each rank is ``python -m sglang.launch_server`` in a session of its own (``gpu_pd.start``), watched
from its start (``Rank``): when its HTTP port listens (probed every ``POLL_S``), each change of its
``/health`` answer, its exit and status, and its log's key lines, each stamped as it is read. Every
time is ``time.monotonic`` in this process, given from the process's own start (``since_start_s``)
and, after a kill, from the kill. Scenarios, in this order (``--scenarios`` picks), each bounded in
time, and ended by SIGKILL to the sessions it started (every process gone) before the next:

- ``a_head_first``: the head, then rank 1 ``LATE_S`` later; the ports, ``/health``, and what each
  rank answers (``/health``, ``/ping``, ``/health_generate``, ``/generate``, ``/v1/models``).
- ``b_rank1_killed_idle``: SIGKILL to rank 1's session while the group (a's, where it serves) is
  idle; the head's ``/health`` (its watch) and ``/generate`` (every ``PROBE_EVERY_S``) until it ends,
  or ``WATCH_S`` s.
- ``c_rank1_sigterm``: a new group; SIGTERM to rank 1's main process alone (systemd's
  ``KillMode=mixed``): when it and each of its processes end, and what the head does.
- ``f_head_alone_dist_timeout``: a head alone with ``--dist-timeout 30``, started beside c (its own
  ports): when and how it gives up, whether its port opens; with the default wait's source lines
  (``timeout_sources``: sglang's and the device's torch, file:line).
- ``d_head_killed``: a new group; SIGKILL to the head's session: what rank 1 does.
- ``e_rank1_first``: rank 1, then the head ``LATE_S`` later.
- ``g_late_rank``: e's group serving, another rank 1 (its own HTTP port) at the same init address:
  what it does, and what the group answers meanwhile (``LATE_WATCH_S``).
- ``b2_rank1_killed_streaming``: a new group; SIGKILL to rank 1 while a streamed ``/generate`` of
  ``STREAM_TOKENS`` tokens is in flight: the stream as it arrived, and the head.

The transcript (``multinode.json``) is written after every step (a run cut short keeps what it
measured); the logs (``<scenario>-<rank>.log``, written under ``LOGS``) are packed into
``multinode-logs.tar.xz`` after every scenario (the device gives back 8 files at most).

**Example** (the run of ``tests/data/gpu/multinode-h100-sglang-0.5.14.json``: one H100, 300 s of
device time left, so ``a``, ``b``, ``c`` and ``f`` ran; ``--budget-s 540`` runs all eight):

.. code:: shell

    # here, with the network: the wheels the device lacks (bench/gpu_acceptance.py's, cryptography too)
    echo /.whl/ >> .git/info/exclude
    .venv/bin/python bench/gpu_acceptance.py prepare

    # on the device, through the run tool: carry [".whl"], timeout_s 590:
    set -o pipefail; mkdir -p /tmp/site && tar -xJf .whl/sglang-0.5.14-site.tar.xz -C /tmp/site &&
      export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 && timeout 560 python3 bench/gpu_multinode.py \\
        --site /tmp/site --out $OUT --budget-s 540 2>&1 | tee $OUT/multinode-bench.log | grep -v "^\\[gpu-pd"

    # back here
    cp <files_at>/multinode.json tests/data/gpu/multinode-h100-sglang-0.5.14.json
    mkdir -p /tmp/mn && tar -xJf <files_at>/multinode-logs.tar.xz -C /tmp/mn   # then trimmed into tests/data/gpu/

    # a rehearsal without a GPU, against the stand-in (0.5.14's flags; its own multi-node model)
    .venv/bin/python bench/gpu_multinode.py --standin --site .cache/standin/sglang-0.5.14-py --out /tmp/mn --late-s 3
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside gpu_acceptance
import gpu_acceptance as acceptance  # noqa: E402
import gpu_pd  # noqa: E402
import gpu_weight_updates as updates  # noqa: E402
from gpu_acceptance import PROJECT_ROOT, Transcript  # noqa: E402

MODEL_ROOT = Path("/tmp/gpu-multinode-models")
LOGS = Path("/tmp/gpu-multinode-logs")
BASE_PORT = 30600  # scenario i: the head at BASE + 10 i, rank 1 + 1, a late rank + 2, the init address + 5
GROUP_FLAGS = (*gpu_pd.SHARED_FLAGS, "--served-model-name", "tiny-llama", "--tp-size", "2", "--nnodes", "2",
               "--disable-custom-all-reduce")
# Two "hosts" on loopback: NCCL's socket transport, gloo on lo, no InfiniBand.
GROUP_ENV = {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "WARN"}
HOST_IDS = {0: "mn-node0", 1: "mn-node1"}
NCCL_INFO = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV"}  # the first group: which transport
MEMORY_CHECK_OFF = {"SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": "0"}
UNBALANCED = "The memory capacity is unbalanced"
PROMPT = "The capital of France is"
GENERATE = {"text": PROMPT, "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
POLL_S = 0.2  # the port probe, and /health until its first 200
HEALTH_EVERY_S = 1.0  # /health after its first 200
PROBE_EVERY_S = 1.0
LATE_S = 15.0
READY_CAP_S = 240.0  # a cold start JIT-compiles (about 100-130 s on the H200, PD's record)
WATCH_S = 90.0
SIGTERM_WATCH_S = 60.0
LATE_WATCH_S = 60.0
DIST_TIMEOUT_S = 30
STREAM_TOKENS = 4096
KILL_AFTER_EVENTS = 32
GONE_CAP_S = 30.0
KEY_LINES = re.compile(
    r"Init torch distributed|distributed_init_method|TCPStore|DistStore|clients joined|[Tt]imed out|timeout|"
    r"NCCL|[Nn]ccl|[Gg]loo|NET/Socket|via NET|HOSTID|Duplicate GPU|Connection|[Cc]onnect|rendezvous|"
    r"Load weight|KV Cache is allocated|Memory pool|unbalanced|Dummy health|Uvicorn running|ready to roll|"
    r"fired up|Scheduler hit|scheduler|sigquit|SIGQUIT|SIGTERM|Gracefully|[Kk]ill|[Ee]xit|Traceback|Error|"
    r"error|[Ee]xception|[Ww]arning|abort|Abort")
NOISE = ("GET /health", "GET /ping", "server_args=ServerArgs", "Prefill batch", "Decode batch")
SCENARIOS = ("a_head_first", "b_rank1_killed_idle", "c_rank1_sigterm", "f_head_alone_dist_timeout",
             "d_head_killed", "e_rank1_first", "g_late_rank", "b2_rank1_killed_streaming")
STARTED: list["Rank"] = []


def log(message: str) -> None:
    print(f"[gpu-multinode {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def brief(answer: dict) -> dict:
    """A ``gpu_pd.http`` answer cut to what tells: status (or error), seconds, body's head."""
    out = {k: answer[k] for k in ("status", "error", "seconds") if k in answer}
    body = answer.get("json", answer.get("text"))
    if body is not None:
        out["body"] = body if isinstance(body, (dict, list)) and len(json.dumps(body)) < 600 else str(body)[:300]
    return out


# --- one rank ----------------------------------------------------------------------------


class Rank:
    """
    One started rank, watched from its start by four threads: its exit, its HTTP port (every
    ``POLL_S``), its ``/health`` (each change of answer), and its log (each line stamped on arrival).
    """

    def __init__(self, label: str, rank: int, argv: list[str], env: dict, port: int, site: str):
        self.label, self.rank, self.port, self.env, self.argv = label, rank, port, env, argv
        self.server = gpu_pd.start(label, argv, site, LOGS, env)
        self.proc, self.started, self.log_path = self.server["proc"], self.server["started"], self.server["log"]
        self.events: list[tuple[float, str, object]] = []
        self.lines: list[tuple[float, str]] = []
        self.listen_at = self.first_200_at = self.exit_at = None
        self.health = None
        self.processes = {}
        self.done = threading.Event()
        for target in (self._exit, self._port, self._health, self._log):
            threading.Thread(target=target, name=f"{label}-{target.__name__}", daemon=True).start()
        STARTED.append(self)

    def _event(self, what: str, detail=None) -> None:
        self.events.append((time.monotonic(), what, detail))

    def _exit(self) -> None:
        self.proc.wait()
        self.exit_at = time.monotonic()
        self._event("exit", self.proc.returncode)

    def _port(self) -> None:
        state = False
        while self.exit_at is None and not self.done.is_set():
            now = listening(self.port)
            if now != state:
                if now and self.listen_at is None:
                    self.listen_at = time.monotonic()
                self._event("listens" if self.listen_at and self.events_of("listens") == 0 else
                            ("port open again" if now else "port closed"))
                state = now
            time.sleep(POLL_S)

    def events_of(self, what: str) -> int:
        return sum(1 for _, kind, _ in self.events if kind == what)

    def _health(self) -> None:
        while self.exit_at is None and not self.done.is_set():
            if self.listen_at is None:
                time.sleep(POLL_S)
                continue
            answer = gpu_pd.http("GET", f"http://127.0.0.1:{self.port}/health", timeout=30)
            state = answer.get("status") or ("refused" if "refused" in answer.get("error", "") else
                                             answer.get("error", "?")[:120])
            if state != self.health:
                self.health = state
                self._event("health", state)
            if state == 200 and self.first_200_at is None:
                self.first_200_at = time.monotonic()
            time.sleep(POLL_S if self.first_200_at is None else HEALTH_EVERY_S)

    def _log(self) -> None:
        while not self.log_path.exists():
            time.sleep(0.05)
        with open(self.log_path, errors="replace") as handle:
            pending = ""
            while True:
                chunk = handle.readline()
                if chunk:
                    pending += chunk
                    if pending.endswith("\n"):
                        self.lines.append((time.monotonic(), pending.rstrip("\n")))
                        pending = ""
                    continue
                if self.done.is_set() or (self.exit_at is not None and time.monotonic() - self.exit_at > 1.0
                                          and not self.session()):
                    if pending:
                        self.lines.append((time.monotonic(), pending))
                    return
                time.sleep(0.1)

    def session(self) -> dict[int, str]:
        return acceptance.session_processes(self.proc.pid)

    def since(self, at: float | None) -> float | None:
        return None if at is None else round(at - self.started, 3)

    def record(self, origin: float | None = None, origin_name: str = "kill", from_: float | None = None,
               lines: int = 120) -> dict:
        """What was seen, from the start (or ``from_``), times from its start and from ``origin``."""
        def stamp(at: float) -> dict:
            out = {"since_start_s": self.since(at)}
            if origin is not None:
                out[f"since_{origin_name}_s"] = round(at - origin, 3)
            return out

        keep = [(at, line) for at, line in self.lines if (from_ is None or at >= from_)
                and KEY_LINES.search(line) and not any(noise in line for noise in NOISE)]
        if len(keep) > lines:  # the first and last halves: the rendezvous and the end
            gap = (keep[lines // 2][0], f"... {len(keep) - lines} lines left out ...")
            keep = keep[:lines // 2] + [gap] + keep[-lines // 2:]
        return {
            "label": self.label, "node_rank": self.rank, "http_port": self.port, "pid": self.proc.pid,
            "argv": self.argv[1:], "env": self.env,
            "listen_s": self.since(self.listen_at), "first_health_200_s": self.since(self.first_200_at),
            "exit_status": self.proc.returncode, "exit_s": self.since(self.exit_at),
            "events": [{**stamp(at), "what": what, **({"detail": detail} if detail is not None else {})}
                       for at, what, detail in self.events if from_ is None or at >= from_],
            "key_lines": [{**stamp(at), "line": line[:400]} for at, line in keep],
            "log": self.log_path.name,
        }

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)


def end_all(ranks) -> dict:
    """SIGKILL to every session of ``ranks``, then wait until each process is gone: what was left."""
    left = {r.label: sorted(r.session().values()) for r in ranks}
    for rank in ranks:
        rank.kill()
    began = time.monotonic()
    while any(r.session() for r in ranks) and time.monotonic() - began < GONE_CAP_S:
        time.sleep(0.1)
    for rank in ranks:
        with contextlib.suppress(Exception):
            rank.proc.wait(5)
        rank.done.set()
    return {"processes_left_when_ended": {k: v for k, v in left.items() if v},
            "gone_s": round(time.monotonic() - began, 2),
            "still_there": {r.label: r.session() for r in ranks if r.session()}}


class Prober(threading.Thread):
    """``method path`` on ``port`` every ``every`` s (each answered or timed out) until stopped."""

    def __init__(self, port: int, method: str, path: str, body=None, every: float = PROBE_EVERY_S,
                 timeout: float = 30.0):
        super().__init__(daemon=True)
        self.url, self.method, self.body = f"http://127.0.0.1:{port}{path}", method, body
        self.every, self.timeout = every, timeout
        self.answers: list[tuple[float, float, dict]] = []
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stopping.is_set():
            sent = time.monotonic()
            answer = gpu_pd.http(self.method, self.url, self.body, timeout=self.timeout)
            self.answers.append((sent, time.monotonic(), brief(answer)))
            self.stopping.wait(self.every)

    def record(self, origin: float) -> list[dict]:
        """Each answer from ``origin``, a run of equal answers kept as its first and last."""
        out, previous = [], None
        for sent, answered, answer in self.answers:
            key = (answer.get("status"), (answer.get("error") or "")[:60])
            entry = {"sent_s": round(sent - origin, 3), "answered_s": round(answered - origin, 3), **answer}
            if key == previous and len(out) > 1 and out[-1].get("same_as_previous"):
                out[-1] = {**entry, "same_as_previous": out[-1]["same_as_previous"] + 1}
            elif key == previous:
                out.append({**entry, "same_as_previous": 1})
            else:
                out.append(entry)
            previous = key
        return out


# --- the scenarios ----------------------------------------------------------------------


class Bench:
    """The run: its transcript, the site and server entry, the environment every rank gets."""

    def __init__(self, args):
        self.args = args
        self.out = Path(args.out)
        self.site = str(Path(args.site).resolve())
        self.entry = ([sys.executable, str(PROJECT_ROOT / "files" / "standin" / "sglang_standin.py")] if args.standin
                      else [sys.executable, "-m", "sglang.launch_server"])
        self.transcript = Transcript(self.out / "multinode.json")
        self.scenarios: dict[str, dict] = {}
        self.memory_env: dict = {}
        self.deadline = time.monotonic() + args.budget_s
        self.model = None
        self.finished_logs: list[Path] = []

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self, key: str, record: dict) -> None:
        self.scenarios[key] = record
        self.transcript.save(scenarios=self.scenarios, memory_check_env=self.memory_env or None)

    def ports(self, index: int) -> dict:
        base = self.args.base_port + 10 * index
        return {"head": base, "rank1": base + 1, "late": base + 2, "init": base + 5}

    def rank(self, label: str, rank: int, port: int, init: int, extra=(), env=None) -> Rank:
        argv = [*self.entry, "--model-path", str(self.model), "--port", str(port), *GROUP_FLAGS,
                "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{init}", *extra]
        return Rank(label, rank, argv, {**GROUP_ENV, "NCCL_HOSTID": HOST_IDS[rank], **self.memory_env, **(env or {})},
                    port, self.site)

    def wait_group(self, head: Rank, other: Rank, cap_s: float) -> dict:
        """Until the head's /health is 200 and rank 1 listens, a rank ends, or ``cap_s`` from now."""
        began = time.monotonic()
        while time.monotonic() - began < min(cap_s, max(self.left() - 20, 5)):
            if head.first_200_at and other.listen_at:
                return {"serves": True}
            if head.exit_at or other.exit_at:
                time.sleep(1.5)  # the other's reaction and the log's last lines
                return {"serves": False, "ended": [r.label for r in (head, other) if r.exit_at]}
            time.sleep(0.1)
        return {"serves": False, "timeout_s": round(time.monotonic() - began, 1)}

    def group(self, key: str, index: int, order=(0, 1), late_s: float | None = None, env=None) -> dict:
        """Start a group's ranks in ``order``, the second ``late_s`` after the first, and wait until it serves."""
        ports = self.ports(index)
        late_s = self.args.late_s if late_s is None else late_s
        started, t0 = {}, time.monotonic()
        for position, rank in enumerate(order):
            while position and time.monotonic() - t0 < late_s:
                time.sleep(0.05)
            started[rank] = self.rank(f"{key}-rank{rank}", rank, ports["head" if rank == 0 else "rank1"], ports["init"],
                                      env=env)
        return {"head": started[0], "rank1": started[1]}

    def pack_logs(self) -> None:
        files = sorted(LOGS.glob("*.log"))
        with tarfile.open(self.out / "multinode-logs.tar.xz", "w:xz") as archive:
            for path in files:
                archive.add(path, arcname=path.name)

    # a: the head first, rank 1 later
    def a_head_first(self, key: str, index: int) -> dict | None:
        record = {"what": f"the head (node rank 0), then rank 1 {self.args.late_s} s later; NCCL_DEBUG=INFO"}
        g = self.group(key, index, env=NCCL_INFO)
        head, other = g["head"], g["rank1"]
        record["at_rank1_start"] = {"head_since_start_s": head.since(other.started),
                                    "head_listens": listening(head.port), "head_health": head.health,
                                    "head_exit": head.proc.poll()}
        self.save(key, record)
        record["wait"] = self.wait_group(head, other, READY_CAP_S)
        unbalanced = [line for _, line in head.lines + other.lines if UNBALANCED in line]
        if unbalanced and not self.memory_env:
            record["refused_unbalanced"] = unbalanced[:4]
            record.update(ranks={r.label: r.record() for r in (head, other)}, end=end_all([head, other]))
            self.save(key + "_memory_check_on", record)
            self.memory_env = dict(MEMORY_CHECK_OFF)
            log(f"{key}: refused as unbalanced; again with {self.memory_env}")
            return self.a_head_first(key, index + 20)
        if record["wait"]["serves"]:
            record["rank1_answers"] = {
                f"{m} {p}": brief(gpu_pd.http(m, f"http://127.0.0.1:{other.port}{p}", body, timeout=30))
                for m, p, body in (("GET", "/health", None), ("GET", "/ping", None), ("GET", "/health_generate", None),
                                   ("POST", "/generate", GENERATE), ("GET", "/v1/models", None),
                                   ("GET", "/server_info", None))}
            record["head_answers"] = {
                f"{m} {p}": brief(gpu_pd.http(m, f"http://127.0.0.1:{head.port}{p}", body, timeout=60))
                for m, p, body in (("GET", "/health", None), ("POST", "/generate", GENERATE),
                                   ("GET", "/v1/models", None))}
        record["processes"] = {r.label: sorted(r.session().values()) for r in (head, other)}
        record["ranks"] = {r.label: r.record() for r in (head, other)}
        self.save(key, record)
        log(f"{key}: head listens {head.since(head.listen_at)} s, 200 at {head.since(head.first_200_at)} s; "
            f"rank 1 listens {other.since(other.listen_at)} s")
        return {"head": head, "rank1": other} if record["wait"]["serves"] else self._end(key, record, [head, other])

    def _end(self, key: str, record: dict, ranks) -> None:
        record["end"] = end_all(ranks)
        self.save(key, record)
        self.pack_logs()
        return None

    def watch_after(self, key: str, record: dict, origin: float, watched: Rank, ranks, cap_s: float,
                    probers=()) -> None:
        """After ``origin`` (a kill), until ``watched`` ends or ``cap_s``: every rank's record, saved every 5 s."""
        saved = 0.0
        while time.monotonic() - origin < min(cap_s, max(self.left() - 15, 5)):
            if watched.exit_at is not None and time.monotonic() - watched.exit_at > 3.0:
                break
            if time.monotonic() - saved > 5:
                record["ranks"] = {r.label: r.record(origin, from_=origin) for r in ranks}
                record["probes"] = {name: p.record(origin) for name, p in probers}
                self.save(key, record)
                saved = time.monotonic()
            time.sleep(0.2)
        for _, prober in probers:
            prober.stopping.set()
        record["watched_s"] = round(time.monotonic() - origin, 2)
        record["watched_ended"] = watched.exit_at is not None
        record["ranks"] = {r.label: r.record(origin, from_=origin) for r in ranks}
        record["probes"] = {name: p.record(origin) for name, p in probers}
        for rank in ranks:
            if rank.exit_at is None:
                record.setdefault("alive_at_cap", {})[rank.label] = sorted(rank.session().values())

    def killed(self, key: str, index: int, victim: str, sig: int, whole_session: bool, group=None,
               stream: bool = False) -> None:
        """A group (``group``, or a new one) serving, ``sig`` to ``victim``; the other rank watched."""
        whom = "session" if whole_session else "main process alone"
        when = "while a streamed /generate is in flight" if stream else "while the group is idle"
        record = {"what": f"{signal.Signals(sig).name} to {victim}'s {whom} {when}"}
        if group is None:
            g = self.group(key, index)
            group = {"head": g["head"], "rank1": g["rank1"]}
            record["group"] = "started for this scenario"
            record["wait"] = self.wait_group(group["head"], group["rank1"], READY_CAP_S)
            record["start"] = {r.label: r.record() for r in group.values()}
            self.save(key, record)
            if not record["wait"]["serves"]:
                return self._end(key, record, list(group.values()))
        else:
            record["group"] = "the previous scenario's, still serving"
        head, other = group["head"], group["rank1"]
        target, survivor = (other, head) if victim == "rank1" else (head, other)
        record["processes_before"] = {r.label: sorted(r.session().values()) for r in (head, other)}
        holder, conn = {}, None
        if stream:
            conn = updates.Counting("127.0.0.1", head.port, KILL_AFTER_EVENTS)
            payload = {"text": PROMPT, "stream": True,
                       "sampling_params": {"max_new_tokens": STREAM_TOKENS, "temperature": 0, "ignore_eos": True}}

            def streaming() -> None:
                holder["sent"] = time.monotonic()
                holder["answer"] = updates.exchange(head.port, "POST", "/generate", payload, conn=conn,
                                                    timeout=WATCH_S + 30)
                holder["ended"] = time.monotonic()

            stream_thread = threading.Thread(target=streaming, daemon=True)
            stream_thread.start()
            record["stream_reached_kill_point"] = conn.reached.wait(60)
            record["stream_events_at_kill"] = conn.events
        probers = [("head_generate", Prober(head.port, "POST", "/generate", GENERATE))] if victim == "rank1" else \
                  [("rank1_health", Prober(other.port, "GET", "/health", timeout=10))]
        before = target.session()
        origin = time.monotonic()
        if whole_session:
            target.kill(sig)
        else:
            os.kill(target.proc.pid, sig)
        record["kill"] = {"signal": signal.Signals(sig).name, "to": target.label,
                          "whole_session": whole_session, "target_since_start_s": target.since(origin),
                          "survivor_since_start_s": survivor.since(origin)}
        log(f"{key}: {record['kill']}")
        if not whole_session:  # SIGTERM to the main process alone: when each process of its session ends
            threading.Thread(target=self._gone_times, args=(target, before, origin, record), daemon=True).start()
        self.watch_after(key, record, origin, survivor, [head, other],
                         WATCH_S if whole_session else SIGTERM_WATCH_S, probers)
        if stream:
            stream_thread.join(max(1.0, min(30.0, self.left() - 10)))
            conn.close()
            answer = holder.get("answer", {"error": "the stream had not ended"})
            record["stream"] = updates.stream_summary(answer, holder.get("sent", origin) - origin, {"kill": 0.0})
            record["stream"]["events_counted"] = conn.events
            record["stream"]["last_chunks"] = [c["data"][:600] for c in answer.get("chunks", [])[-3:]]
            record["stream"]["ended_since_kill_s"] = round(holder["ended"] - origin, 3) if "ended" in holder else None
            record["stream"].pop("timeline", None)
        self._end(key, record, [head, other])
        log(f"{key}: survivor {survivor.label} exit {survivor.proc.returncode} at "
            f"{record['ranks'][survivor.label]['exit_s']} s; target exit {target.proc.returncode}")

    @staticmethod
    def _gone_times(target: Rank, seen: dict, origin: float, record: dict) -> None:
        gone = {}
        while len(gone) < len(seen) and time.monotonic() - origin < SIGTERM_WATCH_S + 5:
            alive = target.session()
            for pid, name in seen.items():
                if pid not in alive and pid not in gone:
                    gone[pid] = round(time.monotonic() - origin, 3)
            time.sleep(0.05)
        record["target_processes_gone_since_kill_s"] = [{"process": name, "gone_s": gone.get(pid)}
                                                        for pid, name in seen.items()]

    def head_alone(self, key: str, index: int) -> Rank:
        ports = self.ports(index)
        return self.rank(f"{key}-rank0", 0, ports["head"], ports["init"], extra=("--dist-timeout", str(DIST_TIMEOUT_S)))

    def head_alone_record(self, key: str, head: Rank, beside: str | None, cap_s: float = DIST_TIMEOUT_S + 70) -> None:
        while head.exit_at is None and time.monotonic() - head.started < cap_s and self.left() > 10:
            time.sleep(0.2)
        record = {"what": f"the head alone, --dist-timeout {DIST_TIMEOUT_S}: no rank 1 ever starts",
                  "ran_beside": beside,
                  "rank": head.record(), "port_ever_listened": head.listen_at is not None,
                  "timeout_sources": timeout_sources(self.site)}
        self._end(key, record, [head])
        log(f"{key}: exit {head.proc.returncode} at {head.since(head.exit_at)} s, "
            f"port listened {head.listen_at is not None}")

    def rank1_first_then_late(self, index: int, do_g: bool) -> None:
        key = "e_rank1_first"
        record = {"what": f"rank 1, then the head {self.args.late_s} s later"}
        g = self.group(key, index, order=(1, 0))
        head, other = g["head"], g["rank1"]
        record["at_head_start"] = {"rank1_since_start_s": other.since(head.started),
                                   "rank1_listens": listening(other.port), "rank1_exit": other.proc.poll()}
        record["wait"] = self.wait_group(head, other, READY_CAP_S)
        if record["wait"]["serves"]:
            answer = gpu_pd.http("POST", f"http://127.0.0.1:{head.port}/generate", GENERATE, timeout=60)
            record["head_generate"] = brief(answer)
        record["ranks"] = {r.label: r.record() for r in (head, other)}
        self.save(key, record)
        log(f"{key}: {record['wait']}; head 200 at {record['ranks'][head.label]['first_health_200_s']} s")
        if not (do_g and record["wait"]["serves"] and self.left() > 40):
            return self._end(key, record, [head, other])
        key = "g_late_rank"
        late_record = {"what": "a whole group (e's) serving, then another rank 1 at the same init address, "
                               "its own HTTP port"}
        ports = self.ports(index)
        origin = time.monotonic()
        late = self.rank(f"{key}-late-rank1", 1, ports["late"], ports["init"])
        probers = [("head_generate", Prober(head.port, "POST", "/generate", GENERATE, every=2.0)),
                   ("rank1_health", Prober(other.port, "GET", "/health", every=2.0, timeout=10))]
        self.save(key, late_record)
        self.watch_after(key, late_record, origin, late, [head, other, late], LATE_WATCH_S, probers)
        late_record["late_ranks_processes_at_end"] = sorted(late.session().values())
        self._end(key, late_record, [head, other, late])
        record["end"] = late_record["end"]
        self.save("e_rank1_first", record)
        log(f"{key}: late rank exit {late.proc.returncode}, head exit {head.proc.returncode}")


def timeout_sources(site: str) -> dict:
    """Where the default rendezvous wait comes from: sglang's lines (the site) and the device's torch (imported)."""
    found = {}
    for path, pattern in (("sglang/srt/server_args.py", r"dist_timeout: A\[|Set timeout for torch.distributed"),
                          ("sglang/srt/model_executor/model_runner.py", r"timeout=self.server_args.dist_timeout"),
                          ("sglang/srt/distributed/parallel_state.py",
                           r"if timeout is not None:|timeout = timedelta\(seconds=timeout\)|"
                           r"torch.distributed.init_process_group\(|^\s+timeout=timeout,")):
        file = Path(site) / path
        if file.exists():
            found[path] = [f"{n}: {line.strip()}" for n, line in enumerate(file.read_text().splitlines(), 1)
                           if re.search(pattern, line)]
    code = r'''
import inspect, json, torch
import torch.distributed.distributed_c10d as c10d, torch.distributed.constants as constants
import torch.distributed.rendezvous as rdzv
out = {"torch": torch.__version__, "default_pg_timeout": str(constants.default_pg_timeout),
       "default_pg_nccl_timeout": str(getattr(constants, "default_pg_nccl_timeout", None))}
def lines(fn, pattern):
    src, start = inspect.getsourcelines(fn)
    path = inspect.getsourcefile(fn).split("site-packages/")[-1]
    return [f"{path}:{max(start, 1) + i}: {l.strip()}" for i, l in enumerate(src) if pattern(l)]
out["_get_default_timeout"] = lines(c10d._get_default_timeout, lambda l: l.strip())
out["init_process_group"] = lines(c10d.init_process_group,
                                  lambda l: "timeout" in l and ("=" in l or "rendezvous" in l))[:20]
out["constants"] = lines(constants, lambda l: "timeout" in l.lower() and not l.strip().startswith("#"))
out["tcp_rendezvous"] = lines(rdzv._tcp_rendezvous_handler, lambda l: "timeout" in l or "_create_c10d_store" in l)
out["create_c10d_store"] = lines(rdzv._create_c10d_store,
                                 lambda l: "TCPStore" in l or "timeout" in l or "wait_for_workers" in l)
print(json.dumps(out))
'''
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        found["torch"] = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-1500:]}
    except (subprocess.TimeoutExpired, ValueError) as error:
        found["torch"] = {"error": f"{type(error).__name__}: {error}"}
    return found


# --- the run ----------------------------------------------------------------------------


def kill_all() -> None:
    for rank in STARTED:
        rank.kill()


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir(parents=True)
    bench = Bench(args)

    def ended(signum, frame):
        kill_all()
        bench.transcript.save(cut_short=f"signal {signum} at {round(time.monotonic() - began, 1)} s")
        bench.pack_logs()
        sys.exit(128 + signum)

    began = time.monotonic()
    signal.signal(signal.SIGTERM, ended)
    bench.transcript.save(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        what="one sglang server over two node ranks (--nnodes 2) on ONE GPU: both ranks are processes of one host "
             "sharing GPU 0; NCCL_HOSTID gives each its own host hash, so NCCL talks over sockets on loopback "
             "(bench/gpu_multinode.py)",
        versions=acceptance.versions(bench.site), flags=list(GROUP_FLAGS), env=GROUP_ENV, host_ids=HOST_IDS,
        first_group_env=NCCL_INFO, late_s=args.late_s, server="standin" if args.standin else "sglang",
        scenarios_asked=list(args.scenarios))
    bench.model, _draft = acceptance.write_models(MODEL_ROOT)
    wanted = list(args.scenarios)
    kept = None  # a group that serves, handed from a to b
    background = None
    try:
        for index, key in enumerate(SCENARIOS):
            if key not in wanted:
                continue
            if bench.left() < 45:
                bench.save(key, {"not_run": f"{round(bench.left())} s of the budget left"})
                continue
            log(f"{key}: {round(bench.left())} s left")
            gpu = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader"],
                                 capture_output=True, text=True).stdout.strip() if shutil.which("nvidia-smi") else None
            if kept and key != "b_rank1_killed_idle":  # a's group, when b is not asked for
                bench.scenarios["a_head_first"]["end"] = end_all(list(kept.values()))
                kept = None
            if key == "a_head_first":
                kept = bench.a_head_first(key, index)
            elif key == "b_rank1_killed_idle":
                bench.killed(key, index, "rank1", signal.SIGKILL, True, group=kept)
                kept = None
            elif key == "c_rank1_sigterm":
                if "f_head_alone_dist_timeout" in wanted:
                    f_key = "f_head_alone_dist_timeout"
                    background = bench.head_alone(f_key, SCENARIOS.index(f_key))
                bench.killed(key, index, "rank1", signal.SIGTERM, False)
            elif key == "f_head_alone_dist_timeout":
                bench.head_alone_record(key, background or bench.head_alone(key, index),
                                        "c_rank1_sigterm's group (started with it)" if background else None)
                background = None
            elif key == "d_head_killed":
                bench.killed(key, index, "head", signal.SIGKILL, True)
            elif key == "e_rank1_first":
                bench.rank1_first_then_late(index, "g_late_rank" in wanted)
            elif key == "g_late_rank":
                if "e_rank1_first" not in wanted:
                    bench.rank1_first_then_late(SCENARIOS.index("e_rank1_first"), True)
            elif key == "b2_rank1_killed_streaming":
                bench.killed(key, index, "rank1", signal.SIGKILL, True, stream=True)
            bench.scenarios.get(key, {}).setdefault("gpu_memory_used_at_start", gpu)
            bench.transcript.save(scenarios=bench.scenarios)
            bench.pack_logs()
    finally:
        if kept:
            end_all(list(kept.values()))
        if background is not None:
            end_all([background])
        kill_all()
        bench.transcript.save(seconds=round(time.monotonic() - began, 1))
        bench.pack_logs()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", required=True, help="the folder of the server's packages (the unpacked carry)")
    parser.add_argument("--out", required=True, help="where multinode.json and the packed logs go")
    parser.add_argument("--budget-s", type=float, default=540.0, help="the whole run's seconds, ends included")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument("--late-s", type=float, default=LATE_S, help="how long after the first rank the second starts")
    parser.add_argument("--base-port", type=int, default=BASE_PORT, help="scenario i's ports from here + 10 i")
    parser.add_argument("--standin", action="store_true", help="the stand-in instead of sglang (a rehearsal)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
