"""
Benchmarks: sglfleet against the deploys users would write instead, side by side, on the local fleet.

Prints a table and writes it into BENCHMARKS.md (between the ``bench`` markers;
the notes around them are kept). Each figure is the median of ``--rounds``
runs; the tools run interleaved, round by round and in a rotating order, so
the noise of a shared machine falls on all of them alike.

Sections (``--only`` picks some):

- ``noop``: the engine floor (``pyinfra INVENTORY exec -- true``), and a no-op
  converge of sglfleet (deploy.py), bench/baseline/ (stock pyinfra operations)
  and bench/ansible/ (ansible-core, pipelining and ControlPersist on): wall
  time, remote commands and SSH connections per host. Counted on the hosts:
  sshd runs with ``LogLevel VERBOSE``, which logs one ``Accepted publickey``
  per SSH connection and one ``Starting session: command`` (or ``subsystem
  'sftp'``) per remote command; the journal is read through ``nsenter``, so
  reading it costs no SSH session.
- ``block``: what ``files.block`` does to the real upstream kimi_k25.py.
- ``scaling``: no-op converge of sglfleet and the floor for 1, 3 and 6 hosts
  (boots hosts 4-6, converges them, and stops them again).
- ``stack``: bench/stack_build.py, uv against pip from the same warm wheelhouse.
- ``rollout``: rollouts of a changed launch configuration with a 10 s
  stand-in warm-up; overhead per wave = wave time - warm-up.

Needs a converged local fleet of 3 hosts (a private one is best: set
SGLFLEET_FLEET_DIR, SGLFLEET_DEVFLEET_SUBNET, SGLFLEET_DEVFLEET_BRIDGE and
SGLFLEET_DEVFLEET_PREFIX). ansible-core is installed into .cache/ansible-venv,
outside the project's dependencies.

**Example:**

.. code:: shell

    .venv/bin/python bench/run.py --rounds 7
    .venv/bin/python bench/run.py --only noop --rounds 5
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sglfleet import FILES, PROJECT_ROOT
from sglfleet.artifacts.stacks import load_stack
from sglfleet.devfleet.rootfs import PYTHONS, SUITE  # the benchmarks' hosts run the default OS
from sglfleet.artifacts.upstream import sglang_file
from sglfleet.devfleet import Fleet
from sglfleet.plan.host_files import STANDIN_FILES

BENCH = PROJECT_ROOT / "bench"
CACHE = PROJECT_ROOT / ".cache" / "bench"
RESULTS = CACHE / "results.json"
REPORT = PROJECT_ROOT / "BENCHMARKS.md"
PYTHON = PROJECT_ROOT / ".venv" / "bin" / "python"
PYINFRA = PROJECT_ROOT / ".venv" / "bin" / "pyinfra"
ANSIBLE_VENV = PROJECT_ROOT / ".cache" / "ansible-venv"
ANSIBLE_CORE = "ansible-core==2.19.14"
SECRETS = {"SGLFLEET_HF_TOKEN": "hf_benchtoken", "SGLFLEET_API_KEY": "sk-benchkey"}
SSHD_VERBOSE = "/etc/ssh/sshd_config.d/00-bench-verbose.conf"
SECTIONS = ("noop", "block", "scaling", "stack", "rollout")
BEGIN, END = "<!-- bench:begin (bench/run.py writes this part) -->", "<!-- bench:end -->"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the tools, as commands -------------------------------------------------

def tool_commands(limit: list[str] | None = None) -> dict[str, tuple[list[str], Path, dict]]:
    """name -> (argv, cwd, extra env) for one no-op converge (or the floor)."""
    pyinfra_limit = [arg for host in limit or [] for arg in ("--limit", host)]
    floor_dir = CACHE / "floor"  # no config.py there: pyinfra alone
    floor_dir.mkdir(parents=True, exist_ok=True)
    ansible_limit = ["--limit", ",".join(limit)] if limit else []
    return {
        "floor": ([str(PYINFRA), str(PROJECT_ROOT / "inventory/dev.py"), "exec", "-y", *pyinfra_limit, "--", "true"],
                  floor_dir, {}),
        "sglfleet": ([str(PYINFRA), "inventory/dev.py", "deploy.py", "-y", *pyinfra_limit], PROJECT_ROOT, {}),
        "baseline": ([str(PYINFRA), "../../inventory/dev.py", "deploy.py", "-y", *pyinfra_limit],
                     BENCH / "baseline", {}),
        "ansible": ([str(ANSIBLE_VENV / "bin" / "ansible-playbook"), "playbook.yml", "-e", f"@{CACHE / 'ansible-vars.json'}",
                     *ansible_limit], BENCH / "ansible", {"ANSIBLE_CONFIG": str(BENCH / "ansible" / "ansible.cfg")}),
    }


def run(argv, cwd, env=None, timeout=900) -> tuple[float, str]:
    """Wall seconds and merged output of one command; a failure stops the bench."""
    started = time.monotonic()
    result = subprocess.run(argv, cwd=cwd, env={**os.environ, **SECRETS, **(env or {})}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    wall = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, argv))} failed ({result.returncode}):\n{result.stdout[-3000:]}")
    return wall, result.stdout


def changed(name: str, output: str) -> bool:
    """Whether a no-op run changed anything, from the tool's own summary."""
    if name == "ansible":
        return any(int(n) for n in re.findall(r"changed=(\d+)", output))
    if name == "floor":
        return False
    total = re.search(r"Grand total\s+(\d+)\s+(\S+)", output)
    return not total or total.group(2) != "-"


