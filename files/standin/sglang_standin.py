"""
A stand-in for the SGLang server process, for GPU-less hosts of the local fleet.

Real SGLang needs GPUs; the local fleet has none. This process takes the place of
``python -m sglang.launch_server <flags>`` and nothing else is simulated: the
unit, the venv, the installed sglang wheel and its patched ``kimi_k25.py`` are
all real. It is a test double and never belongs in a production inventory.

    <venv>/bin/python /opt/sglfleet/standin/sglang_standin.py <sglang flags...>

It follows sglang 0.5.9 (file:line below are of the 0.5.9 wheel, under
``sglang/``), in the order of start-up:

1. **Flags**: exactly those of the installed sglang, read from its own
   ``srt/server_args.py`` (``server_flags``) without importing it; an unknown
   flag exits 2 with argparse's message. ``--config FILE`` is merged first.
2. **ServerArgs** (``standin_server_args``): ``__post_init__``'s defaults and
   refusals for speculative decoding and parallelism, then
   ``check_server_args``: an uncaught exception, exit 1, nothing listens
   (``launch_server.py:32``, ``entrypoints/engine.py:1026``). A Kimi K2.5
   ``kimi_k25.py`` that does not parse ends the start here too: sglang logs
   the import errors it ignores, then cannot resolve the model class (an
   uncaught ValueError, exit 1; ``standin_model.model_class_check``).
3. **Loading the model** (``_launch_subprocesses``, ``http_server.py:1893-1900``):
   ``SGLFLEET_STANDIN_WARMUP`` seconds for a staged model's config and every safetensors shard
   (``standin_model``: a missing or truncated file fails as 0.5.9's loader
   does, "Scheduler hit an exception" and exit 1; the warm-up grows by the bytes
   read over ``SGLFLEET_STANDIN_LOAD_BPS``), "Load weight end", then the EAGLE-3
   check of the installed ``kimi_k25.py`` (a class without the delegation
   methods: "Scheduler hit an exception" with the AttributeError's traceback,
   "Received sigquit ...", and the server SIGKILLs itself, exit -9, as 0.5.14
   did on an H200 after loading both models). **Nothing listens meanwhile**: connections are refused, and
   SIGTERM has its default action (no handler is installed yet).
3a. **A rank of a group** (``--nnodes`` above 1; ``standin_multinode``): before loading, rank 0
   waits at ``--dist-init-addr`` for every other rank, which connects to it; after loading, a
   rank above 0 serves only a dummy ``/health``; a peer gone takes the rank down, as NCCL does.
4. **Listener, then warm-up** (``uvicorn.run`` at ``http_server.py:1966``, the
   warm-up thread at 347-352): ``/health`` is 503 until the server's own
   8-token warm-up generation answers, then ``Up`` (``standin_http``).
5. **Serving** (``standin_engine``): generations as timed forward passes;
   decode-stats gauges every ``--decode-log-interval`` decode passes,
   ``meta_info`` spec fields, 0.5.9's counters and histograms
   (``standin_metrics``) with ``--enable-metrics``.
6. **SIGTERM**: before the first generation request, uvicorn's handler: stop
   listening, let requests in flight finish, then die of SIGTERM (uvicorn
   re-raises it, ``uvicorn/server.py:332-349``). From the first generation on
   (the warm-up is one), 0.5.9's own handler (``tokenizer_manager.py:1455-1464,
   2113-2149, 2500-2504``): ``/health`` answers 503 at once, everything else is
   still served, a watchdog looks every 5 s and, once no request is in flight
   (or at once when ``UnHealthy`` or with ``SGL_FORCE_SHUTDOWN``), the process
   SIGKILLs itself (``kill_process_tree(..., include_parent=True)``,
   ``utils/common.py:1149-1153``): its parent sees ``status=9/KILL`` (sglfleet's
   launch script, the unit's main process, reports a stop asked for as a success).
   With 0.5.14 or later installed, between the watchdog's last look and the kill, the
   schedulers' exit (0.5.14 ``tokenizer_manager.py:2646-2655``: ``ShutdownReq``, then
   ``time.sleep`` in the event loop until they are gone, at most 15 s): the port
   still accepts, nothing is answered, ``SGLFLEET_STANDIN_SCHEDULER_EXIT_S`` long, as
   the H200 record shows (``tests/test_standin_http_record.py``). 0.5.19 and later
   end otherwise after it (their children reaped, then ``sys.exit(0)`` or uvicorn's
   stop, not a SIGKILL of themselves); the stand-in ends them as 0.5.14.
   **SIGINT** stays uvicorn's: a graceful stop, then death by SIGINT.

Environment:

- ``SGLFLEET_STANDIN_WARMUP``: model loading seconds (float, default 5).
- ``SGLFLEET_STANDIN_TIME_SCALE``: multiplies sglang's own fixed waits (the SIGTERM
  watchdog's 5 s, the CPU monitor's 5 s, the warm-up's and ``/health``'s 1 s
  looks); default 1, sglang's timing. The local fleet's inventory sets it lower
  (``standin_time_scale``).
- ``SGLFLEET_STANDIN_STEP_S``: seconds one forward pass takes (default 0.005).
- ``SGLFLEET_STANDIN_SCHEDULER_EXIT_S``: seconds 0.5.14's schedulers take to exit on a
  stop (default 2.7, the H200 record's; not scaled: it is their work, not a wait of sglang's).
- ``SGLFLEET_STANDIN_SPEC_ACCEPT_LENGTH``: mean tokens per EAGLE verify step
  (default 2.8, between 1 and the draft tokens); the gauges and ``meta_info``
  are computed from the steps it gives, as 0.5.9 computes them.
- ``SGLFLEET_STANDIN_FAULT_FILE``, ``SGLFLEET_ROOT``,
  ``SGLFLEET_STANDIN_SLOW_WARMUP``, ``SGLFLEET_STANDIN_SLOW_GENERATE``: faults,
  see ``standin_faults`` (``crash``, ``hang``, ``unready``, ``slow``,
  ``slow-load <seconds>``, ``slow-after <seconds> [<factor>]``, each optionally
  ``spare <release-id>``).
- sglang's own ``SGLANG_HEALTH_CHECK_TIMEOUT``,
  ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION``, ``SGLANG_ENABLE_SPEC_V2``,
  ``SGL_FORCE_SHUTDOWN`` act as in 0.5.9.

Not faithful: no tokenizer (a word is a token), no prefix cache
(``cache_hit_rate`` 0, no ``sglang:cached_tokens_total``), a fixed notional KV
pool (``MAX_TOTAL_NUM_TOKENS``), one process (the CPU time of
``sglang:process_cpu_seconds_total`` counts for the tokenizer, 0 for the
detokenizer), only the metrics a unified
(non-PD), non-LoRA, grammar-free server shows, and the warm-up is a
``/generate`` even for Kimi K2.5 (0.5.9 sends an image through
``/v1/chat/completions`` to a model with a vision config). With a later
sglang installed the flags follow it, the behaviour stays 0.5.9's but for the stop
after SIGTERM (6.) and ``reasoning_tokens`` (``standin_engine``). Logs go to stderr (journald);
the API key never does. Standard library only (python3.11 on the hosts), but jinja2
for chat templates (``standin_chat``; the dev stacks carry it, as sglang's own do).

**Example:**

.. code:: shell

    SGLFLEET_STANDIN_WARMUP=0.5 python3 sglang_standin.py --model-path /models/kimi --port 30000
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:  # on a host: shipped beside this file
    import server_flags
except ImportError:  # in the repository: files/standin/ -> files/shipped/
    sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "shipped"))
    import server_flags

from standin_compile import Compiler, KernelImageInvalid
from standin_disagg import Disaggregation
from standin_multinode import DEFAULT_TIMEOUT_S, Rendezvous, serve_dummy_health
from standin_engine import Engine
from standin_faults import read_fault
from standin_http import TIME_SCALE, Standin, serve
from standin_metrics import Registry, start_cpu_monitor
from standin_model import eagle3_check, load_weights, model_class_check, model_config, release_tuple
from standin_weights import CRASH_DIAGNOSTICS_S, CRASH_DIAGNOSTICS_SINCE, Weights
from standin_server_args import (check_server_args, find_sglang, merge_config, server_args_repr,
                                 resolve, sglang_version)
from standin_auth import route_levels
import standin_tls
from standin_secrets import hidden_from_repr, redacts_server_info

logger = logging.getLogger("sglang.standin")

# sglang 0.5.9 logs "[2025-01-01 12:00:00] message" (and "... TP0] ..." in the scheduler).
LOG_FORMAT = "[%(asctime)s] %(message)s"
SIGTERM_WATCHDOG_S = 5 * TIME_SCALE  # tokenizer_manager.py:2115, 2144: asyncio.sleep(5)
CPU_MONITOR_S = 5 * TIME_SCALE  # metrics/cpu_monitor.py:7: interval=5.0
# From 0.5.14 the watchdog asks the schedulers to exit (ShutdownReq) and waits for them with
# time.sleep in the event loop (0.5.14 tokenizer_manager.py:2646-2654; absent up to 0.5.13.post1).
SHUTDOWN_REQ_SINCE = (0, 5, 14)
SCHEDULER_EXIT_DEADLINE_S = 15 * TIME_SCALE  # :2652, deadline = time.monotonic() + 15: sglang's own wait
# A stop's phases, and which scale: the 503 window ends at the watchdog's look (its sleep, sglang's own:
# scaled); the silent window is the schedulers' exit, their work (release, CUDA and NCCL teardown), not
# a wait sglang sets, so like loading it is not scaled, but the 15 s deadline that caps it is; the kill
# is at once. The H200 record (tiny Llama, tp 1) took 3.1 s idle and 2.4 s after a drain from the
# watchdog's look to the SIGKILL; the default is between. At the local fleet's 0.1 the cap makes it
# 1.5 s, paid by each stop of a host on 0.5.14 or later (its 0.5.9 hosts pay nothing).
SCHEDULER_EXIT_S = float(os.environ.get("SGLFLEET_STANDIN_SCHEDULER_EXIT_S", "2.7"))


def die_of(signum: int) -> None:
    """End the process by ``signum`` with its default action, as a re-raised signal does."""
    logging.shutdown()
    if signum != signal.SIGKILL:  # main thread only; SIGKILL has no handler to reset
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    time.sleep(10)  # SIGKILL cannot be caught; the others end the process at once


def scheduler_crashed(error: Exception, trace: str | None = None, settle_s: float = 0.0) -> None:
    """A scheduler's exception: it sends SIGQUIT to the server, which kills its own tree,
    itself included (scheduler.py:3191, engine.py:862-874, tokenizer_manager.py:2506-2511).
    ``trace``, the formatted traceback, is logged as sglang logs it (0.5.14 on an H200 too);
    ``settle_s``, the wait before the kill from 0.5.13 on (0.5.14 tokenizer_manager.py:2585-2588)."""
    logger.error("Scheduler hit an exception: " + (trace or f"{type(error).__name__}: {error}"))
    logger.error("Received sigquit from a child process. It usually means the child failed.")
    if settle_s:
        logger.info("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
        time.sleep(settle_s)
    die_of(signal.SIGKILL)


def peer_lost(rank: int, standin: Standin | None, version: str) -> None:
    """
    A rank of the group is gone: NCCL's next collective fails, and the scheduler with it. Before the server
    serves, the launch phase's SIGQUIT handler kills the tree at once. Once it serves (``standin``), the
    running phase's (0.5.9 ``tokenizer_manager.py:2506-2511``); from 0.5.13 on it first runs the crash
    diagnostics while the schedulers live (0.5.14 ``tokenizer_manager.py:2585-2606``): 5 s, py-spy, then
    ``SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS`` (60) in the event loop's thread, nothing answered, as the
    H100 record shows (``tests/data/gpu/multinode-h100-sglang-0.5.14.json``: the kill 65.6 s after rank 1's).
    """
    error = RuntimeError(f"NCCL error: remote process exited or there was a network error (rank {rank} is gone)")
    if standin is None:
        scheduler_crashed(error)
    logger.error(f"Scheduler hit an exception: {type(error).__name__}: {error}")
    logger.error("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
    pyspy, coredump = (_env_on(f"SGLANG_{what}_BEFORE_CRASH") for what in ("PYSPY_DUMP", "CUDA_COREDUMP"))
    if release_tuple(version) >= CRASH_DIAGNOSTICS_SINCE and (pyspy or coredump):
        standin.loop_blocked.set()
        logger.info("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
        time.sleep(CRASH_DIAGNOSTICS_S * TIME_SCALE)
        wait_s = float(os.environ.get("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS") or 60.0)
        if coredump and wait_s > 0:
            logger.info(f"Waiting {wait_s:.1f} seconds for CUDA coredumps before exiting.")
            time.sleep(wait_s * TIME_SCALE)
    die_of(signal.SIGKILL)  # kill_process_tree(os.getpid())


def _env_on(name: str) -> bool:
    """An ``EnvBool`` of sglang's ``environ.py`` that defaults to True."""
    return os.environ.get(name, "true").lower() in ("true", "1", "yes", "y")


def sigterm_watchdog(standin: Standin) -> None:
    """``TokenizerManager.sigterm_watchdog`` (0.5.9 tokenizer_manager.py:2113-2149, 0.5.14 :2612-2656)."""
    while not standin.gracefully_exit:
        time.sleep(SIGTERM_WATCHDOG_S)
    while True:
        rids = standin.engine.in_flight()
        if standin.server_status == "UnHealthy":
            logger.error("Signal SIGTERM received while health check failed. Force exiting.")
            break
        if os.environ.get("SGL_FORCE_SHUTDOWN", "").lower() in ("1", "true", "yes", "on"):
            logger.error("Signal SIGTERM received while force shutdown flag set. Force exiting.")
            break
        logger.info(f"Gracefully exiting... Remaining number of requests {len(rids)}. "
                    f"Remaining requests remaining_rids={rids}.")
        if rids:
            time.sleep(SIGTERM_WATCHDOG_S)
        else:
            break
    if release_tuple(standin.version) >= SHUTDOWN_REQ_SINCE:
        # The event loop sleeps until the schedulers are gone: the port still takes connections
        # (the kernel's backlog) and nothing on any connection is read or answered (standin_http).
        standin.loop_blocked.set()
        time.sleep(min(SCHEDULER_EXIT_S, SCHEDULER_EXIT_DEADLINE_S))
    die_of(signal.SIGKILL)  # kill_process_tree(os.getpid(), include_parent=True)


def hang(host: str, port: int) -> None:
    """The ``hang`` fault: the port takes connections into its backlog; nothing answers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        logger.info(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
        threading.Event().wait()


def missing_gpu(args: dict, visible: str | None) -> int | None:
    """
    The first GPU ordinal a scheduler would set that ``CUDA_VISIBLE_DEVICES`` hides, else None.

    As 0.5.9 places its schedulers (``srt/entrypoints/engine.py`` ``_launch_subprocesses``,
    ``srt/managers/data_parallel_controller.py``): tp rank r of pp rank p of dp rank d takes GPU
    ``base_gpu_id + ((d * pp_size + p) * tp_size + r) * gpu_id_step`` (with dp attention the dp
    ranks share the tp GPUs), and torch numbers the visible GPUs from 0. The stand-in has no GPU, so with
    ``CUDA_VISIBLE_DEVICES`` unset it checks nothing.

    + args: the resolved server arguments
    + visible: ``CUDA_VISIBLE_DEVICES``, or None when unset
    """
    if visible is None:
        return None
    count = len([one for one in visible.split(",") if one.strip()])
    tp, dp, pp = int(args.get("tp_size") or 1), int(args.get("dp_size") or 1), int(args.get("pp_size") or 1)
    ranks = tp * pp * (1 if args.get("enable_dp_attention") else dp)  # each dp rank tp x pp GPUs on (246-247)
    ranks //= int(args.get("nnodes") or 1)  # a group's host runs its share (engine.py:925-937)
    base, step = int(args.get("base_gpu_id") or 0), int(args.get("gpu_id_step") or 1)
    return next((base + rank * step for rank in range(ranks) if base + rank * step >= count), None)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt="%Y-%m-%d %H:%M:%S",
                        stream=sys.stderr)
    package = find_sglang()
    flagset = server_flags.load_flags(package / "srt" / "server_args.py")
    parser = server_flags.build_parser(flagset, prog=flagset.prog or "launch_server.py")
    parsed = parser.parse_args(merge_config(argv, flagset))  # exits 2 on a bad flag
    config = model_config(getattr(parsed, "model_path", None))
    args = resolve(flagset, parsed, config.get("architectures"))  # may raise, as 0.5.9
    standin_tls.check(args)  # ServerArgs.__post_init__'s _handle_ssl_validation (0.5.14 server_args.py:2469)
    version = sglang_version(package)
    fault = read_fault()
    # api_key too, as 0.5.9 engine.py:1031, unless the installed server_args.py declares it repr=False
    logger.info(f"server_args={server_args_repr(args, hidden_from_repr(package))}")
    logger.info(f"stand-in for sglang {version} (no GPU): {package}"
                + (f"; fault mode {fault.mode}" if fault else ""))
    check_server_args(args)  # _launch_subprocesses, before the schedulers start
    # The tokenizer manager resolves the model class (its multimodal processor) before any scheduler:
    # a kimi_k25.py that does not parse ends the start here, uncaught, exit 1 (0.5.14 on an H200).
    model_class_check(package, config.get("architectures"))

    # The schedulers load the model; SIGTERM keeps its default action meanwhile.
    warmup = float(os.environ.get("SGLFLEET_STANDIN_WARMUP", "5"))
    prefill_extra = 0.0
    if fault is not None and fault.mode == "slow":
        slow = os.environ.get("SGLFLEET_STANDIN_SLOW_WARMUP")
        warmup = float(slow) if slow else warmup * 10
        prefill_extra = float(os.environ.get("SGLFLEET_STANDIN_SLOW_GENERATE", "2"))
    if fault is not None and fault.mode == "slow-load":
        warmup += fault.load_s
    if fault is not None and fault.mode == "crash":
        time.sleep(0.3)
        logger.error("Scheduler hit an exception: Traceback (most recent call last):\n"
                     '  File "sglang/srt/model_executor/model_runner.py", in load_model\n'
                     "torch.AcceleratorError: CUDA error: an illegal memory access was "
                     "encountered\n(stand-in fault mode: crash)")
        return 1
    if (missing := missing_gpu(args, os.environ.get("CUDA_VISIBLE_DEVICES"))) is not None:
        # Each scheduler sets its device before it loads anything; torch then refuses an ordinal it cannot see.
        time.sleep(0.3)
        logger.error("Scheduler hit an exception: Traceback (most recent call last):\n"
                     '  File "sglang/srt/managers/scheduler.py", in run_scheduler_process\n'
                     '  File "sglang/srt/model_executor/model_runner.py", in init_torch_distributed\n'
                     "    torch.get_device_module(self.device).set_device(self.gpu_id)\n"
                     f"torch.AcceleratorError: CUDA error: invalid device ordinal (GPU {missing}; "
                     f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']})")
        return 1
    registry = Registry() if args.get("enable_metrics") else None
    if registry is not None:  # the tokenizer's and the detokenizer's, started before the model loads
        start_cpu_monitor(registry, ("tokenizer", "detokenizer"), CPU_MONITOR_S)
    engine = Engine(args, registry,
                    step_s=float(os.environ.get("SGLFLEET_STANDIN_STEP_S", "0.005")),
                    accept_length=float(os.environ.get("SGLFLEET_STANDIN_SPEC_ACCEPT_LENGTH",
                                                       "2.8")),
                    prefill_extra_s=prefill_extra, crash=scheduler_crashed, version=version)
    target, draft = {}, {}  # each tensor's shape and digest: what the stand-in says derives from them
    try:  # each rank's model runner joins torch.distributed before it loads anything (standin_multinode)
        group = Rendezvous.join(args, float(args.get("dist_timeout") or DEFAULT_TIMEOUT_S))
    except TimeoutError as error:  # the scheduler's exception in the launch phase: SIGQUIT, its own SIGKILL
        scheduler_crashed(error, f"torch.distributed.DistStoreError: {error}")
    serving: dict = {}  # the Standin, once the head serves
    if group is not None:  # NCCL's collectives fail once a peer is gone: this rank's scheduler with them
        group.watch(lambda rank: peer_lost(rank, serving.get("standin"), version))
    try:
        started = time.monotonic()
        loaded = load_weights(args.get("model_path"), tensors=target)
        if args.get("speculative_draft_model_path"):
            loaded += load_weights(args.get("speculative_draft_model_path"), tensors=draft)
    except Exception:
        logger.error("Scheduler hit an exception: " + traceback.format_exc().rstrip())
        return 1
    # Loading grows with the weights: at SGLFLEET_STANDIN_LOAD_BPS (bytes a second) beyond the read itself.
    warmup += loaded / float(os.environ.get("SGLFLEET_STANDIN_LOAD_BPS", "1e9"))
    time.sleep(warmup)
    logger.info(f"Load weight end. ({loaded} bytes of weights read in {time.monotonic() - started:.2f} s)"
                if loaded else "Load weight end. (stand-in: no weights)")
    try:  # after the weights, before any CUDA graph: where 0.5.14's scheduler called them on an H200
        eagle3_check(package, args, config.get("architectures"), version)
    except AttributeError as error:  # the scheduler's exception: SIGQUIT, then its own SIGKILL (exit -9)
        scheduler_crashed(error, traceback.format_exc().rstrip())

    # Kernels and CUDA graphs, before the port opens: minutes cold, seconds from the compile cache.
    compiler = Compiler(args, version, corrupt=fault is not None and fault.mode == "corrupt-cache")
    try:
        logger.info(f"Capture cuda graph end. (stand-in: {compiler.startup()})")
    except KernelImageInvalid as error:
        scheduler_crashed(error)
    engine.compiler = compiler

    host, port = args.get("host") or "127.0.0.1", int(args.get("port") or 30000)
    if group is not None and group.rank:  # no tokenizer, no API: the dummy /health, then its schedulers
        serve_dummy_health(host, port)
        while True:  # SIGTERM keeps its default action, as in _launch_subprocesses' proc.join()
            time.sleep(3600)
    if fault is not None and fault.mode == "hang":
        hang(host, port)
    standin = Standin(args, version, config, engine, registry, fault)
    serving["standin"] = standin
    standin.redacts_server_info = redacts_server_info(package)  # as the installed http_server.py answers
    standin.auth_routes = route_levels(package)
    standin.weights = Weights(target, draft, config.get("vocab_size"))
    engine.vocabulary = standin.weights.vocabulary
    # A prefill's bootstrap server starts with the tokenizer manager, before the port opens (standin_disagg).
    standin.disagg = Disaggregation.start(args, argv, version, registry)
    engine.start()
    stop = threading.Event()
    stopped_by: list[int] = []

    def uvicorn_exit(signum, frame):  # uvicorn's handle_exit: a graceful stop
        stopped_by.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, uvicorn_exit)
    signal.signal(signal.SIGINT, uvicorn_exit)
    try:
        server = serve(standin, host, port)
    except OSError as error:
        logger.error(f"[Errno {error.errno}] error while attempting to bind on address "
                     f"({host!r}, {port}): {error.strerror}")
        return 1
    logger.info(f"Uvicorn running on {'https' if server.tls else 'http'}://{host}:{port} (Press CTRL+C to quit)")

    def warm_up():
        if not standin.warmup():
            die_of(signal.SIGKILL)  # kill_process_tree(os.getpid())
        if fault is not None and fault.mode == "slow-after":
            engine.slow_factor = fault.factor
            engine.slow_from = time.monotonic() + fault.after_s

    threading.Thread(target=warm_up, name="warmup", daemon=True).start()

    def sigterm_handler(signum, frame):  # SignalHandler.sigterm_handler
        # asyncio's add_signal_handler calls it with no arguments (tokenizer_manager.py:1457, 2500-2503)
        logger.warning("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        standin.gracefully_exit = True

    while not stop.wait(0.1):
        if standin.first_request.is_set() and signal.getsignal(signal.SIGTERM) is uvicorn_exit:
            # auto_create_handle_loop: loop.add_signal_handler(SIGTERM, ...)
            signal.signal(signal.SIGTERM, sigterm_handler)
            threading.Thread(target=sigterm_watchdog, args=(standin,), daemon=True).start()
    logger.info("Shutting down")
    server.shutdown()  # no new connections
    with standin.in_flight_changed:
        standin.in_flight_changed.wait_for(lambda: standin.in_flight == 0)
    server.server_close()
    die_of(stopped_by[0])
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
