"""Benchmark: build the full-size stack cu130-sglang-0.5.23 on one local-fleet host, offline, from the controller's wheelhouse.

Not part of the test suite (it moves about 4.4 GB and builds a venv of about
10 GB). Two parts, run in order:

1. **Controller**: fetch every locked wheel into the controller's wheelhouse
   (``sglfleet.artifacts.wheelhouse.ensure``, sha256-checked), timed, counting the bytes
   that came from the index (``fetches.jsonl``). A warm wheelhouse fetches 0.
2. **Host** (skipped with ``--controller-only``): one converge on one
   local-fleet host through the real pyinfra over SSH
   (``bench/full_stack_deploy.py``: the service step, then the stack step, as
   deploy.py runs them; preflight would refuse a CUDA stack on a GPU-less host,
   rightly). The host gets the wheels it lacks, builds the venv with uv
   offline (``--offline --no-index --require-hashes``) and runs the
   verification probe with ``--gpu-less``. Measured: wall time of the converge,
   bytes sent to the host (growth of its wheelhouse), disk used by the stack
   folder and by the wheelhouse, free disk before and after and at its lowest
   during the build (df every 2 s), beside what preflight asks for; printed:
   the probe's marker (``verified.json``). A second converge must change
   nothing (pyinfra's 'Grand total' row), and its time is reported too.

The host keeps the stack afterwards (remove it with ``--clean``); each host
holds about 15 GB with it, so run this on a fleet booted for it.

**Example:**

.. code:: shell

    .venv/bin/python bench/full_stack_build.py --controller-only   # fetch, time and count only
    .venv/bin/sglfleet devfleet up --hosts 1
    .venv/bin/python bench/full_stack_build.py --host node1 --clean
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from sglfleet import PROJECT_ROOT, cache_dir

from sglfleet.artifacts import wheelhouse
from sglfleet.artifacts.stacks import load_stack
from sglfleet.devfleet.rootfs import PYTHONS, SUITE  # the benchmarks' hosts run the default OS
from sglfleet.host.layout import LAYOUT
from sglfleet.plan.preflight import disk_needed

STACK = "cu130-sglang-0.5.23"
DEPLOY = "bench/full_stack_deploy.py"
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))


def controller(stack) -> dict:
    """Fetch the stack into the controller's wheelhouse; time and bytes from the index."""
    before = wheelhouse.fetched_bytes()
    started = time.monotonic()
    local = wheelhouse.ensure(stack)
    seconds = time.monotonic() - started
    fetched = wheelhouse.fetched_bytes() - before
    return {
        "wheelhouse": str(wheelhouse.root()),
        "files": len(local),
        "bytes": sum(entry.size for entry in local.values()),
        "fetched_bytes": fetched,
        "seconds": round(seconds, 1),
        "mb_per_s": round(fetched / seconds / 1e6, 1) if fetched and seconds else None,
    }


def free_bytes(fleet, host: str) -> int:
    """Bytes free where the host's stacks live."""
    return int(fleet.exec(host, f"mkdir -p {LAYOUT.stacks} && df -B1 --output=avail {LAYOUT.stacks} | tail -n 1").stdout)


def host_disk(fleet, host: str, stack) -> dict:
    """Bytes of the host's wheelhouse, of the stack's folder, and free where stacks live."""
    # A folder that is not there yet is 0 bytes (du prints nothing then, and a pipe's status is cut's).
    out = fleet.exec(host, f"w=$(du -sb {LAYOUT.wheelhouse} 2>/dev/null | cut -f1); "
                           f"s=$(du -sb {stack.path} 2>/dev/null | cut -f1); echo ${{w:-0}} ${{s:-0}}").stdout.split()
    wheels, built = (int(x) for x in out)
    return {"wheelhouse_bytes": wheels, "stack_bytes": built, "free_bytes": free_bytes(fleet, host)}


