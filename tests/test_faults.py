"""
Faults during a rollout on the local fleet: a host powered off mid-restart, a
link cut during the gate, the controller interrupted, sglang.service killed
after its gate, a full disk and a corrupted wheel during a stack build. Each test checks what every host serves afterwards, what the
output said about each host, and that running the same command again finishes
the rollout with no manual clean-up.

Invariant: no host is left without a serving release, except one powered off.
Each test rolls out its own release (``standin_warmup_s`` is part of it). The
host a fault strikes during its gate loads slowly (the stand-in's ``slow-load``
fault), which leaves time to strike; the others start at their usual pace.
"""

import os
import re
import shutil
import signal
import time

import pytest

from deploying import deploy
from faulting import Run, new_release, results, serving, wait_serving, wait_unlocked
from paths import LAYOUT, UNIT
from sglfleet import FILES
from sglfleet.artifacts.stacks import load_stack, lock_path
from sglfleet.artifacts.wheelhouse import unpacked_size
from sglfleet.events import read_events
from sglfleet.plan.preflight import disk_needed

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def fleet_ok(fleet):
    """A converged, healthy fleet before and after the module, whatever a test left."""
    def heal():
        fleet.up(len(fleet.hosts))
        for host in fleet.hosts:
            fleet.restore_link(host)
            fleet.fault(host, "clear")
            wait_unlocked(fleet, host)
        done = deploy()
        assert done.returncode == 0, done.stdout[-3000:]

    heal()
    yield fleet
    heal()


@pytest.fixture(autouse=True)
def no_fault_left(fleet_ok):
    """A test's stand-in faults end with it."""
    yield
    for host in fleet_ok.hosts:
        if fleet_ok.system_state(host) != "unreachable":
            fleet_ok.fault(host, "clear")


SLOW_LOAD = "slow-load 2.5"  # node2 takes 2.5 s more to load: the window a fault strikes in


def test_host_powered_off_in_its_restart(fleet_ok):
    fleet = fleet_ok
    before = serving(fleet)
    args = ("--data", "standin_warmup_s=1.1")
    fleet.fault("node2", SLOW_LOAD)
    run = Run(*args)
    try:
        run.wait_for(r"\[node2\] wave1: will switch")
        time.sleep(1)  # the tool on node2 has switched and restarted; its gate waits out the warm-up
        fleet.kill_host("node2")
        done = run.finish(120)
    finally:
        run.stop()
    release = new_release(done.stdout)

    assert done.returncode != 0
    assert "[node2] lost the connection during the switch" in done.stdout, \
        [line for line in done.stdout.splitlines() if "node2" in line]
    assert "[node3] wave2 not started: node2 of wave1 did not pass (1 of 1 hosts, above max_fail_percentage 0)" in done.stdout
    assert fleet.system_state("node2") == "unreachable"
    assert serving(fleet, ["node1", "node3"]) == {"node1": release, "node3": before["node3"]}

    fleet.up(3)  # power back on: the host comes back blank, like a replaced machine
    again = deploy(*args)
    assert again.returncode == 0, again.stdout[-3000:]
    assert serving(fleet) == {host: release for host in fleet.hosts}


def test_link_cut_during_the_gate(fleet_ok):
    fleet = fleet_ok
    args = ("--data", "standin_warmup_s=1.2")
    fleet.fault("node2", SLOW_LOAD)
    run = Run(*args)
    try:
        run.wait_for(r"\[node2\] wave1: will switch")
        fleet.cut_link("node2")
        try:
            time.sleep(6)  # longer than the warm-up: the gate ends while the link is down
        finally:
            fleet.restore_link("node2")
        done = run.finish(120)
    finally:
        run.stop()
    release = new_release(done.stdout)

    # The gate ran on the host; its answer arrived once the link was back.
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(r"\[node2\] Success", done.stdout)
    assert serving(fleet) == {host: release for host in fleet.hosts}
    again = deploy(*args)
    assert again.returncode == 0 and results(again.stdout)["success"] == 0, again.stdout[-3000:]


def test_link_cut_for_good_during_the_gate(fleet_ok):
    fleet = fleet_ok
    before = serving(fleet)
    # The answer's timeout bounds every host's switch and gate: long enough for the canary's
    # on a loaded 2-core machine (it once took over 12 s there), short enough to wait out.
    args = ("--data", "standin_warmup_s=1.3", "--data", "gate_answer_timeout_s=30")
    fleet.fault("node2", SLOW_LOAD)
    run = Run(*args)
    try:
        run.wait_for(r"\[node1\] canary: gate passed")
        run.wait_for(r"\[node2\] wave1: will switch")
        fleet.cut_link("node2")
        try:
            done = run.finish(150)  # the controller gives node2 up after 30 s
            release = new_release(done.stdout)
            assert done.returncode != 0
            assert re.search(r"\[node2\] lost the connection during the switch.*no answer within 30 s",
                             done.stdout), done.stdout[-3000:]
            assert "wave2 not started: node2 of wave1 did not pass (1 of 1 hosts, above max_fail_percentage 0)" in done.stdout
            assert serving(fleet, ["node1", "node3"]) == {"node1": release, "node3": before["node3"]}
        finally:
            fleet.restore_link("node2")
    finally:
        run.stop()

    # node2 serves: its old release if the command never reached it, else the new one,
    # switched and gated on its own under its lock.
    assert wait_serving(fleet, "node2", timeout=30) in (before["node2"], release)
    again = deploy(*args[:2])  # the same release (the answer's timeout is the controller's), waited for in full
    # node2's lines first: once, under a full suite's load, its switch failed here and the tail hid why.
    assert again.returncode == 0, "\n".join(line for line in again.stdout.splitlines() if "node2" in line) + \
        again.stdout[-2000:]
    assert serving(fleet) == {host: release for host in fleet.hosts}