# --- counting on the hosts ---------------------------------------------------

def sshd_verbose(fleet: Fleet, hosts: list[str]) -> None:
    """Make each host's sshd log every connection and every session (idempotent)."""
    for host in hosts:
        fleet.exec(host, f"grep -qs VERBOSE {SSHD_VERBOSE} || {{ echo 'LogLevel VERBOSE' > {SSHD_VERBOSE} "
                         "&& systemctl reload ssh; }")


def read_sshd(fleet: Fleet, hosts: list[str]) -> dict[str, dict[str, int]]:
    """sshd's journal since the last read, counted: connections, commands, sftp sessions."""
    state = fleet.state()["hosts"]

    def one(host):
        out = subprocess.run(
            ["nsenter", "-t", str(state[host]["leader_pid"]), "-m", "--", "journalctl", "-t", "sshd",
             "--cursor-file", "/var/tmp/bench-sshd.cursor", "-o", "cat", "--no-pager", "-q"],
            capture_output=True, text=True, check=True,
        ).stdout
        return host, {
            "connections": out.count("Accepted publickey"),
            "commands": out.count("Starting session: command"),
            "sftp": out.count("Starting session: subsystem"),
        }

    with concurrent.futures.ThreadPoolExecutor(len(hosts)) as pool:
        return dict(pool.map(one, hosts))


def measured(fleet, name, argv, cwd, env, hosts, count=True) -> dict:
    if count:
        read_sshd(fleet, hosts)
    wall, output = run(argv, cwd, env)
    if changed(name, output):
        sys.exit(f"bench: the {name} no-op converge changed something:\n{output[-3000:]}")
    result = {"wall_s": wall}
    if count:
        time.sleep(0.3)  # let journald take the last lines
        per_host = read_sshd(fleet, hosts)
        for key in ("connections", "commands", "sftp"):
            result[key] = max(c[key] for c in per_host.values())
    return result


def medians(runs: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


# --- setup --------------------------------------------------------------------

def ensure_ansible() -> None:
    if (ANSIBLE_VENV / "bin" / "ansible-playbook").exists():
        return
    log(f"installing {ANSIBLE_CORE} into {ANSIBLE_VENV} (not a project dependency)")
    subprocess.run([sys.executable, "-m", "venv", str(ANSIBLE_VENV)], check=True)
    subprocess.run([str(ANSIBLE_VENV / "bin" / "pip"), "install", "-q", ANSIBLE_CORE], check=True)


def write_ansible_inputs(fleet: Fleet) -> None:
    """The Ansible inventory (same hosts, key and known hosts as pyinfra) and the playbook's variables."""
    state = fleet.state()
    lines = ["[fleet]"] + [
        f"{name} ansible_host={record['address']} ansible_user=root ansible_ssh_private_key_file={state['ssh_key']}"
        for name, record in sorted(state["hosts"].items(), key=lambda item: int(item[0][4:]))
    ] + ["", "[fleet:vars]",
         f"ansible_ssh_common_args=-o UserKnownHostsFile={state['known_hosts']} -o StrictHostKeyChecking=yes"]
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "ansible-hosts.ini").write_text("\n".join(lines) + "\n")
    stack = load_stack("dev").for_python(PYTHONS[SUITE])
    patch = (FILES / "patches" / "kimi_k25_eagle3.py").read_text().splitlines()
    variables = {
        "pins": sorted(
            "{}=={}".format(name.replace("_", "-"), version)
            for name, version, *_ in (f.filename.split("-") for f in stack.files if f.filename != stack.uv.filename)
        ),
        "methods": "\n".join(patch[patch.index("class KimiK25ForConditionalGeneration:") + 1:]).rstrip(),
        "wheelhouse": "/opt/sglfleet/wheelhouse",
        "standin_files": [{"name": name, "src": str(source)}
                          for name, source in STANDIN_FILES.items()],
    }
    (CACHE / "ansible-vars.json").write_text(json.dumps(variables, indent=1))


