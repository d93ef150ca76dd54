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
import concurrent.futures
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploying import journal_shows_logins, sshd_connections
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


# The cases are independent processes: run them side by side, one for each core and one
# more (each spends part of its time starting Python), and judge each in its own test.
WORKERS = (os.cpu_count() or 1) + 1


def run_all(run, cases):
    """``run(case)`` for every case, in parallel; the results in the cases' order."""
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        return dict(zip(cases, pool.map(run, cases)))


@pytest.fixture(scope="module")
def linted():
    """Every case (and the valid base) through ``sglfleet lint``."""
    return run_all(run_lint, [CORPUS / "valid.py", *CASES])


def test_corpus_is_large_enough():
    assert len(CASES) >= 25


def test_valid_base_passes(linted):
    result, _ = linted[CORPUS / "valid.py"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("case", CASES, ids=[case.stem for case in CASES])
def test_bad_input_is_refused_with_one_message(case, linted):
    result, spec = linted[case]
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
def test_pyinfra_refuses_bad_input_before_any_connection(fleet):
    """
    Every case through ``pyinfra <case> deploy.py``: one message, exit 2, and
    no SSH connection to any host. The control at the end: a valid inventory's
    run does connect, and once every host's journal shows it, the windows of
    the refused runs before it are known to hold nothing.
    """
    hosts = ("node1", "node2", "node3")
    since = time.time()
    problems = []
    refused = run_all(lambda case: run_pyinfra(case, "deploy.py", "-y"), CASES)
    for case, (result, spec) in refused.items():
        lines = messages(result)
        if result.returncode == 0:
            problems.append(f"{case.stem}: exit 0")
        elif case.stem == "34-inventory-does-not-load":
            # pyinfra itself reports an inventory file that raises: its traceback,
            # naming the file, ending in the one line that says what is wrong.
            if f"An exception occurred in: {case.relative_to(PROJECT_ROOT)}" not in result.stderr or \
                    lines[-1] != "NameError: name 'undefined_host_list' is not defined":
                problems.append(f"{case.stem}: {lines[-3:]}")
        elif len(lines) != 1 or result.returncode != 2 or not all(f in lines[0] for f in spec["_expect"]):
            problems.append(f"{case.stem}: exit {result.returncode}: {lines}")
        if "notarealtoken" in result.stdout + result.stderr or "notarealkey" in result.stdout + result.stderr:
            problems.append(f"{case.stem}: a secret in the output")
    refused_until = time.time()
    assert problems == []

    control, _ = run_pyinfra(CORPUS / "valid.py", "exec", "-y", "--", "true")
    assert control.returncode == 0, control.stdout + control.stderr
    assert journal_shows_logins(fleet, hosts, refused_until)
    assert {host: sshd_connections(fleet, host, since, until=refused_until) for host in hosts} == \
        {host: 0 for host in hosts}