@pytest.mark.parametrize("moment, signum, warmup", [
    ("between waves", signal.SIGINT, "1.4"),
    ("in a wave", signal.SIGINT, "1.5"),
    ("between waves", signal.SIGKILL, "1.6"),
    ("in a wave", signal.SIGKILL, "1.7"),
], ids=["between-waves-SIGINT", "in-a-wave-SIGINT", "between-waves-SIGKILL", "in-a-wave-SIGKILL"])
def test_controller_interrupted(fleet_ok, moment, signum, warmup):
    fleet = fleet_ok
    before = serving(fleet)
    args = ("--data", f"standin_warmup_s={warmup}")
    if moment == "in a wave":
        fleet.fault("node2", SLOW_LOAD)
    run = Run(*args)
    try:
        if moment == "between waves":
            run.wait_for(r"\[node1\] canary: will switch[^\n]*\n(?:.*\n)*?\s+\[node1\] Success")
        else:
            run.wait_for(r"\[node2\] wave1: will switch")
            time.sleep(1)  # node2 is restarting into the new release
        run.process.send_signal(signum)
        done = run.finish(30)
    finally:
        run.stop()
    release = new_release(done.stdout)

    if signum == signal.SIGINT:
        assert done.returncode == 130
        assert "sglfleet: interrupted." in done.stdout and "Run the same command again" in done.stdout
    else:
        assert done.returncode == -signal.SIGKILL
    # A switch in progress finishes on the host on its own; wave2 never started.
    for host in fleet.hosts:
        wait_unlocked(fleet, host)
    after = serving(fleet)
    assert after["node1"] == release and after["node3"] == before["node3"]
    assert after["node2"] in (release, before["node2"]) and after["node2"], after

    again = deploy(*args)
    assert again.returncode == 0, again.stdout[-3000:]
    assert serving(fleet) == {host: release for host in fleet.hosts}


def test_service_killed_right_after_its_gate(fleet_ok):
    fleet = fleet_ok
    args = ("--data", "standin_warmup_s=1.8")
    run = Run(*args)
    try:
        run.wait_for(r"\[node1\] canary: will switch[^\n]*\n(?:.*\n)*?\s+\[node1\] Success")
        pid = fleet.exec("node1", f"systemctl show -p MainPID --value {UNIT}").stdout.strip()
        restarts = fleet.exec("node1", f"systemctl show -p NRestarts --value {UNIT}").stdout.strip()
        fleet.exec("node1", f"kill -9 {pid}")
        done = run.finish(120)
    finally:
        run.stop()
    release = new_release(done.stdout)
    assert done.returncode == 0, done.stdout[-3000:]

    # Restart=on-failure brings it back (RestartSec, service_restart_s, then the warm-up).
    assert wait_serving(fleet, "node1", timeout=30) == release
    assert int(fleet.exec("node1", f"systemctl show -p NRestarts --value {UNIT}").stdout) > int(restarts)
    again = deploy(*args)
    assert again.returncode == 0, again.stdout[-3000:]
    assert results(again.stdout)["success"] == 0, again.stdout[-3000:]
    assert serving(fleet) == {host: release for host in fleet.hosts}


STACKS = LAYOUT.stacks


@pytest.fixture
def faulttest_stack(tmp_path, fleet_ok):
    """Stack files with ``faulttest``, a copy of the dev stack under its own id, so a converge builds it."""
    stacks = tmp_path / "stacks"
    shutil.copytree(FILES / "stacks", stacks)
    shutil.copy(stacks / "dev.toml", stacks / "faulttest.toml")
    lock_path("faulttest", stacks).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(lock_path("dev", stacks), lock_path("faulttest", stacks))
    # A stack id of its own each run (the id hashes the lock), so the build happens
    # even on a fleet where an earlier run's faulttest stack was kept.
    with lock_path("faulttest", stacks).open("a") as lock:
        lock.write(f"# fault test run {tmp_path.name}-{os.getpid()}\n")
    stack = load_stack("faulttest", stacks_dir=stacks)
    yield stack, {"SGLFLEET_STACKS": str(stacks)}
    # Back to the dev stack; the faulttest stack stays for the previous release
    # (a rollback needs it) until collection takes it.
    done = deploy()
    assert done.returncode == 0, done.stdout[-3000:]