def converge_all(hosts: list[str] | None = None) -> None:
    """Converge every tool once, so that the measured runs are no-ops."""
    for name, (argv, cwd, env) in tool_commands(hosts).items():
        if name != "floor":
            log(f"converging {name}")
            run(argv, cwd, env)


# --- sections -------------------------------------------------------------------

def bench_noop(fleet: Fleet, rounds: int) -> dict:
    hosts = fleet.hosts
    sshd_verbose(fleet, hosts)
    converge_all()
    commands = tool_commands()
    names = list(commands)
    runs = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            runs[name].append(measured(fleet, name, *commands[name], hosts))
        log(f"noop round {r + 1}/{rounds}: " + ", ".join(f"{n} {runs[n][-1]['wall_s']:.2f}s" for n in names))
    result = {"hosts": len(hosts), "rounds": rounds, "median": {n: medians(runs[n]) for n in names},
              "runs": runs}
    floor = result["median"]["floor"]["wall_s"]
    for name in names:
        result["median"][name]["x_floor"] = result["median"][name]["wall_s"] / floor
    return result


def _class_methods(path: Path) -> dict:
    """Where the three methods are in a file: in the class body (count) and at module level."""
    names = {"set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"}
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError as error:
        return {"parses": f"no: {type(error).__name__} at line {error.lineno}", "lines": len(path.read_text().splitlines())}
    in_class, module = 0, 0
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "KimiK25ForConditionalGeneration":
            in_class = sum(isinstance(n, ast.FunctionDef) and n.name in names for n in node.body)
        elif isinstance(node, ast.FunctionDef) and node.name in names:
            module += 1
    classes = sum(isinstance(n, ast.ClassDef) for n in tree.body)
    return {"parses": "yes", "methods_in_class": in_class, "methods_at_module_level": module, "classes": classes,
            "lines": len(path.read_text().splitlines())}


def bench_block(fleet: Fleet, rounds: int) -> dict:
    demo = Path(tempfile.mkdtemp(prefix="block-demo-", dir=CACHE))
    for name, version in (("0.5.9-anchor.py", "0.5.9"), ("0.5.9-default.py", "0.5.9"),
                          ("0.5.10-anchor.py", "0.5.10")):
        shutil.copy(sglang_file(version, "sglang/srt/models/kimi_k25.py"), demo / name)
    before = {name: _class_methods(demo / name) for name in ("0.5.9-anchor.py", "0.5.10-anchor.py")}
    run([str(PYINFRA), "@local", str(BENCH / "baseline" / "block_demo.py"), "-y",
         "--data", f"demo_dir={demo}"], BENCH / "baseline")
    after = {name: _class_methods(demo / name) for name in sorted(p.name for p in demo.iterdir())}
    shutil.rmtree(demo)
    return {"before": before, "after": after}


def bench_scaling(fleet: Fleet, rounds: int) -> dict:
    log("booting hosts 4-6")
    fleet.up(6)
    try:
        run([str(PYINFRA), "inventory/dev.py", "deploy.py", "-y"], PROJECT_ROOT)  # converge the new hosts
        sizes = {1: ["node1"], 3: ["node1", "node2", "node3"], 6: [f"node{i}" for i in range(1, 7)]}
        runs = {(n, name): [] for n in sizes for name in ("floor", "sglfleet")}
        for r in range(rounds):
            for n, hosts in (sizes.items() if r % 2 == 0 else reversed(sizes.items())):
                commands = tool_commands(hosts)
                for name in ("floor", "sglfleet"):
                    runs[(n, name)].append(measured(fleet, name, *commands[name], hosts, count=False))
            log(f"scaling round {r + 1}/{rounds}")
    finally:
        log("stopping hosts 4-6")
        fleet.up(3)
    return {"rounds": rounds, "median": {f"{name}_{n}": medians(rs)["wall_s"] for (n, name), rs in runs.items()}}


