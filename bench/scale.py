"""
Benchmark: sglfleet at fleet scale on the local fleet, outside CI (it boots up to 24 hosts).

Sections (``--only`` picks some), each writing its figures to
``.cache/bench/scale.json`` and its table into BENCHMARKS.md between the
``scale`` markers:

- ``noop``: a no-op converge (``deploy.py``) against the engine floor
  (``pyinfra INVENTORY exec -- true`` from a folder without config.py) and the
  skeleton (``bench/skeleton/deploy.py``: pyinfra alone running a deploy of
  sglfleet's shape, as many steps, operations and bytes read; stock, and with
  ``sglfleet.hooks.engine``'s cuts, ``bench/skeleton/engine.py``) at 3,
  12 and 24 hosts, interleaved round by round in a rotating order, medians;
  the cost over the floor per host, the 24/3 ratio, and a profile of the
  controller's CPU at 24 hosts (cProfile, the top functions by own time).
  Draws ``bench/figures/scale.svg``: wall time against fleet size.
- ``fanout``: a new stack on 12 hosts (their wheelhouses and stacks removed
  first), once with ``distribution = "peers"`` and once with ``"controller"``:
  the controller's egress (bytes the bridge takes from the controller, its
  ``tx_bytes``) against the stack's size, and the wall time of the converge.
- ``rollout``: a changed launch configuration rolled out to 24 hosts with
  ``rollout_serial = [1, "25%", "100%"]``: wall time, batches, and the
  time of each batch from pyinfra's own output.

Runs on a fleet of its own (``--fleet-dir``, subnet 10.213.90.0/24, bridge
sglfleetb0), so it never disturbs the test fleet; it boots and stops hosts as
it goes, and ``--keep`` leaves them up.

**Example:**

.. code:: shell

    .venv/bin/python bench/scale.py --rounds 5
    .venv/bin/python bench/scale.py --only noop --sizes 3,12,24 --rounds 5
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pstats
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sglfleet import PROJECT_ROOT
from sglfleet.artifacts.stacks import load_stack
from sglfleet.devfleet.rootfs import PYTHONS, SUITE  # the benchmarks' hosts run the default OS

BENCH = PROJECT_ROOT / "bench"
CACHE = PROJECT_ROOT / ".cache" / "bench"
RESULTS = CACHE / "scale.json"
FIGURE = BENCH / "figures" / "scale.svg"
REPORT = PROJECT_ROOT / "BENCHMARKS.md"
BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"
PYINFRA = Path(sys.executable).with_name("pyinfra")
SECTIONS = ("noop", "fanout", "rollout")
SECRETS = {"SGLFLEET_HF_TOKEN": "hf_benchtoken7Q2vX9", "SGLFLEET_API_KEY": "sk-benchkey4Lm8Zp3"}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Bench:
    """The bench's own fleet (its state folder, subnet, bridge and prefix) and the commands run against it."""

    def __init__(self, fleet_dir: Path):
        # Bytecode caches as a user's controller keeps them (this machine sets PYTHONDONTWRITEBYTECODE,
        # which makes every run compile some 500 modules again: a fixed 1.4 s, no cost per host).
        environ = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        self.env = {**environ, **SECRETS, "PYTHONUNBUFFERED": "1",
                    "SGLFLEET_FLEET_DIR": str(fleet_dir), "SGLFLEET_DEVFLEET_SUBNET": "10.213.90.0/24",
                    "SGLFLEET_DEVFLEET_BRIDGE": "sglfleetb0", "SGLFLEET_DEVFLEET_PREFIX": "b"}
        from sglfleet.devfleet import Fleet

        self.fleet = Fleet(state_dir=fleet_dir, subnet=self.env["SGLFLEET_DEVFLEET_SUBNET"],
                           bridge=self.env["SGLFLEET_DEVFLEET_BRIDGE"], prefix=self.env["SGLFLEET_DEVFLEET_PREFIX"],
                           log=lambda line: None)

    def up(self, n: int) -> None:
        started = time.monotonic()
        self.fleet.up(n)
        log(f"{n} hosts up in {time.monotonic() - started:.1f} s")

    def run(self, argv: list[str], cwd: Path = PROJECT_ROOT, ok=(0,), timeout: float = 1800) -> tuple[float, str]:
        started, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(argv, cwd=cwd, env=self.env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # The controller's own CPU (user + sys of pyinfra): the hosts' share of the two cores is not in it.
        self.last_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if done.returncode not in ok:
            sys.exit(f"bench: {' '.join(map(str, argv))} failed ({done.returncode}):\n{done.stdout[-3000:]}")
        return time.monotonic() - started, done.stdout

    def deploy(self, *args: str, limit: list[str] | None = None) -> tuple[float, str]:
        limits = [arg for host in limit or [] for arg in ("--limit", host)]
        return self.run([str(PYINFRA), "inventory/dev.py", "deploy.py", "-y", *limits, *args])

    def floor(self, limit: list[str]) -> float:
        folder = CACHE / "floor"  # no config.py there: pyinfra alone
        folder.mkdir(parents=True, exist_ok=True)
        limits = [arg for host in limit for arg in ("--limit", host)]
        return self.run([str(PYINFRA), str(PROJECT_ROOT / "inventory/dev.py"), "exec", "-y", *limits, "--", "true"],
                        cwd=folder)[0]

    def skeleton(self, limit: list[str], shape: list[str], engine: bool = False) -> float:
        """
        pyinfra alone running a deploy of sglfleet's shape (``bench/skeleton/deploy.py``), from its folder;
        with ``engine``, after sglfleet's cuts of pyinfra's costs (``sglfleet.hooks.engine``).
        """
        limits = [arg for host in limit for arg in ("--limit", host)]
        config = ["--config", "engine.py"] if engine else []
        return self.run([str(PYINFRA), *config, str(PROJECT_ROOT / "inventory/dev.py"), "deploy.py", "-y", *limits,
                         *shape], cwd=BENCH / "skeleton")[0]

    def bridge_tx(self) -> int:
        """Bytes the bridge has taken from the controller's side (what the controller sent to the hosts)."""
        return int(Path(f"/sys/class/net/{self.env['SGLFLEET_DEVFLEET_BRIDGE']}/statistics/tx_bytes").read_text())


def unchanged(output: str) -> bool:
    total = re.search(r"Grand total\s+(\d+)\s+(\S+)\s+(\S+)", output)
    return bool(total) and total.group(2) == "-" and total.group(3) == "-"


SSHD_VERBOSE = "/etc/ssh/sshd_config.d/00-bench-verbose.conf"


def sshd_logs_sessions(bench: Bench) -> None:
    """Make every host's sshd log each session it starts, through nsenter (no SSH of its own)."""
    for host in bench.fleet.hosts:
        bench.fleet.inside(host, f"grep -qs VERBOSE {SSHD_VERBOSE} || {{ echo 'LogLevel VERBOSE' > {SSHD_VERBOSE} "
                                 "&& systemctl reload ssh; }")


def remote_commands(bench: Bench, hosts: list[str], since: float) -> int:
    """The busiest host's count of remote commands since ``since``, from its sshd's journal."""
    def count(host: str) -> int:
        log = bench.fleet.inside(host, f"journalctl -u ssh -o cat --no-pager --since @{since:.6f}").stdout
        return log.count("Starting session: command")

    deadline = time.monotonic() + 10  # journald writes behind: wait until every host shows the run
    while True:
        counts = [count(host) for host in hosts]
        if all(counts) or time.monotonic() > deadline:
            return max(counts)
        time.sleep(0.2)


def deploy_steps() -> int:
    """How many ``@deploy`` steps deploy.py calls on a host: its calls of names it imports from tasks/."""
    import ast
    import importlib

    sys.path.insert(0, str(PROJECT_ROOT))
    tree = ast.parse((PROJECT_ROOT / "deploy.py").read_text())
    imported = {alias.asname or alias.name: node.module for node in tree.body if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("tasks.") for alias in node.names}
    called = [node.value.func.id for node in tree.body if isinstance(node, ast.Expr)
              and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)]
    # pyinfra's @deploy leaves the function it wraps as ``_inner``; a plain step (access) has none.
    return sum(1 for name in called if name in imported
               and hasattr(getattr(importlib.import_module(imported[name]), name), "_inner"))


