"""
The engine's cuts on the project's own deploys: each host's plan is stock pyinfra's.

Each deploy runs dry on the local fleet (converged, with a previous release for
rollback.py to go back to) with pyinfra as it ships (``SGLFLEET_PYINFRA=stock``), then
with every cut; and again as it ships, then with each cut alone. The run's config,
``tests/plan_record.py``, writes each host's planned operations in pyinfra's order:
the operation order each was given, its hash, names and arguments, its global
arguments and whether it would change the host. Every run's plans must be stock pyinfra's.
And pyinfra under another version number runs without a cut, and says so in one line.
"""

from __future__ import annotations

import json
from importlib.metadata import distribution
from pathlib import Path

import pyinfra as pyinfra_package
import pyinfra_cli
import pytest

from deploying import converged, eagle_change, pyinfra
from sglfleet.hooks.engine import CUTS, PYINFRA

pytestmark = pytest.mark.fleet

# The Makefile's CHANGE: other EAGLE-3 numbers (a new release on every host), rolled out in batches.
CHANGE = (*eagle_change(3), "--data", 'rollout_serial=[1, "50%"]')
# Two services on a host (tests/test_services_fleet.py's): a release staged for each, in a loop.
SERVICES = ("--data", "services=" + json.dumps([
    {"name": "a", "gpus": [0], "port": 30001},
    {"name": "b", "gpus": [1, 2], "port": 30002, "tp_size": 2, "speculative_num_steps": 2,
     "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3}]))
DEPLOYS = {
    "no-op": ("deploy.py",),
    "change": ("deploy.py", *CHANGE),
    "services": ("deploy.py", *SERVICES),
    "rollback": ("rollback.py",),
}
# Every cut, then each alone: the others left out (gc.freeze changes no plan).
RUNS = {"every cut": "", **{cut.name: "stock:" + ",".join(other.name for other in CUTS if other is not cut)
                             for cut in CUTS}}


@pytest.fixture(scope="module")
def fleet_up(fleet):
    """The fleet converged twice: the release it serves, and a previous one that rollback.py goes back to."""
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    done = pyinfra("deploy.py", "-y", *eagle_change(2))
    assert done.returncode == 0, done.stdout[-3000:]
    yield from converged(fleet)


def planned(tmp_path, deploy: str, switch: str) -> dict:
    """``DEPLOYS[deploy]`` run dry with ``SGLFLEET_PYINFRA=switch``: the cuts in place, and each host's plan."""
    path = tmp_path / f"{deploy}-{switch or 'cut'}.json"
    playbook, *args = DEPLOYS[deploy]
    done = pyinfra(playbook, "--dry", "--config", "tests/plan_record.py", *args,
                   env={"SGLFLEET_PYINFRA": switch, "SGLFLEET_TEST_PLAN": str(path)})
    assert done.returncode == 0, done.stdout[-3000:]
    return json.loads(path.read_text())


def stock_plan(tmp_path, deploy: str, hosts) -> dict:
    """``DEPLOYS[deploy]`` planned by pyinfra as it ships: each host's plan."""
    plan = planned(tmp_path, deploy, "stock")
    assert plan["cuts"] == [] and sorted(plan["hosts"]) == sorted(hosts) and all(plan["hosts"].values()), plan
    return plan["hosts"]


def test_the_corpus_plans_something_on_every_host(fleet_up, tmp_path):
    """What the comparisons below compare: operations on every host, changes where the deploy makes them."""
    plans = {deploy: stock_plan(tmp_path, deploy, fleet_up.hosts) for deploy in DEPLOYS}
    for deploy in ("change", "services", "rollback"):
        assert all(any(op["change"] for op in ops) for ops in plans[deploy].values()), deploy
    # The services' releases are staged in a loop: the same call twice on a host, told apart by pyinfra.
    orders = [op["order"] for op in plans["services"]["node1"]]
    assert any(b[:-1] == a for a, b in zip(orders, orders[1:])), orders


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("deploy", DEPLOYS)
def test_each_hosts_plan_is_stock_pyinfras(fleet_up, tmp_path, deploy, run):
    # Stock pyinfra's plan just before: the fleet and the tree as they are for both runs.
    stock = stock_plan(tmp_path, deploy, fleet_up.hosts)
    ours = planned(tmp_path, deploy, RUNS[run])

    assert ours["cuts"] == ([cut.name for cut in CUTS] if run == "every cut" else [run])
    for host, ops in ours["hosts"].items():
        # Operation by operation, in pyinfra's order: a difference names the first operation that differs.
        assert [op["names"] for op in ops] == [op["names"] for op in stock[host]], host
        for position, (op, theirs) in enumerate(zip(ops, stock[host])):
            assert op == theirs, (host, position, op["names"])
    assert ours["hosts"] == stock


def test_another_pyinfra_runs_unpatched_and_says_so_once(fleet_up, tmp_path):
    """pyinfra's own code under another version (a 3.10.1 dist-info first on the path): no cut, one line, its plan."""
    other = tmp_path / "pyinfra-3.10.1"
    info = other / "pyinfra-3.10.1.dist-info"
    info.mkdir(parents=True)
    info.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: pyinfra\nVersion: 3.10.1\n")
    # The first pyinfra found is the only one read: its connectors (ssh) must be there.
    info.joinpath("entry_points.txt").write_text(distribution("pyinfra").read_text("entry_points.txt"))
    for package in (pyinfra_package, pyinfra_cli):
        (other / package.__name__).symlink_to(Path(package.__file__).parent)
    path = tmp_path / "other.json"

    done = pyinfra("deploy.py", "--dry", "--config", "tests/plan_record.py",
                   env={"PYTHONPATH": str(other), "SGLFLEET_TEST_PLAN": str(path)})

    assert done.returncode == 0, done.stdout[-3000:]
    said = [line.strip() for line in done.stdout.splitlines() if "unpatched" in line]
    assert said == [f"pyinfra 3.10.1: sglfleet runs it unpatched (its cuts are written for {PYINFRA})"]
    plan = json.loads(path.read_text())
    assert plan["cuts"] == [] and plan["hosts"] == stock_plan(tmp_path, "no-op", fleet_up.hosts)
