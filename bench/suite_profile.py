"""
Where the test suite's time goes: per module, from a pytest log run with ``--durations=0``.

    PYTEST_ADDOPTS="--durations=0" make test 2>&1 | tee suite.log
    .venv/bin/python bench/suite_profile.py suite.log            # a Markdown table, slowest first

Setup time counts where pytest reports it: a module fixture's converge falls on the
module's first test. Durations under pytest's 5 ms floor are not in the log.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

LINE = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(tests/[\w/]+\.py)::(\S+)")
CLOSING = re.compile(r"=+ (.*) in ([\d.]+)s")


def profile(text: str) -> tuple[dict, float | None, str]:
    """``({module: {"call": s, "setup": s, "teardown": s, "tests": n}}, total seconds, closing line)``."""
    modules: dict = collections.defaultdict(lambda: {"call": 0.0, "setup": 0.0, "teardown": 0.0, "tests": set()})
    for line in text.splitlines():
        if found := LINE.match(line):
            seconds, phase, module, test = found.groups()
            modules[module][phase] += float(seconds)
            modules[module]["tests"].add(test)
    closing = [found for line in text.splitlines() if (found := CLOSING.search(line))]
    total = float(closing[-1].group(2)) if closing else None
    return dict(modules), total, closing[-1].group(1) if closing else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--top", type=int, default=15, help="modules to list (the rest summed)")
    args = parser.parse_args(argv)
    modules, total, closing = profile(args.log.read_text(errors="replace"))
    if not modules:
        print(f"{args.log}: no durations (run pytest with --durations=0)", file=sys.stderr)
        return 1
    rows = sorted(modules.items(), key=lambda item: -sum(item[1][p] for p in ("call", "setup", "teardown")))
    print("| module | tests | setup s | call s | teardown s | total s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    rest = [0, 0.0, 0.0, 0.0]
    for index, (module, times) in enumerate(rows):
        spent = times["setup"] + times["call"] + times["teardown"]
        if index < args.top:
            print(f"| {module} | {len(times['tests'])} | {times['setup']:.0f} | {times['call']:.0f} | "
                  f"{times['teardown']:.0f} | {spent:.0f} |")
        else:
            rest = [rest[0] + len(times["tests"]), rest[1] + times["setup"], rest[2] + times["call"],
                    rest[3] + times["teardown"]]
    if rest[0]:
        print(f"| {len(rows) - args.top} more modules | {rest[0]} | {rest[1]:.0f} | {rest[2]:.0f} | {rest[3]:.0f} | "
              f"{sum(rest[1:]):.0f} |")
    if total is not None:
        print(f"\n{closing}, {total:.0f} s of suite time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