def test_full_disk_and_corrupted_wheel_during_a_stack_build(fleet_ok, faulttest_stack, tmp_path):
    fleet = fleet_ok
    stack, env = faulttest_stack
    stack = stack.for_python(fleet.python_of("node3"))  # as node3 builds it, for its own python3
    before = serving(fleet)
    sglang = next(f for f in stack.files if f.name == "sglang")
    # node2: a wheel in its wheelhouse corrupted; node3: its stack filesystem fills up
    # as soon as its build starts (a small tmpfs holding what was there and room enough
    # for preflight, then a filler that wakes when the build takes its inputs, before the
    # venv: waiting for the venv lost the race to a quick build on a busy machine). The
    # room is twice what the build needs: the half build the filler cut short stays, and
    # the next run's preflight must still fit.
    fleet.exec("node2", f"echo corrupt >> {LAYOUT.wheelhouse}/{sglang.filename}")
    fleet.exec("node3", f"used=$(du -sk {STACKS} | cut -f1) && mkdir -p /root/stacks-copy"
                        f" && rm -rf {STACKS}/.build-faulttest-* && cp -a {STACKS}/. /root/stacks-copy/"
                        f" && mount -t tmpfs -o size=$((used + {2 * disk_needed(stack, unpacked_size(stack)) // 1024 + 20000}))k tmpfs {STACKS}"
                        f" && cp -a /root/stacks-copy/. {STACKS}/ && rm -rf /root/stacks-copy")
    try:
        fleet.exec("node3", f"setsid -f timeout 120 sh -c 'until [ -e {STACKS}/.build-{stack.id}/requirements.txt ]; do sleep 0.01;"
                            f" done; cat /dev/zero > {STACKS}/.filler' </dev/null >/dev/null 2>&1")
        args = ("--data", "stack=faulttest")
        events_file = tmp_path / "events.jsonl"
        done = Run(*args, "--data", f"events_file={events_file}", env=env).finish(240)
        release = new_release(done.stdout)

        assert done.returncode != 0, done.stdout[-5000:]
        node3 = [line for line in done.stdout.splitlines() if "[node3]" in line]
        assert any("No space left on device" in line for line in node3), "\n".join(node3)
        assert "[node3] Error" in done.stdout
        # The event log says so too: node3 failed before its switch, and the rollout was aborted.
        events = read_events(events_file)
        assert ("HostFailed", "node3") in [(e["reason"], e["host"]) for e in events]
        assert [e["reason"] for e in events[-2:]] == ["RolloutAborted", "RunFinished"]
        assert events[-2]["message"].startswith("node3: failed before its switch")
        # node3 failed alone, before its rollout: it serves its old release; the others the new one.
        assert serving(fleet) == {"node1": release, "node2": release, "node3": before["node3"]}
        sums = fleet.exec("node2", f"sha256sum {LAYOUT.wheelhouse}/{sglang.filename}").stdout
        assert sglang.sha256 in sums  # replaced from the controller

        fleet.exec("node3", f"rm -f {STACKS}/.filler")  # space is freed; nothing else is cleaned
        again = Run(*args, env=env).finish(240)
        assert again.returncode == 0, again.stdout[-3000:]
        assert serving(fleet) == {host: release for host in fleet.hosts}
        assert ".build-" not in fleet.exec("node3", f"ls -A {STACKS}").stdout
    finally:
        # Keep what node3 built: copy the small filesystem onto the disk beneath, then drop it.
        fleet.exec("node3", f"rm -f {STACKS}/.filler; mkdir -p /mnt/opt && mount --bind {LAYOUT.root} /mnt/opt"
                            f" && cp -a {STACKS}/. /mnt/opt/stacks/; umount /mnt/opt; umount -l {STACKS}",
                   check=False)


def test_systemd_out_of_reach_is_one_line_and_changes_nothing(fleet_ok):
    """A tool whose systemctl cannot reach systemd (a host dying, say) says so in one line, exit 7."""
    fleet = fleet_ok
    release = os.path.basename(fleet.inside("node1", f"readlink {LAYOUT.current}").stdout.strip())
    pid = fleet.inside("node1", f"systemctl show -p MainPID --value {UNIT}").stdout.strip()
    done = fleet.inside("node1", "unshare -m sh -c 'mount -t tmpfs none /run/systemd"
                                 f" && {LAYOUT.tool} activate {release} --restart'",
                        check=False)
    assert done.returncode == 7, done.stdout + done.stderr
    assert re.fullmatch(r"systemctl \S+( \S+)* failed \(exit 1\): Failed to connect to bus: [^\n]+",
                        done.stderr.strip()), done.stderr
    assert fleet.inside("node1", f"systemctl show -p MainPID --value {UNIT}").stdout.strip() == pid
    assert serving(fleet)["node1"] == release