def bench_stack(fleet: Fleet, rounds: int) -> dict:
    _, output = run([str(PYTHON), str(BENCH / "stack_build.py"), "--rounds", str(rounds)], PROJECT_ROOT)
    return json.loads(output[output.index("{"):])


def bench_rollout(fleet: Fleet, rounds: int, warmup: float = 10) -> dict:
    """Rollouts to a changed release, each wave timed from pyinfra's own output."""
    runs = []
    base = [str(PYINFRA), "inventory/dev.py", "deploy.py", "-y", "--data", f"standin_warmup_s={warmup:g}"]
    for r in range(rounds):
        argv = base + ["--data", f"mem_fraction_static={0.80 + 0.01 * (r % 2):.2f}"]
        started = time.monotonic()
        process = subprocess.Popen(argv, cwd=PROJECT_ROOT, env={**os.environ, **SECRETS, "PYTHONUNBUFFERED": "1"},
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        marks, lines = [], []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("--> "):
                marks.append((time.monotonic() - started, line[4:].strip()))
        if process.wait() != 0 or changed("sglfleet", "".join(lines)) is False:
            sys.exit(f"bench: rollout {r + 1} failed or changed nothing:\n{''.join(lines)[-3000:]}")
        total = time.monotonic() - started
        waves = []
        for (t, what), (t_next, _) in zip(marks, marks[1:]):
            if what.startswith("Starting operation: Roll out | Wave"):
                waves.append(t_next - t)
        switched = [w for w in waves if w > warmup / 2]  # a wave with a host to switch
        runs.append({"total_s": total, "waves": len(switched), "wave_s": switched,
                     "overhead_per_wave_s": statistics.mean(w - warmup for w in switched),
                     "total_minus_warmups_per_wave_s": (total - warmup * len(switched)) / len(switched)})
        log(f"rollout {r + 1}/{rounds}: {total:.1f}s, waves {', '.join(f'{w:.1f}' for w in switched)}")
    log("back to the default launch configuration")
    run([str(PYINFRA), "inventory/dev.py", "deploy.py", "-y"], PROJECT_ROOT)
    return {"rounds": rounds, "warmup_s": warmup, "runs": runs,
            "median": {key: statistics.median(r[key] for r in runs)
                       for key in ("total_s", "overhead_per_wave_s", "total_minus_warmups_per_wave_s")}}


# --- report ---------------------------------------------------------------------

def targets(results: dict) -> list[tuple[str, str, bool | None]]:
    """(target, measured, holds) for each target of issue 7 that the results cover."""
    rows = []
    if "noop" in results:
        m = results["noop"]["median"]
        rows += [
            ("no-op converge <= 10 remote commands per host", f"{m['sglfleet']['commands']:g}",
             m["sglfleet"]["commands"] <= 10),
            ("no-op converge of 3 hosts <= 2x the engine floor", f"{m['sglfleet']['x_floor']:.2f}x",
             m["sglfleet"]["x_floor"] <= 2),
            ("no-op converge >= 4x faster than Ansible", f"{m['ansible']['wall_s'] / m['sglfleet']['wall_s']:.2f}x",
             m["ansible"]["wall_s"] / m["sglfleet"]["wall_s"] >= 4),
            ("no-op converge faster than the stock-operations baseline",
             f"{m['baseline']['wall_s'] / m['sglfleet']['wall_s']:.2f}x", m["sglfleet"]["wall_s"] < m["baseline"]["wall_s"]),
        ]
    if "scaling" in results:
        s = results["scaling"]["median"]
        rows.append(("6 hosts <= 1.5x the time of 1 host", f"{s['sglfleet_6'] / s['sglfleet_1']:.2f}x",
                     s["sglfleet_6"] / s["sglfleet_1"] <= 1.5))
    if "stack" in results:
        ratio = results["stack"]["ratio_total_pip_over_uv"]
        rows.append(("uv >= 3x faster than pip (stack build)", f"{ratio:.2f}x", ratio >= 3))
    if "rollout" in results:
        overhead = results["rollout"]["median"]["overhead_per_wave_s"]
        rows.append(("rollout overhead <= 5 s per wave", f"{overhead:.2f} s", overhead <= 5))
    return rows


def render(results: dict, command: str) -> str:
    out = [f"Reproduce: `{command}` (local fleet of 3 hosts; medians; runs interleaved).", ""]
    if "noop" in results:
        n = results["noop"]
        out += [f"### No-op converge, {n['hosts']} hosts, median of {n['rounds']} interleaved rounds", "",
                "| run | wall s | x floor | remote commands / host | SSH connections / host | sftp sessions / host |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        labels = {"floor": "engine floor: `pyinfra exec -- true`", "sglfleet": "sglfleet `deploy.py`",
                  "baseline": "baseline: stock pyinfra operations", "ansible": "Ansible (pipelining, ControlPersist)"}
        for name, m in n["median"].items():
            out.append(f"| {labels[name]} | {m['wall_s']:.2f} | {m['x_floor']:.2f} | {m['commands']:g} | "
                       f"{m['connections']:g} | {m['sftp']:g} |")
        out.append("")
    if "scaling" in results:
        s = results["scaling"]["median"]
        out += [f"### Scaling: no-op converge wall time (s), median of {results['scaling']['rounds']} rounds", "",
                "| hosts | engine floor | sglfleet | sglfleet / floor |", "| ---: | ---: | ---: | ---: |"]
        for n in (1, 3, 6):
            out.append(f"| {n} | {s[f'floor_{n}']:.2f} | {s[f'sglfleet_{n}']:.2f} | "
                       f"{s[f'sglfleet_{n}'] / s[f'floor_{n}']:.2f} |")
        out.append("")
    if "stack" in results:
        st = results["stack"]
        med = st["median"]
        out += [f"### Fresh stack build ({st['stack']}, {st['files']} wheels), median of {st['rounds']} rounds", "",
                "| tool | venv s | install s | total s |", "| --- | ---: | ---: | ---: |"]
        for tool in ("uv", "pip"):
            out.append(f"| {tool} | {med[tool]['venv_s']:.2f} | {med[tool]['install_s']:.2f} | {med[tool]['total_s']:.2f} |")
        out += ["", f"pip / uv: {st['ratio_total_pip_over_uv']:.2f}x total, {st['ratio_install_pip_over_uv']:.2f}x install.", ""]
    if "rollout" in results:
        ro = results["rollout"]
        med = ro["median"]
        out += [f"### Rollout, 3 waves of one host, stand-in warm-up {ro['warmup_s']:g} s, median of {ro['rounds']}", "",
                "| total s | overhead per wave (wave time - warm-up) s | (total - warm-ups) / waves s |",
                "| ---: | ---: | ---: |",
                f"| {med['total_s']:.2f} | {med['overhead_per_wave_s']:.2f} | {med['total_minus_warmups_per_wave_s']:.2f} |", ""]
    if "block" in results:
        out += ["### `files.block` on the real upstream kimi_k25.py", "",
                "| file | parses | methods in the class | lines |", "| --- | --- | ---: | ---: |"]
        for name, info in results["block"]["after"].items():
            out.append(f"| {name} | {info['parses']} | {info.get('methods_in_class', '-')} | {info['lines']} |")
        out.append("")
    rows = targets(results)
    if rows:
        out += ["### Targets", "", "| target | measured | holds |", "| --- | --- | --- |"]
        out += [f"| {t} | {m} | {'yes' if ok else '**no**'} |" for t, m, ok in rows]
        out.append("")
    return "\n".join(out)


def write_report(text: str) -> None:
    old = REPORT.read_text() if REPORT.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in old:
        old += f"\n{BEGIN}\n{END}\n"
    head, _, rest = old.partition(BEGIN)
    _, _, tail = rest.partition(END)
    REPORT.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--rounds", type=int, default=5, help="runs per figure (median); at least 5 for the report")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run these sections (default: all)")
    args = parser.parse_args()

    fleet = Fleet(log=lambda line: None)
    if len(fleet.hosts) != 3:
        sys.exit(f"bench: needs a local fleet of 3 hosts, {fleet.state_dir} has {len(fleet.hosts)}: "
                 "run `sglfleet devfleet up --hosts 3` and `pyinfra inventory/dev.py deploy.py -y`")
    ensure_ansible()
    write_ansible_inputs(fleet)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for section in args.only or SECTIONS:
        log(f"== {section}")
        results[section] = globals()[f"bench_{section}"](fleet, args.rounds)
        results[section]["measured_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
        RESULTS.write_text(json.dumps(results, indent=1))
    command = ".venv/bin/python bench/run.py" + (f" --rounds {args.rounds}" if args.rounds != 5 else "")
    text = render(results, command)
    print(text)
    write_report(text)


if __name__ == "__main__":
    main()
