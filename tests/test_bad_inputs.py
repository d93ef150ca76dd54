"""
The bad-input corpus (tests/bad_inputs/): each malformed inventory or --data set
gets exactly one clear message and a non-zero exit from ``sglfleet lint``,
which never connects to a host, and from ``pyinfra <case> deploy.py``, which
refuses before it connects: the local fleet's sshd logs show no connection.

A case file holds ``_expect`` (fragments of its one message), and optionally
``_data`` (``--data`` overrides) and ``_env`` (environment, e.g. another
templates or stacks directory). ``valid.py`` is the base they all break.
"""

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploying import sshd_connections
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


# The same corpus through ``pyinfra <case> deploy.py``, as an operator runs it. The
# cases' hosts are the live local fleet's addresses (bad_inputs/_fleet.py), so a
# run that connected before refusing would show in the hosts' sshd logs.

PYINFRA = Path(sys.executable).with_name("pyinfra")


def run_pyinfra(case: Path, *command: str) -> tuple[subprocess.CompletedProcess, dict]:
    spec = case_spec(case)
    argv = [str(PYINFRA), str(case.relative_to(PROJECT_ROOT)), *command]
    for pair in spec.get("_data", []):
        argv += ["--data", pair]
    env = {**os.environ, **spec.get("_env", {})}
    env.pop("SGLFLEET_API_KEY", None)
    env.pop("SGLFLEET_HF_TOKEN", None)
    result = subprocess.run(argv, cwd=PROJECT_ROOT, env=env, stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=120)
    return result, spec


def messages(result: subprocess.CompletedProcess) -> list[str]:
    """What pyinfra printed besides its own progress lines (``--> Loading config...``)."""
    return [line for line in (result.stdout + result.stderr).splitlines()
            if line.strip() and not line.startswith("--> ")]


@pytest.mark.fleet
def test_pyinfra_with_a_valid_inventory_does_connect(fleet):
    """The control: the counter sees the connections a run that passes validation makes."""
    since = time.time()
    result, _ = run_pyinfra(CORPUS / "valid.py", "exec", "-y", "--", "true")
    assert result.returncode == 0, result.stdout + result.stderr
    deadline = time.monotonic() + 10  # journald writes asynchronously
    while True:
        seen = {host: sshd_connections(fleet, host, since) for host in ("node1", "node2", "node3")}
        if all(seen.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert all(count >= 1 for count in seen.values()), seen


@pytest.mark.fleet
@pytest.mark.parametrize("case", CASES, ids=[case.stem for case in CASES])
def test_pyinfra_refuses_bad_input_before_any_connection(fleet, case):
    since = time.time()
    result, spec = run_pyinfra(case, "deploy.py", "-y")
    lines = messages(result)
    assert result.returncode != 0, result.stdout + result.stderr
    if case.stem == "34-inventory-does-not-load":
        # pyinfra itself reports an inventory file that raises: its traceback,
        # naming the file, ending in the one line that says what is wrong.
        assert f"An exception occurred in: {case.relative_to(PROJECT_ROOT)}" in result.stderr
        assert lines[-1] == "NameError: name 'undefined_host_list' is not defined", lines
    else:
        assert len(lines) == 1, f"expected one message, got:\n{result.stdout}{result.stderr}"
        for fragment in spec["_expect"]:
            assert fragment in lines[0], lines[0]
        assert result.returncode == 2
    assert "notarealtoken" not in result.stdout + result.stderr
    assert "notarealkey" not in result.stdout + result.stderr
    time.sleep(0.2)
    connections = {host: sshd_connections(fleet, host, since) for host in ("node1", "node2", "node3")}
    assert connections == {"node1": 0, "node2": 0, "node3": 0}