def read_size(bench: Bench) -> tuple[int, int]:
    """The lines and bytes of the first host's read (``HostRead``) on the converged fleet, read through nsenter."""
    host = bench.fleet.hosts[0]
    command = bench.run([sys.executable, str(BENCH / "skeleton" / "read_command.py"),
                         str(PROJECT_ROOT / "inventory/dev.py"), host])[1]
    output = bench.fleet.inside(host, command).stdout
    return output.count("\n"), len(output.encode())


def bench_noop(bench: Bench, rounds: int, sizes: list[int]) -> dict:
    bench.up(max(sizes))
    bench.deploy()
    sshd_logs_sessions(bench)
    hosts = bench.fleet.hosts
    _, output = bench.deploy(limit=hosts[:1])
    operations = int(re.search(r"Grand total\s+(\d+)", output).group(1))  # one host's: its operations
    lines, size = read_size(bench)
    shape = {"deploys": deploy_steps(), "operations": operations, "read_lines": lines, "read_bytes": size}
    log(f"sglfleet's shape, as the skeleton copies it: {shape}")
    skeleton = [arg for key, value in shape.items() for arg in ("--data", f"skeleton_{key}={value}")]
    names = ("floor", "sglfleet", "skeleton", "engine", "floor_cpu", "sglfleet_cpu", "skeleton_cpu", "engine_cpu",
             "floor_commands", "sglfleet_commands")
    runs = {(n, name): [] for n in sizes for name in names}
    for r in range(rounds):
        for n in (sizes if r % 2 == 0 else list(reversed(sizes))):
            limit = hosts[:n]
            since = time.time()
            runs[(n, "floor")].append(bench.floor(limit))
            runs[(n, "floor_cpu")].append(bench.last_cpu)
            runs[(n, "floor_commands")].append(remote_commands(bench, limit, since))
            runs[(n, "skeleton")].append(bench.skeleton(limit, skeleton))
            runs[(n, "skeleton_cpu")].append(bench.last_cpu)
            runs[(n, "engine")].append(bench.skeleton(limit, skeleton, engine=True))
            runs[(n, "engine_cpu")].append(bench.last_cpu)
            since = time.time()
            wall, output = bench.deploy(limit=limit)
            if not unchanged(output):
                sys.exit(f"bench: the no-op converge of {n} hosts changed something:\n{output[-3000:]}")
            runs[(n, "sglfleet")].append(wall)
            runs[(n, "sglfleet_cpu")].append(bench.last_cpu)
            runs[(n, "sglfleet_commands")].append(remote_commands(bench, limit, since))
        log(f"noop round {r + 1}/{rounds}")
    median = {f"{name}_{n}": statistics.median(values) for (n, name), values in runs.items()}
    result = {"rounds": rounds, "sizes": sizes, "median": median, "shape": shape,
              "x_floor": {str(n): median[f"sglfleet_{n}"] / median[f"floor_{n}"] for n in sizes}}
    lo, hi = min(sizes), max(sizes)
    result["ratio_hi_lo"] = median[f"sglfleet_{hi}"] / median[f"sglfleet_{lo}"]
    over = {n: median[f"sglfleet_{n}"] - median[f"floor_{n}"] for n in sizes}
    result["over_floor_per_host_ms"] = 1000 * (over[hi] - over[lo]) / (hi - lo)
    def per_host_ms(name: str, base: str) -> float:
        over = {n: median[f"{name}_cpu_{n}"] - median[f"{base}_cpu_{n}"] for n in sizes}
        return 1000 * (over[hi] - over[lo]) / (hi - lo)

    def fitted_ms(name: str) -> float:
        """CPU per host, the least-squares slope through every run at every size: less noise than two medians."""
        points = [(n, cpu) for n in sizes for cpu in runs[(n, f"{name}_cpu")]]
        return 1000 * statistics.linear_regression([n for n, _ in points], [cpu for _, cpu in points]).slope

    result["runs"] = {f"{name}_{n}": values for (n, name), values in runs.items()}
    result["fitted_cpu_per_host_ms"] = {name: fitted_ms(name) for name in ("sglfleet", "floor", "skeleton", "engine")}
    result["cpu_over_floor_per_host_ms"] = per_host_ms("sglfleet", "floor")
    result["skeleton_cpu_over_floor_per_host_ms"] = per_host_ms("skeleton", "floor")
    result["engine_cpu_over_floor_per_host_ms"] = per_host_ms("engine", "floor")
    result["cpu_over_skeleton_per_host_ms"] = per_host_ms("sglfleet", "engine")
    result["profile"] = profile(bench, hi)
    draw(result)
    return result


