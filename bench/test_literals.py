"""
Count the test lines that spell out a host path or a unit name instead of taking it from the layout.

Issue #30 asks the tests to get where sglfleet keeps things on a host, and what its units
are called, from ``sglfleet/host/layout.py`` (``LAYOUT``, ``Layout.for_service``,
``GATEWAY``), through ``tests/paths.py``, so a change of layout is one change. This counts
what is left: the lines of ``tests/*.py`` (not ``tests/data/``; the ``tests/bad_inputs/``
cases only where their ``_expect`` names one) that hold any of

    /opt/sglfleet...                  LAYOUT.root and everything under it
    /etc/sglfleet...                  LAYOUT.etc: env files, the stand-in's fault file
    /etc/systemd/system...            a unit's file (Layout.unit_file)
    /var/lib/sglang..., /var/cache/sglang..., /run/sglang...
                                      a service's state, cache and runtime folders
    /var/lib/sglfleet, /var/cache/sglfleet, /run/sglfleet
                                      sglfleet's own folders, had it any (the launcher's fallback cache)
    sglang.service, sglang-<name>.service, sglang-gateway.service
                                      the units (Layout.unit, for_service, GATEWAY; files/templates)
    sglfleet-<name>.service / .timer  sglfleet's transient units (the compile share)
    sglang.env, sglang-<name>.env     env files named bare (Layout.env_file)

Each path counts with or without its leading slash (``root / "opt/sglfleet/current"`` in a
test's own root). Template file names (``sglang.service.j2``), test-only folders (``/opt/sglfleet-test``,
``/run/sglfleet-watch-stop``) and other programs' paths (``/var/lib/prometheus``) are not
counted. A line counts once, however many it holds; the report says how many lines are
code and how many comments or docstrings (both count).

    .venv/bin/python bench/test_literals.py            # the count, per file
    .venv/bin/python bench/test_literals.py --lines    # and every line counted
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
LITERAL = re.compile(
    r"(?<![\w.-])/?opt/sglfleet(?![-\w])"
    r"|(?<![\w.-])/?etc/sglfleet(?![-\w])"
    r"|(?<![\w.-])/?etc/systemd/system\b"
    r"|(?<![\w.-])/?(?:var/lib|var/cache|run)/(?:sglang|sglfleet)(?![\w.]|-(?:watch|test))"
    r"|\bsglang(?:-[\w{}<>]+)*\.(?:service|env)(?![.\w])"
    r"|\bsglfleet-[\w{}<>-]+\.(?:service|timer)(?![.\w])"
)


def _docstring_lines(source: str) -> set[int]:
    """The line numbers of module, class and function docstrings."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def _comment_lines(source: str) -> set[int]:
    """The line numbers whose only match could be in a comment (a line with code too counts as code)."""
    return {token.start[0] for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT}


def counted(path: Path) -> list[tuple[int, str, str]]:
    """``(line number, "code" or "prose", line)`` for each counted line of one file."""
    source = path.read_text()
    if path.parent.name == "bad_inputs":
        source_lines = source.splitlines()
        return [(number, "code", line) for number, line in enumerate(source_lines, 1)
                if line.startswith("_expect") and LITERAL.search(line)]
    docstrings, comments = _docstring_lines(source), _comment_lines(source)
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        if not LITERAL.search(line):
            continue
        code = line.split("#", 1)[0] if number in comments else line
        kind = "prose" if number in docstrings or not LITERAL.search(code) else "code"
        found.append((number, kind, line))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--lines", action="store_true", help="print every line counted")
    arguments = parser.parse_args()
    files = sorted(TESTS.glob("*.py")) + sorted((TESTS / "bad_inputs").glob("*.py"))
    total = code = 0
    for path in files:
        found = counted(path)
        if not found:
            continue
        in_code = sum(kind == "code" for _, kind, _ in found)
        total, code = total + len(found), code + in_code
        print(f"{len(found):4d} {in_code:4d}  {path.relative_to(TESTS.parent)}")
        if arguments.lines:
            for number, kind, line in found:
                print(f"        {number:5d} {kind:5s} {line.strip()}")
    print(f"{total:4d} {code:4d}  lines in all (the first column; the second: in code, not comments or docstrings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
