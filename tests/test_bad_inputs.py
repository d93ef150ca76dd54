"""
The bad-input corpus (tests/bad_inputs/): each malformed inventory or --data set
gets exactly one clear message and a non-zero exit from ``sglfleet lint``,
which never connects to a host.

A case file holds ``_expect`` (fragments of its one message), and optionally
``_data`` (``--data`` overrides) and ``_env`` (environment, e.g. another
templates or stacks directory). ``valid.py`` is the base they all break.
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglfleet import PROJECT_ROOT

CORPUS = Path(__file__).with_name("bad_inputs")
CASES = sorted(CORPUS.glob("[0-9][0-9]-*.py"))
SGLFLEET = Path(sys.executable).with_name("sglfleet")


def case_spec(case: Path) -> dict:
    """The case's ``_expect``, ``_data`` and ``_env``, read without running it (some raise)."""
    spec = {}
    for node in ast.parse(case.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("_expect", "_data", "_env"):
                spec[node.targets[0].id] = ast.literal_eval(node.value)
    return spec


def run_lint(case: Path) -> tuple[subprocess.CompletedProcess, dict]:
    spec = case_spec(case)
    command = [str(SGLFLEET), "lint", str(case.relative_to(PROJECT_ROOT))]
    for pair in spec.get("_data", []):
        command += ["--data", pair]
    env = {**os.environ, **spec.get("_env", {})}
    env.pop("SGLFLEET_API_KEY", None)
    env.pop("SGLFLEET_HF_TOKEN", None)
    result = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120)
    return result, spec


def test_corpus_is_large_enough():
    assert len(CASES) >= 25


def test_valid_base_passes():
    result, _ = run_lint(CORPUS / "valid.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("case", CASES, ids=[case.stem for case in CASES])
def test_bad_input_is_refused_with_one_message(case):
    result, spec = run_lint(case)
    lines = result.stdout.splitlines()
    assert result.returncode != 0, result.stdout
    assert len(lines) == 1, f"expected one message, got:\n{result.stdout}"
    for fragment in spec["_expect"]:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.stderr, result.stderr
    # A secret placed in inventory data is refused without being echoed.
    assert "notarealtoken" not in result.stdout and "notarealkey" not in result.stdout