def profile(bench: Bench, n: int) -> list[dict]:
    """The controller's own CPU in a no-op converge of ``n`` hosts: the top functions by own time."""
    profiler_out = CACHE / f"noop-{n}.prof"
    limits = [arg for h in bench.fleet.hosts[:n] for arg in ("--limit", h)]
    # cProfile runs pyinfra's own entry script (Python 3.11's cProfile has no -c)
    bench.run([sys.executable, "-m", "cProfile", "-o", str(profiler_out), str(PYINFRA),
               "inventory/dev.py", "deploy.py", "-y", *limits])
    stream = io.StringIO()
    stats = pstats.Stats(str(profiler_out), stream=stream)
    total = stats.total_tt
    rows = []
    for (filename, line, function), (_, calls, own, cumulative, _) in sorted(
            stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:12]:
        where = filename.split("site-packages/")[-1].replace(str(PROJECT_ROOT) + "/", "")
        rows.append({"function": f"{where}:{line}({function})", "calls": calls, "own_s": round(own, 3),
                     "share": round(own / total, 3) if total else 0.0})
    return rows


def draw(result: dict) -> None:
    """Wall time of a no-op converge, the skeleton and the floor against the number of hosts, as an SVG line chart."""
    sizes, median = result["sizes"], result["median"]
    width, height, pad = 560, 320, 50
    top = max(max(median.values()) * 1.15, 0.1)
    x = lambda n: pad + (width - 2 * pad) * (n - 0) / max(sizes)  # noqa: E731
    y = lambda s: height - pad - (height - 2 * pad) * s / top  # noqa: E731
    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
             f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">hosts</text>',
             f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle">'
             f'wall seconds (median)</text>']
    for n in sizes:
        lines.append(f'<text x="{x(n):.0f}" y="{height - pad + 16}" text-anchor="middle">{n}</text>')
    for step in range(5):
        s = top * step / 4
        lines.append(f'<text x="{pad - 6}" y="{y(s) + 4:.0f}" text-anchor="end">{s:.1f}</text>')
    labels = {"sglfleet": "no-op converge (deploy.py)", "skeleton": "pyinfra, sglfleet's shape (skeleton)",
              "engine": "the skeleton, pyinfra's costs cut", "floor": "engine floor (exec -- true)"}
    series = [(name, colour) for name, colour in (("sglfleet", "#c0392b"), ("skeleton", "#7f8c8d"),
                                                  ("engine", "#16a085"), ("floor", "#2c3e50"))
              if f"{name}_{sizes[0]}" in median]
    last = max(sizes)
    # Each label above its line's last point, moved down where it would sit on the one above it.
    label_y, previous = {}, None
    for name, _ in sorted(series, key=lambda one: y(median[f"{one[0]}_{last}"])):
        wanted = y(median[f"{name}_{last}"]) - 8
        label_y[name] = wanted if previous is None else max(wanted, previous + 14)
        previous = label_y[name]
    for name, colour in series:
        points = " ".join(f"{x(n):.1f},{y(median[f'{name}_{n}']):.1f}" for n in sizes)
        lines.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for n in sizes:
            lines.append(f'<circle cx="{x(n):.1f}" cy="{y(median[f"{name}_{n}"]):.1f}" r="3" fill="{colour}"/>')
        lines.append(f'<text x="{x(last) - 4:.0f}" y="{label_y[name]:.0f}" text-anchor="end" '
                     f'fill="{colour}">{labels[name]}</text>')
    lines.append("</svg>")
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    FIGURE.write_text("\n".join(lines) + "\n")


