"""
Benchmark: the time a host takes to serve a new model revision, loaded in place against restarted, on the local fleet.

One fleet of its own (``--fleet-dir``, subnet 10.213.91.0/24, bridge sglfleetu0), three hosts: two workers
behind the third's gateway, serving the demo mirror's tiny model (``sglfleet.devfleet.mirror.demo_models``)
pinned, with EAGLE-3, on the dev stack (sglang 0.5.9, whose update reloads the target alone). Each round
rolls the other revision out twice, side by side in one run of the bench: once in place
(``weights_update = "auto"``), once by restart (``weights_update = "restart"``), the order alternating
round by round, with the official SDK's streamed traffic through the gateway meanwhile. For each:

- per host, from its batch's start (``BatchStarted``) to its gate passing on the new revision
  (``GatePassed``), from the run's own event log;
- the run's wall time;
- the traffic: requests sent, and those not answered in full.

The stand-in's load and compile times are the inventory's (``--data`` passes more, e.g.
``standin_warmup_s=28 standin_compile_s=25`` for the H200's warm start); medians over ``--rounds``.
Writes ``.cache/bench/weights_update.json`` and prints a table for BENCHMARKS.md.

**Example:**

.. code:: shell

    .venv/bin/python bench/weights_update.py --rounds 5
    .venv/bin/python bench/weights_update.py --rounds 3 --data standin_warmup_s=28 --data standin_compile_s=25
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from sglfleet import PROJECT_ROOT
from sglfleet.devfleet import Fleet
from sglfleet.devfleet.mirror import start_demo, stop_demo
from sglfleet.devfleet.traffic import CLIENT_MIX, Traffic

CACHE = PROJECT_ROOT / ".cache" / "bench"
RESULTS = CACHE / "weights_update.json"
PYINFRA, SGLFLEET = (Path(sys.executable).with_name(name) for name in ("pyinfra", "sglfleet"))
SECRETS = {"SGLFLEET_HF_TOKEN": "hf_benchtoken7Q2vX9", "SGLFLEET_API_KEY": "sk-benchkey4Lm8Zp3"}
MODES = {"in place": "auto", "restart": "restart"}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def when(event: dict) -> float:
    return datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp()


def per_host(events: list[dict]) -> dict[str, float]:
    """Seconds from each host's batch start to its gate passing, from one run's events."""
    started, batch_of, taken = {}, {}, {}
    for event in events:
        if event["reason"] == "BatchStarted":
            started[event["message"].split(":")[0]] = when(event)
        if event["reason"] in ("HostSwitched", "WeightsUpdated") and event["host"]:
            batch_of[event["host"]] = event["message"].split(":")[0]
        if event["reason"] == "GatePassed" and event["host"] in batch_of:
            taken[event["host"]] = round(when(event) - started.get(batch_of[event["host"]], when(event)), 3)
    return taken


class Bench:
    """The bench's fleet, its demo mirror, and the runs against them."""

    def __init__(self, fleet_dir: Path, data: list[str]):
        self.env = {**os.environ, **SECRETS, "PYTHONUNBUFFERED": "1", "SGLFLEET_FLEET_DIR": str(fleet_dir),
                    "SGLFLEET_DEVFLEET_SUBNET": "10.213.91.0/24", "SGLFLEET_DEVFLEET_BRIDGE": "sglfleetu0",
                    "SGLFLEET_DEVFLEET_PREFIX": "u", "SGLFLEET_DEV_GATEWAYS": "1"}
        self.fleet = Fleet(state_dir=fleet_dir, subnet=self.env["SGLFLEET_DEVFLEET_SUBNET"],
                           bridge=self.env["SGLFLEET_DEVFLEET_BRIDGE"], prefix=self.env["SGLFLEET_DEVFLEET_PREFIX"],
                           log=lambda line: None)
        self.data = [arg for pair in data for arg in ("--data", pair)]

    def up(self) -> dict:
        self.fleet.up(3)

        def lock(repo, revision, url, manifests):
            subprocess.run([str(SGLFLEET), "model", "lock", f"{repo}@{revision}", "--endpoint", url], check=True,
                           env={**self.env, "SGLFLEET_MODELS": str(manifests)}, capture_output=True, timeout=120)

        record = start_demo(self.fleet.state_dir, self.fleet.state()["gateway"], 8096, lock)
        self.env["SGLFLEET_MODELS"] = record["manifests"]
        self.deploy(f"model_revision={record['revisions'][0]}")
        return record

    def deploy(self, *data: str, events: Path | None = None) -> float:
        extra = [arg for pair in data for arg in ("--data", pair)]
        if events:
            extra += ["--data", f"events_file={events}"]
        started = time.monotonic()
        done = subprocess.run([str(PYINFRA), "inventory/dev.py", "deploy.py", "-y", *self.data, *extra],
                              cwd=PROJECT_ROOT, env=self.env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=1800)
        if done.returncode != 0:
            sys.exit(f"bench: the deploy failed ({done.returncode}):\n{done.stdout[-3000:]}")
        return time.monotonic() - started

    def roll(self, revision: str, mode: str) -> dict:
        """One rollout of ``revision`` in ``mode``, under traffic through the gateway: its figures."""
        url = f"http://{self.fleet.address(self.fleet.hosts[-1])}:30080"
        with tempfile.TemporaryDirectory() as folder:
            events = Path(folder) / "events.jsonl"
            traffic = Traffic(url, api_key=SECRETS["SGLFLEET_API_KEY"], mix=CLIENT_MIX)
            time.sleep(2)
            try:
                wall = self.deploy(f"model_revision={revision}", f"weights_update={MODES[mode]}", events=events)
            finally:
                time.sleep(2)
                traffic.stop()
            lines = [json.loads(line) for line in events.read_text().splitlines()]
        failed = [request for request in traffic.requests if not request.ok]
        begun = min((request.sent for request in traffic.requests), default=0.0)
        # What went wrong, most common first, with when (seconds after the traffic began): a figure to explain.
        kinds = collections.Counter(f"{r.kind}: {r.status} {r.error or ''}"[:200] for r in failed).most_common(5)
        return {"wall_s": round(wall, 2), "hosts_s": per_host(lines), "requests": len(traffic.requests),
                "not_in_full": len(failed), "failures": [{"what": what, "count": count} for what, count in kinds],
                "failed_between_s": [round(min(r.sent for r in failed) - begun, 1),
                                     round(max(r.sent for r in failed) - begun, 1)] if failed else None}


