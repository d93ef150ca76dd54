"""Benchmark: build the full-size stack cu130-sglang-0.5.23 on one local-fleet host, offline, from the controller's wheelhouse.

Not part of the test suite (it moves about 4.4 GB and builds a venv of about
10 GB). Two parts, run in order:

1. **Controller**: fetch every locked wheel into the controller's wheelhouse
   (``sglfleet.wheelhouse.ensure``, sha256-checked), timed, counting the bytes
   that came from the index (``fetches.jsonl``). A warm wheelhouse fetches 0.
2. **Host** (skipped with ``--controller-only``): one converge of the stack
   operation on one local-fleet host through the real pyinfra over SSH
   (``bench/full_stack_deploy.py``: the stack step only; preflight would
   refuse a CUDA stack on a GPU-less host, rightly). The host gets the wheels
   it lacks, builds the venv with uv offline (``--offline --no-index
   --require-hashes``) and runs the verification probe with ``--gpu-less``.
   Measured: wall time of the converge, bytes sent to the host (growth of its
   wheelhouse), disk used by the stack folder and by the wheelhouse, free disk
   before and after; printed: the probe's marker (``verified.json``). A second
   converge must be a no-op, and its time is reported too.

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
import os
import subprocess
import sys
import time
from pathlib import Path

from sglfleet import PROJECT_ROOT, wheelhouse
from sglfleet.host.layout import LAYOUT
from sglfleet.stacks import load_stack

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


def host_disk(fleet, host: str, stack) -> dict:
    """Bytes of the host's wheelhouse, of the stack's folder, and free where stacks live."""
    out = fleet.exec(host, (
        f"du -sb {LAYOUT.wheelhouse} 2>/dev/null | cut -f1 || echo 0; "
        f"du -sb {stack.path} 2>/dev/null | cut -f1 || echo 0; "
        f"mkdir -p {LAYOUT.stacks} && df -B1 --output=avail {LAYOUT.stacks} | tail -n 1"
    )).stdout.split()
    wheels, built, free = (int(x) for x in (out + ["0", "0", "0"])[:3])
    return {"wheelhouse_bytes": wheels, "stack_bytes": built, "free_bytes": free}


def converge(fleet, host: str) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run(
        [PYINFRA, str(fleet.inventory), DEPLOY, "-y", "--limit", host, "--data", f"stack={STACK}"],
        cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=3600,
    )
    return time.monotonic() - started, done


def on_host(stack, host: str | None, clean: bool) -> dict:
    from sglfleet.devfleet import Fleet

    fleet = Fleet(log=lambda line: None)
    if not fleet.hosts:
        raise SystemExit("no local fleet: run `sglfleet devfleet up --hosts 1` first, or pass --controller-only")
    host = host or fleet.hosts[0]
    before = host_disk(fleet, host, stack)
    need = 3 * stack.size  # wheels + an installed venv about twice their size
    if before["free_bytes"] < need:
        raise SystemExit(f"{host}: {before['free_bytes'] / 1e9:.1f} GB free under {LAYOUT.stacks}, "
                         f"the build needs about {need / 1e9:.1f} GB: free space on the machine")
    seconds, done = converge(fleet, host)
    if done.returncode != 0:
        print(done.stdout[-6000:], file=sys.stderr)
        raise SystemExit(f"{host}: the converge failed (exit {done.returncode}); pyinfra's output is above")
    after = host_disk(fleet, host, stack)
    marker = json.loads(fleet.exec(host, f"cat {stack.marker}").stdout)
    noop_seconds, noop = converge(fleet, host)
    report = {
        "host": host,
        "converge_s": round(seconds, 1),
        "noop_converge_s": round(noop_seconds, 1),
        "noop_ok": noop.returncode == 0 and "No change" in noop.stdout,
        "sent_bytes": after["wheelhouse_bytes"] - before["wheelhouse_bytes"],
        "stack_disk_bytes": after["stack_bytes"],
        "wheelhouse_disk_bytes": after["wheelhouse_bytes"],
        "free_before_bytes": before["free_bytes"],
        "free_after_bytes": after["free_bytes"],
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

    stack = load_stack(STACK)
    stack.require_complete()
    report = {"stack": stack.id, "files": len(stack.files), "lock_bytes": stack.size,
              "cache": os.environ.get("SGLFLEET_CACHE", str(PROJECT_ROOT / ".cache")),
              "controller": controller(stack)}
    print(json.dumps(report, indent=1), flush=True)
    if not args.controller_only:
        report["host"] = on_host(stack, args.host, args.clean)
        print(json.dumps(report["host"], indent=1))


if __name__ == "__main__":
    main()
