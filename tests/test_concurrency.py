"""
Two runs against the same hosts at once: the host locks (the release switch's,
the stack build's) make one wait for the other or stop it with a clear
message; they never interleave.
"""

import contextlib
import re
import shutil
import time

import pytest

from deploying import deploy, host_state, pyinfra
from faulting import SWITCH, Run, results, serving, wait_unlocked
from paths import LAYOUT, UNIT
from sglfleet import FILES
from sglfleet.artifacts.stacks import load_stack, lock_path

pytestmark = pytest.mark.fleet

LOCK = LAYOUT.lock


@pytest.fixture(scope="module")
def converged(fleet):
    for host in fleet.hosts:
        fleet.fault(host, "clear")
        wait_unlocked(fleet, host)
    done = deploy()
    assert done.returncode == 0, done.stdout[-3000:]
    yield fleet
    done = deploy()
    assert done.returncode == 0, done.stdout[-3000:]


def starts(fleet, host: str, since: float) -> list[float]:
    """When sglang.service started since ``since``, in seconds of the monotonic clock every local host shares."""
    log = fleet.exec(host, f"journalctl -u {UNIT} --since @{since:.3f} -o short-monotonic --no-pager"
                           f" | grep 'Started {UNIT}' || true").stdout
    return [float(re.match(r"\[\s*([\d.]+)\]", line).group(1)) for line in log.splitlines()]


HOLDER = "/run/sglfleet-test-lock-holder.pid"


@contextlib.contextmanager
def holding_lock(fleet, host: str, seconds: float = 120):
    """
    Another run's lock on ``host``, taken before the block starts and given up as it
    ends: the holder (its own session) is killed by its pid, so no test waits out a
    hold. It ends by itself after ``seconds`` should the test die.
    """
    fleet.exec(host, f"mkdir -p {LAYOUT.root}; setsid sh -c 'echo $$ > {HOLDER}; exec flock {LOCK} sleep {seconds}'"
                     f" </dev/null >/dev/null 2>&1 & sleep 0.3; ! flock -n {LOCK} true")
    try:
        yield
    finally:
        fleet.exec(host, f"kill -- -$(cat {HOLDER}) && rm -f {HOLDER}")
        wait_unlocked(fleet, host)


def test_two_converges_at_once_wait_for_each_other(converged, tmp_path):
    fleet = converged
    stacks = tmp_path / "stacks"
    shutil.copytree(FILES / "stacks", stacks)
    shutil.copy(stacks / "dev.toml", stacks / "concurrent.toml")
    lock_path("concurrent", stacks).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(lock_path("dev", stacks), lock_path("concurrent", stacks))
    stack = load_stack("concurrent", stacks_dir=stacks)
    args, env = ("--data", "stack=concurrent"), {"SGLFLEET_STACKS": str(stacks)}

    for host in fleet.hosts:  # both runs must build it, each host for its own python3
        fleet.exec(host, f"rm -rf {stack.for_python(fleet.python_of(host)).path}")
    since = time.time()
    first, second = Run(*args, env=env), Run(*args, env=env)  # a new stack and a new release
    try:
        done = [first.finish(240), second.finish(240)]
    finally:
        first.stop()
        second.stop()
    for run in done:
        assert run.returncode == 0, run.stdout[-3000:]
    # Whichever run took the canary's lock first switched it; the other found it serving.
    switched = {found for run in done for found in SWITCH.findall(run.stdout)}
    assert len(switched) == 1, switched
    release = switched.pop()
    assert serving(fleet) == {host: release for host in fleet.hosts}
    # One restart per host, and in wave order: neither run switched a later wave
    # before the earlier one passed, nor switched a host the other was gating.
    restarts = {host: starts(fleet, host, since) for host in fleet.hosts}
    assert all(len(found) == 1 for found in restarts.values()), restarts
    assert restarts["node1"] < restarts["node2"] < restarts["node3"], restarts
    for host in fleet.hosts:
        built = stack.for_python(fleet.python_of(host))
        listing = fleet.exec(host, f"ls -A {LAYOUT.stacks} {LAYOUT.releases}; cat {built.marker}").stdout
        assert ".build-" not in listing and ".partial" not in listing, (host, listing)
        assert f'"stack_id": "{built.id}"' in listing.replace('":"', '": "'), listing


def test_converge_waits_for_a_held_host_lock(converged):
    fleet = converged
    assert deploy().returncode == 0  # serving the default release: nothing to switch
    before = host_state(fleet, "node2")["active_since"]
    with holding_lock(fleet, "node2"):
        run = Run()
        try:
            run.wait_for(r"\[node2\] wave1: another sglfleet run holds this host's lock; waiting for it")
            time.sleep(1)
            assert run.process.poll() is None  # it waits, and does not give up
        except BaseException:
            run.stop()
            raise
    done = run.finish()
    assert done.returncode == 0, done.stdout[-3000:]
    assert "[node2] wave1: another sglfleet run holds this host's lock; waiting for it" in done.stdout
    assert host_state(fleet, "node2")["active_since"] == before  # waited, then found it serving
    assert results(done.stdout)["success"] == 0, done.stdout[-3000:]  # and says so: no change


def test_a_lock_held_past_the_answer_timeout_fails_that_host_in_one_line(converged):
    fleet = converged
    with holding_lock(fleet, "node2"):
        done = deploy("--data", "gate_answer_timeout_s=3")
    assert done.returncode != 0
    assert ("[node2] wave1: no answer within 3 s while waiting for another run's lock; check node2, then run again"
            in done.stdout), done.stdout[-3000:]


def test_dry_run_does_not_wait_for_a_held_host_lock(converged):
    fleet = converged
    with holding_lock(fleet, "node3"):
        done = pyinfra("deploy.py", "--dry")
        held = fleet.exec("node3", f"flock -n {LOCK} true", check=False).returncode != 0
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(r"\[node3\] wave2: another sglfleet run holds this host's lock; will wait for it "
                     rf"\(held by pid \d+ flock {re.escape(LOCK)} sleep 120 ?\), then serve", done.stdout), \
        done.stdout[-3000:]  # and says who holds it
    assert held  # the plan came back while the other run still held the lock


def test_host_tool_stops_with_a_clear_message_when_the_lock_stays_held(converged):
    fleet = converged
    current = host_state(fleet, "node1")["current"]
    with holding_lock(fleet, "node1"):
        result = fleet.exec("node1", f"{LAYOUT.tool} --wait-lock 1 activate {current}",
                            check=False)
    assert result.returncode == 3
    assert result.stderr.strip() == (f"another sglfleet run holds {LOCK} (waited 1 s); "
                                     f"try again when it ends")