def converge(fleet, host: str) -> tuple[float, subprocess.CompletedProcess, int]:
    """One converge: its seconds, its result, and the least free disk seen under the stacks meanwhile."""
    lowest, done_event = [], threading.Event()

    def watch():  # df every 2 s: the build's peak is the uv cache and the venv at once
        while not done_event.wait(2):
            lowest.append(free_bytes(fleet, host))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        done = subprocess.run(
            [PYINFRA, str(fleet.inventory), DEPLOY, "-y", "--limit", host, "--data", f"stack={STACK}"],
            cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=3600,
        )
    finally:
        done_event.set()
        watcher.join()
    return time.monotonic() - started, done, min(lowest, default=0)


def changes(output: str) -> int | None:
    """Operations that changed something, from pyinfra's closing 'Grand total' row (its success column)."""
    row = re.search(r"Grand total\s+\S+\s+(\S+)", output)
    return None if not row else 0 if row.group(1) == "-" else int(row.group(1))


def on_host(stack, host: str | None, clean: bool) -> dict:
    from sglfleet.devfleet import Fleet

    fleet = Fleet(log=lambda line: None)
    if not fleet.hosts:
        raise SystemExit("no local fleet: run `sglfleet devfleet up --hosts 1` first, or pass --controller-only")
    host = host or fleet.hosts[0]
    before = host_disk(fleet, host, stack)
    need = disk_needed(stack, wheelhouse.unpacked_size(stack))  # what preflight asks a host for
    if before["free_bytes"] < need:
        raise SystemExit(f"{host}: {before['free_bytes'] / 1e9:.1f} GB free under {LAYOUT.stacks}, "
                         f"the build needs about {need / 1e9:.1f} GB: free space on the machine")
    seconds, done, lowest_free = converge(fleet, host)
    if done.returncode != 0:
        print(done.stdout[-6000:], file=sys.stderr)
        raise SystemExit(f"{host}: the converge failed (exit {done.returncode}); pyinfra's output is above")
    after = host_disk(fleet, host, stack)
    marker = json.loads(fleet.exec(host, f"cat {stack.marker}").stdout)
    noop_seconds, noop, _ = converge(fleet, host)
    report = {
        "host": host,
        "converge_s": round(seconds, 1),
        "noop_converge_s": round(noop_seconds, 1),
        "noop_ok": noop.returncode == 0 and changes(noop.stdout) == 0,
        "sent_bytes": after["wheelhouse_bytes"] - before["wheelhouse_bytes"],
        "stack_disk_bytes": after["stack_bytes"],
        "wheelhouse_disk_bytes": after["wheelhouse_bytes"],
        "free_before_bytes": before["free_bytes"],
        "free_after_bytes": after["free_bytes"],
        # Approximate: other work on the machine writes to (and frees) the same disk meanwhile.
        "peak_used_bytes": before["free_bytes"] - lowest_free,
        "preflight_needs_bytes": need,
        "probe": marker,
    }
    if clean:
        fleet.exec(host, f"rm -rf {stack.path} {LAYOUT.wheelhouse}", check=False)
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--controller-only", action="store_true",
                        help="only fetch the wheelhouse (no fleet needed)")
    parser.add_argument("--host", help="a local-fleet host (default: the first)")
    parser.add_argument("--clean", action="store_true",
                        help="remove the stack and the wheelhouse from the host afterwards")
    args = parser.parse_args()

    stack = load_stack(STACK).for_python(PYTHONS[SUITE])
    stack.require_complete()
    report = {"stack": stack.id, "files": len(stack.files), "lock_bytes": stack.size,
              "cache": str(cache_dir()),
              "controller": controller(stack)}
    print(json.dumps(report, indent=1), flush=True)
    if not args.controller_only:
        report["host"] = on_host(stack, args.host, args.clean)
        print(json.dumps(report["host"], indent=1))


if __name__ == "__main__":
    main()
