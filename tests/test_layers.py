"""The layers of docs/layout.md, checked by import-linter's contracts (pyproject.toml's [tool.importlinter])."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sglfleet import PROJECT_ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    # Its own PYTHONPATH first: the tree at root is the one analysed, not the installed one.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)


def test_every_contract_is_kept():
    done = _lint(PROJECT_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def _copy(tmp_path: Path) -> Path:
    for name in ("sglfleet", "tasks"):
        shutil.copytree(PROJECT_ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT_ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def test_an_import_up_the_layers_breaks_the_contract(tmp_path):
    root = _copy(tmp_path)
    with (root / "sglfleet" / "plan" / "waves.py").open("a") as waves:
        waves.write("\nfrom sglfleet.controller import rollout  # noqa: E402 - planning that would run a switch\n")
    done = _lint(root)
    assert done.returncode == 1
    assert "Each layer imports only those below it BROKEN" in done.stdout
    assert "sglfleet.plan.waves -> sglfleet.controller.rollout" in done.stdout


def test_an_operation_that_imports_the_runs_record_breaks_the_contract(tmp_path):
    root = _copy(tmp_path)
    with (root / "sglfleet" / "operations" / "drift.py").open("a") as drift:
        drift.write("\nfrom sglfleet.record.run import record  # noqa: E402 - found, not given\n")
    done = _lint(root)
    assert done.returncode == 1
    assert "they import nothing of it BROKEN" in done.stdout
    assert "sglfleet.operations.drift -> sglfleet.record.run" in done.stdout