def bench_fanout(bench: Bench, rounds: int, n: int = 12) -> dict:
    bench.up(n)
    bench.deploy()
    stack = load_stack("dev").for_python(PYTHONS[SUITE])
    hosts = bench.fleet.hosts[:n]
    result = {"hosts": n, "stack_bytes": stack.size, "runs": {}}
    for distribution in ("peers", "controller"):
        for host in hosts:  # a new stack for every host: no wheel and no build there
            bench.fleet.inside(host, f"rm -rf /opt/sglfleet/wheelhouse {stack.path}")
        before = bench.bridge_tx()
        wall, output = bench.deploy("--data", f"distribution={distribution}", limit=hosts)
        egress = bench.bridge_tx() - before
        result["runs"][distribution] = {"wall_s": round(wall, 1), "egress_bytes": egress,
                                        "egress_x_stack": round(egress / stack.size, 2)}
        log(f"{distribution}: {wall:.1f} s, controller egress {egress / 1e6:.1f} MB "
            f"({egress / stack.size:.2f} x the stack's {stack.size / 1e6:.1f} MB)")
    return result


def bench_rollout(bench: Bench, rounds: int, n: int = 24) -> dict:
    bench.up(n)
    bench.deploy()
    started = time.monotonic()
    process = subprocess.Popen(
        [str(PYINFRA), "inventory/dev.py", "deploy.py", "-y", "--data", "rollout_serial=[1, \"25%\", \"100%\"]",
         "--data", "speculative_num_steps=4", "--data", "speculative_eagle_topk=1",
         "--data", "speculative_num_draft_tokens=5"],
        cwd=PROJECT_ROOT, env=bench.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    marks, lines = [], []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("--> "):
            marks.append((time.monotonic() - started, line[4:].strip()))
    if process.wait() != 0:
        sys.exit(f"bench: the rollout of {n} hosts failed:\n{''.join(lines)[-3000:]}")
    total = time.monotonic() - started
    batches = [(what.split("Roll out | ")[1].split(":")[0], round(t_next - t, 1))
               for (t, what), (t_next, _) in zip(marks, marks[1:]) if "Roll out |" in what]
    passed = re.search(r"--> Rollout: (\d+) passed", "".join(lines))
    bench.deploy()  # back to the inventory's configuration
    return {"hosts": n, "total_s": round(total, 1), "batches": batches,
            "passed": int(passed.group(1)) if passed else 0}


def render(results: dict, command: str) -> str:
    out = [f"Measured by `{command}` on this 2-core machine (a fleet of its own; medians).", ""]
    if "noop" in results:
        r = results["noop"]
        out += ["| hosts | no-op converge s | engine floor s | x floor | controller CPU s | floor's CPU s "
                "| skeleton's CPU s (stock, cut) | remote commands / host (sglfleet, floor) |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for n in r["sizes"]:
            out.append(f"| {n} | {r['median'][f'sglfleet_{n}']:.2f} | {r['median'][f'floor_{n}']:.2f} | "
                       f"{r['x_floor'][str(n)]:.2f}x | {r['median'].get(f'sglfleet_cpu_{n}', 0):.2f} | "
                       f"{r['median'].get(f'floor_cpu_{n}', 0):.2f} | {r['median'].get(f'skeleton_cpu_{n}', 0):.2f}, "
                       f"{r['median'].get(f'engine_cpu_{n}', 0):.2f} | "
                       f"{r['median'].get(f'sglfleet_commands_{n}', 0):g}, {r['median'].get(f'floor_commands_{n}', 0):g} |")
        lo, hi = min(r["sizes"]), max(r["sizes"])
        shape = r.get("shape", {})
        out += ["", f"{hi}/{lo} hosts: {r['ratio_hi_lo']:.2f}x the wall time. Beyond the floor, each extra host "
                    f"adds {r['over_floor_per_host_ms']:.0f} ms of wall time and "
                    f"{r.get('cpu_over_floor_per_host_ms', 0):.0f} ms of the controller's CPU (the rest of the wall "
                    f"time is the hosts' own work: here they share the controller's two cores)."
                    + (f" Fitted through all {len(r['sizes']) * r['rounds']} runs of each (least squares, CPU "
                       f"against hosts), a host costs the controller {fit['sglfleet']:.0f} ms of CPU in a no-op "
                       f"converge, {fit['floor']:.0f} ms in the floor: {fit['sglfleet'] - fit['floor']:.0f} ms "
                       f"beyond it; the skeleton {fit['skeleton']:.0f} ms stock and {fit['engine']:.0f} ms cut. "
                       f"These are differences of noisy figures: the spread between runs of this bench on this "
                       f"machine is several ms a host." if (fit := r.get("fitted_cpu_per_host_ms")) else ""), "",
                f"The skeleton (`bench/skeleton/deploy.py`) is pyinfra alone running a deploy of sglfleet's shape: "
                f"{shape.get('deploys', '?')} `@deploy` steps, {shape.get('operations', '?')} operations a host, "
                f"and one fact as long as sglfleet's host read ({shape.get('read_lines', '?')} lines, "
                f"{shape.get('read_bytes', 0) / 1000:.1f} kB), with nothing of sglfleet's. It costs "
                f"{r.get('skeleton_cpu_over_floor_per_host_ms', 0):.0f} ms of CPU per extra host beyond the floor: "
                f"pyinfra's own price for that many steps and operations; "
                f"{r.get('engine_cpu_over_floor_per_host_ms', 0):.0f} ms once `sglfleet.hooks.engine` has cut its "
                f"costs (`--config engine.py`), as sglfleet's config.py does. sglfleet's own work (the plan, the "
                f"read's arguments, the decisions) adds {r.get('cpu_over_skeleton_per_host_ms', 0):.0f} ms per "
                f"extra host beyond that.", "",
                "![no-op converge against fleet size](bench/figures/scale.svg)", "",
                f"Where the controller's CPU goes in a no-op converge of {hi} hosts (cProfile, own time):", "",
                "| function | calls | own s | share |", "| --- | --- | --- | --- |"]
        out += [f"| `{p['function']}` | {p['calls']} | {p['own_s']} | {p['share']:.0%} |" for p in r["profile"]]
        out.append("")
    if "fanout" in results:
        r = results["fanout"]
        out += [f"A new stack ({r['stack_bytes'] / 1e6:.1f} MB) on {r['hosts']} hosts:", "",
                "| distribution | wall s | controller egress | x the stack |", "| --- | --- | --- | --- |"]
        for name, run in r["runs"].items():
            out.append(f"| {name} | {run['wall_s']} | {run['egress_bytes'] / 1e6:.1f} MB | {run['egress_x_stack']}x |")
        out.append("")
    if "rollout" in results:
        r = results["rollout"]
        out += [f"A changed launch configuration rolled out to {r['hosts']} hosts with rollout_serial "
                f"[1, \"25%\", \"100%\"]: {r['total_s']} s, {r['passed']} hosts passed; batches: "
                + ", ".join(f"{name} {seconds} s" for name, seconds in r["batches"]) + ".", ""]
    return "\n".join(out).rstrip() + "\n"


def write_report(text: str) -> None:
    old = REPORT.read_text()
    if BEGIN not in old:
        old += f"\n## Fleet scale\n\n{BEGIN}\n{END}\n"
    head, _, rest = old.partition(BEGIN)
    _, _, tail = rest.partition(END)
    REPORT.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run these sections (default: all)")
    parser.add_argument("--sizes", default="3,12,24", help="fleet sizes for the no-op section")
    parser.add_argument("--fleet-dir", type=Path, default=CACHE / "scale-fleet", help="the bench fleet's state")
    parser.add_argument("--keep", action="store_true", help="leave the bench fleet up")
    args = parser.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    bench = Bench(args.fleet_dir)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    try:
        for section in args.only or SECTIONS:
            log(f"== {section}")
            if section == "noop":
                results[section] = bench_noop(bench, args.rounds, [int(s) for s in args.sizes.split(",")])
            else:
                results[section] = globals()[f"bench_{section}"](bench, args.rounds)
            results[section]["measured_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
            RESULTS.write_text(json.dumps(results, indent=1))
    finally:
        if not args.keep:
            bench.fleet.down()
    text = render(json.loads(RESULTS.read_text()), "bench/scale.py" + (f" --rounds {args.rounds}"))
    print(text)
    write_report(text)


if __name__ == "__main__":
    main()
