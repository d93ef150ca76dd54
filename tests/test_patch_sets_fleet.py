"""
An operator's patch set on the local fleet: added, it rolls out as a new release; dropped, the
hosts go back to the release and the file they had before.

The fleet converges on stack ``dev`` (the real sglang 0.5.9 wheel) with the shipped patch sets;
``--data patch_sets_dir=tests/data/patch_sets/fleet`` adds ``fleet_marker`` (a method on
``KimiVLForConditionalGeneration`` in ``kimi_vl.py``, which no shipped set changes and the
stand-in never imports); ``--data patch_sets_skip=fleet_marker`` drops it again. The tests share
one fleet and run in file order.
"""

import hashlib

import pytest

from deploying import deploy, fleet_state, stack_on
from sglfleet import PROJECT_ROOT
from sglfleet.artifacts.patchsets import apply_sets, load_set
from sglfleet.artifacts.upstream import sglang_file
from sglfleet.host.stacks import patched
from test_drift import drift_lines
from test_rollout import results

pytestmark = pytest.mark.fleet

MARKER = load_set(PROJECT_ROOT / "tests/data/patch_sets/fleet/fleet_marker.toml")
ADD = ("--data", "patch_sets_dir=tests/data/patch_sets/fleet")
DROP = (*ADD, "--data", "patch_sets_skip=fleet_marker")
PRISTINE = sglang_file("0.5.9", MARKER.file).read_bytes()
WITH_MARKER = apply_sets(PRISTINE, [MARKER])[0]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def on_hosts(fleet) -> dict[str, str]:
    """host -> sha256 of its stack's kimi_vl.py, read through nsenter."""
    found = {}
    for host in fleet.hosts:
        stack = stack_on(fleet, host)
        path = f"{stack.venv}/{patched(stack.python, MARKER.file)}"
        found[host] = fleet.inside(host, f"sha256sum {path}").stdout.split()[0]
    return found


@pytest.fixture(scope="module")
def baseline(fleet):
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    done = deploy()
    assert done.returncode == 0, done.stdout[-3000:]
    state = fleet_state(fleet)
    assert on_hosts(fleet) == {host: sha(PRISTINE) for host in fleet.hosts}
    yield fleet, state
    deploy()  # leave the fleet without the operator's set


def test_adding_a_patch_set_rolls_out_a_new_release(baseline):
    fleet, before = baseline

    result = deploy(*ADD)

    assert result.returncode == 0, result.stdout[-3000:]
    assert "fleet_marker" in result.stdout  # the patch step names the set
    after = fleet_state(fleet)
    for host in fleet.hosts:
        assert after[host]["current"] != before[host]["current"], host
        assert after[host]["previous"] == before[host]["current"], host
        assert after[host]["health"] == 200, host
    assert on_hosts(fleet) == {host: sha(WITH_MARKER) for host in fleet.hosts}

    again = deploy(*ADD)  # converged: the same release, the same file, no stack rebuilt

    assert again.returncode == 0, again.stdout[-3000:]
    assert drift_lines(again.stdout) == [] and results(again.stdout)["success"] == 0, again.stdout[-3000:]
    assert {h: s["current"] for h, s in fleet_state(fleet).items()} == {h: s["current"] for h, s in after.items()}
    assert on_hosts(fleet) == {host: sha(WITH_MARKER) for host in fleet.hosts}


def successes(output: str, operation: str) -> str:
    """The Success column of ``operation``'s row in pyinfra's results ("-" for none)."""
    (row,) = [line for line in output.splitlines() if operation in line and line.split()[-4:-3] and
              line.split()[-4].isdigit()]
    return row.split()[-3]


def test_dropping_it_rolls_back_to_the_unpatched_file(baseline):
    fleet, before = baseline

    result = deploy(*DROP)

    assert result.returncode == 0, result.stdout[-3000:]
    # its block went with the patch step: no drift found, no stack rebuilt
    assert drift_lines(result.stdout) == [] and successes(result.stdout, "built, verified") == "-", result.stdout[-3000:]
    after = fleet_state(fleet)
    for host in fleet.hosts:
        assert after[host]["current"] == before[host]["current"], host  # the release id it had before
        assert after[host]["health"] == 200, host
    assert on_hosts(fleet) == {host: sha(PRISTINE) for host in fleet.hosts}