def render(results: dict) -> str:
    rows = ["| | in place | restart |", "| --- | ---: | ---: |"]
    figures = {mode: results[mode] for mode in MODES}

    def median(mode, key):
        values = [run[key] for run in figures[mode]]
        return statistics.median(values) if values else float("nan")

    def host_median(mode):
        values = [s for run in figures[mode] for s in run["hosts_s"].values()]
        return statistics.median(values) if values else float("nan")

    rows.append(f"| a host, batch start to gate passed (median) | {host_median('in place'):.2f} s | "
                f"{host_median('restart'):.2f} s |")
    rows.append(f"| the run (median wall) | {median('in place', 'wall_s'):.1f} s | {median('restart', 'wall_s'):.1f} s |")
    rows.append(f"| requests not answered in full (all rounds) | {sum(r['not_in_full'] for r in figures['in place'])} "
                f"of {sum(r['requests'] for r in figures['in place'])} | "
                f"{sum(r['not_in_full'] for r in figures['restart'])} of {sum(r['requests'] for r in figures['restart'])} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rollouts of each mode (median)")
    parser.add_argument("--data", action="append", default=[], help="inventory data for every run, KEY=VALUE")
    parser.add_argument("--fleet-dir", type=Path, default=CACHE / "weights-fleet", help="the bench fleet's state")
    parser.add_argument("--keep", action="store_true", help="leave the bench fleet up")
    args = parser.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    bench = Bench(args.fleet_dir, args.data)
    results = {mode: [] for mode in MODES}
    try:
        revisions = bench.up()["revisions"]
        serving = 0
        for number in range(args.rounds):
            order = list(MODES) if number % 2 == 0 else list(reversed(MODES))  # alternate which goes first
            for mode in order:
                serving = 1 - serving
                results[mode].append(bench.roll(revisions[serving], mode))
                log(f"round {number + 1} {mode}: {results[mode][-1]}")
                RESULTS.write_text(json.dumps(results, indent=1))
    finally:
        stop_demo(bench.fleet.state_dir)
        if not args.keep:
            bench.fleet.down()
    print(render(results))


if __name__ == "__main__":
    main()
