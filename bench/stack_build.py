"""Benchmark: build the dev stack on a local-fleet host from its warm wheelhouse, uv against pip.

Both builds run on the same host, side by side in one run (alternating, so
neither gets a warmer page cache), from the same wheels in
/opt/sglfleet/wheelhouse, offline, hash-checked, bytecode compiled:

- uv: ``uv venv --relocatable`` + ``uv pip install --offline --no-index --find-links
  --require-hashes --compile-bytecode`` with a fresh uv cache (what the stack
  operation runs);
- pip: ``python3.11 -m venv`` (pip from ensurepip) + ``pip install --no-index
  --find-links --require-hashes --no-cache-dir`` (pip compiles bytecode by default).

Needs the local fleet up with the dev stack converged (wheelhouse and uv on the host).

**Example:**

.. code:: shell

    .venv/bin/python bench/stack_build.py --rounds 3
"""

import argparse
import json
import shlex
import statistics

from sglfleet.artifacts.stacks import load_stack
from sglfleet.devfleet.rootfs import PYTHONS, SUITE  # the benchmarks' hosts run the default OS
from sglfleet.devfleet import Fleet
from sglfleet.host.layout import LAYOUT

def timed(fleet, host, *steps):
    """Seconds each shell step took on ``host`` (host clock), run in one session."""
    script = " && ".join(f"date +%s.%N && ( {step} ) >/dev/null && date +%s.%N" for step in steps)
    stamps = [float(x) for x in fleet.exec(host, script).stdout.split()]
    return [end - start for start, end in zip(stamps[::2], stamps[1::2])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--host", help="a local-fleet host (default: the first)")
    args = parser.parse_args()

    fleet = Fleet(log=lambda line: None)
    host = args.host or fleet.hosts[0]
    stack = load_stack("dev").for_python(PYTHONS[SUITE])
    uv = LAYOUT.uv(stack.uv.version)
    work = "/tmp/sglfleet-bench"
    requirements = stack.requirements()
    fleet.exec(host, f"rm -rf {work} && mkdir -p {work} && printf %s {shlex.quote(requirements)} > {work}/req.txt"
                     f" && test -x {uv} && ls {LAYOUT.wheelhouse}/{stack.uv.filename} >/dev/null"
                     " || { echo 'needs the dev stack converged on the host' >&2; exit 1; }")
    common = f"--no-index --find-links {LAYOUT.wheelhouse} --require-hashes --no-deps -r {work}/req.txt"
    uv_steps = [
        f"rm -rf {work}/uv {work}/uvcache && {uv} venv -q --relocatable --python python{stack.python} {work}/uv",
        f"UV_CACHE_DIR={work}/uvcache {uv} pip install -q --python {work}/uv/bin/python --offline "
        f"--compile-bytecode --link-mode copy {common}",
    ]
    pip_steps = [
        f"rm -rf {work}/pip && python{stack.python} -m venv {work}/pip",
        f"{work}/pip/bin/pip install -q --disable-pip-version-check --no-cache-dir {common}",
    ]
    runs = {"uv": [], "pip": []}
    for _ in range(args.rounds):
        for tool, steps in (("uv", uv_steps), ("pip", pip_steps)):
            venv, install = timed(fleet, host, *steps)
            runs[tool].append({"venv_s": venv, "install_s": install, "total_s": venv + install})
    fleet.exec(host, f"rm -rf {work}")

    median = {tool: {k: statistics.median(r[k] for r in rs) for k in ("venv_s", "install_s", "total_s")}
              for tool, rs in runs.items()}
    report = {
        "host": host, "stack": stack.id, "files": len(stack.venv_files), "bytes": stack.size,
        "rounds": args.rounds, "median": median,
        "ratio_total_pip_over_uv": round(median["pip"]["total_s"] / median["uv"]["total_s"], 2),
        "ratio_install_pip_over_uv": round(median["pip"]["install_s"] / median["uv"]["install_s"], 2),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
