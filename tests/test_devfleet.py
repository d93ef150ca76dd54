"""The local fleet: real hosts, real SSH with strict host keys, clean teardown."""

import os
import runpy
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import testinfra

from paths import LAYOUT
from sglfleet import PROJECT_ROOT
from sglfleet.devfleet import DevFleetError, Fleet, _alive, _cgroups

pytestmark = pytest.mark.fleet

SGLFLEET = [str(Path(sys.executable).with_name("sglfleet"))]


def sglfleet(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*SGLFLEET, *args], text=True, capture_output=True, cwd=PROJECT_ROOT,
                          **kwargs)


@pytest.fixture
def scratch(tmp_path):
    """A second, private fleet beside the shared one: free to crash, cut and tear down."""
    if os.geteuid() != 0:
        pytest.skip("the local fleet needs root")
    fleet = Fleet(state_dir=tmp_path / "fleet", subnet="10.213.48.0/24", bridge="sglfleett0",
                  prefix="t", log=lambda line: None)
    try:
        yield fleet
    finally:
        fleet.down()


def _mounts_under(path: Path) -> list[str]:
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(str(path))]


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


# --- the shared fleet (read-only use: other tests deploy to it) --------------


def test_hosts_run_their_own_systemd_and_answer_over_ssh(fleet):
    machine_ids = set()
    sockets = tempfile.mkdtemp(prefix="sglf")  # short: a unix socket path is at most 108 bytes
    try:
        for name in fleet.hosts:
            # one multiplexed connection per host, still through the strict ssh_config
            host = testinfra.get_host(f"ssh://{name}", ssh_config=str(fleet.ssh_config),
                                      controlpath=f"{sockets}/{name}", controlpersist=2)
            assert host.check_output("hostname") == name
            assert host.check_output("cat /proc/1/comm") == "systemd"
            # booted; other tests' deploys may leave a unit failed ("degraded")
            assert host.run("systemctl is-system-running").stdout.strip() in ("running", "degraded")
            assert host.service("ssh").is_running
            assert host.file("/usr/bin/flock").exists and host.file("/usr/bin/python3").exists
            assert host.run("python3 -m venv --help").rc == 0
            machine_ids.add(host.file("/etc/machine-id").content_string.strip())
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    assert len(machine_ids) == len(fleet.hosts)


def test_wrong_host_key_is_refused(fleet, tmp_path):
    node1, node2 = fleet.hosts[:2]
    good = fleet.known_hosts.read_text().splitlines()
    key_of = {line.split()[0]: line.split(None, 1)[1] for line in good}
    # node1's address paired with node2's host key: ssh must refuse, not ask.
    (tmp_path / "known_hosts").write_text(
        f"{fleet.address(node1)} {key_of[fleet.address(node2)]}\n")
    argv = [arg.replace(str(fleet.known_hosts), str(tmp_path / "known_hosts"))
            for arg in fleet.ssh_argv(node1)]
    result = subprocess.run(argv + ["true"], text=True, capture_output=True, timeout=30)
    assert result.returncode == 255
    assert "host key" in result.stderr.lower()
    assert fleet.exec(node1, "true").returncode == 0


def test_hosts_have_distinct_addresses_and_reach_each_other(fleet):
    addresses = [fleet.address(name) for name in fleet.hosts]
    assert len(set(addresses)) == len(addresses)
    for name, address in zip(fleet.hosts, addresses):
        shown = fleet.exec(name, "ip -4 -o addr show host0").stdout
        assert f"inet {address}/" in shown
    first = fleet.hosts[0]
    for other in fleet.hosts[1:]:
        fleet.exec(first, f"ping -c1 -W2 {other}")  # by name, through /etc/hosts
        fleet.exec(first, f"python3 -c \"import socket; socket.create_connection(('{other}', 22), 2)\"")


def test_up_again_changes_nothing(fleet):
    before = fleet.state()["hosts"]
    result = sglfleet("devfleet", "up", "--hosts", str(len(fleet.hosts)))
    assert result.returncode == 0, result.stderr
    assert "nothing changed" in result.stdout
    after = fleet.state()["hosts"]
    assert {h: r["nspawn_pid"] for h, r in after.items()} == {h: r["nspawn_pid"] for h, r in before.items()}
    assert {h: r["leader_pid"] for h, r in after.items()} == {h: r["leader_pid"] for h, r in before.items()}


def test_exec_runs_on_the_host_and_unknown_host_lists_hosts(fleet):
    result = sglfleet("devfleet", "exec", fleet.hosts[-1], "--", "cat", "/etc/hostname")
    assert (result.returncode, result.stdout.strip()) == (0, fleet.hosts[-1])
    assert sglfleet("devfleet", "exec", fleet.hosts[0], "--", "exit 3").returncode == 3
    result = sglfleet("devfleet", "exec", "node99", "--", "true")
    assert result.returncode != 0
    assert "node99" in result.stderr and ", ".join(fleet.hosts) in result.stderr


def test_inventory_has_canary_and_waves(fleet):
    groups = runpy.run_path(str(fleet.inventory))
    names = {group: [name for name, _ in groups[group]] for group in ("canary", "wave1", "wave2")}
    assert names["canary"] == ["node1"]
    assert sorted(names["wave1"] + names["wave2"]) == fleet.hosts[1:]
    assert len(names["wave1"]) >= len(names["wave2"])
    data = dict(groups["canary"])["node1"]
    assert data["ssh_hostname"] == fleet.address("node1")
    assert (data["ssh_known_hosts_file"], data["ssh_strict_host_key_checking"]) == (
        str(fleet.known_hosts), "yes")
    assert (data["gpu_less"], data["server"], data["stack"]) == (True, "standin", "dev")
    # pyinfra itself reads the groups and connects with strict host keys
    result = subprocess.run([str(Path(sys.executable).with_name("pyinfra")), "-y", "--limit",
                             "canary", str(fleet.inventory), "exec", "--", "hostname"],
                            text=True, capture_output=True, cwd=PROJECT_ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "[node1] node1" in result.stderr and "[node2]" not in result.stderr


# --- a private fleet: lifecycle, faults, bad input ---------------------------


def test_down_up_cycle_grow_shrink_and_twice(scratch):
    assert scratch.up(1)["started"] == ["node1"]
    assert scratch.system_state("node1") == "running"
    assert scratch.up(2) == {"started": ["node2"], "stopped": [], "kept": ["node1"]}
    scratch.exec("node1", "ping -c1 -W2 node2")
    assert scratch.up(1) == {"started": [], "stopped": ["node2"], "kept": ["node1"]}
    pids = [scratch.state()["hosts"]["node1"][k] for k in ("nspawn_pid", "leader_pid")]

    assert scratch.down() == ["node1"]
    assert scratch.down() == []
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
    assert _mounts_under(scratch.state_dir) == []
    assert not _link_exists("vb-tnode1") and not _link_exists("sglfleett0")
    assert not scratch.state_file.exists()

    assert scratch.up(1)["started"] == ["node1"]
    assert scratch.system_state("node1") == "running"


def test_down_cleans_up_after_a_crash(scratch):
    scratch.up(1)
    record = scratch.state()["hosts"]["node1"]
    os.kill(record["nspawn_pid"], 9)  # the controller side dies; the host's init lives on
    scratch.down()
    assert not _alive(record["leader_pid"], record["leader_start"])
    assert _mounts_under(scratch.state_dir) == []
    assert not _link_exists("sglfleett0")


def test_fault_and_status_through_the_command(scratch):
    scratch.up(2)
    env = {**os.environ, "SGLFLEET_FLEET_DIR": str(scratch.state_dir)}
    assert sglfleet("devfleet", "fault", "node2", "hang", env=env).returncode == 0
    assert scratch.exec("node2", f"cat {LAYOUT.fault_file}").stdout == "hang\n"
    assert sglfleet("devfleet", "fault", "node2", "explode", env=env).returncode == 2
    assert sglfleet("devfleet", "fault", "node2", "clear", env=env).returncode == 0
    assert scratch.exec("node2", f"test -e {LAYOUT.fault_file}", check=False).returncode == 1

    result = sglfleet("devfleet", "status", env=env)
    assert result.returncode == 0
    assert [line.split()[:2] + line.split()[-1:] for line in result.stdout.splitlines()[1:]] == [
        ["node1", scratch.address("node1"), "running"], ["node2", scratch.address("node2"), "running"]]
    scratch.kill_host("node2")
    result = sglfleet("devfleet", "status", env=env)
    assert result.returncode == 1 and result.stdout.splitlines()[-1].endswith("stopped")


def test_hosts_of_two_debian_releases_boot_side_by_side_and_keep_their_os(scratch):
    scratch.up(2, oses=["bookworm", "trixie"])
    assert [scratch.os_of(host) for host in scratch.hosts] == ["bookworm", "trixie"]
    assert [scratch.python_of(host) for host in scratch.hosts] == ["3.11", "3.13"]
    facts = "; ".join([". /etc/os-release; echo $VERSION_CODENAME", "python3 -c 'import sys; print(sys.version_info[:2])'",
                       "python3 -m venv --help >/dev/null && echo venv", "aria2c --version | head -n 1 | cut -d' ' -f1",
                       "systemctl is-active prometheus-node-exporter", "systemctl is-system-running"])
    assert scratch.exec("node1", facts).stdout.split("\n")[:-1] == [
        "bookworm", "(3, 11)", "venv", "aria2", "active", "running"]
    assert scratch.exec("node2", facts).stdout.split("\n")[:-1] == [
        "trixie", "(3, 13)", "venv", "aria2", "active", "running"]
    # A running host's OS changes only by a new host: refused before anything stops.
    with pytest.raises(DevFleetError, match=r"node2 runs trixie \(asked: bookworm\): bring the fleet down"):
        scratch.up(2, oses=["bookworm"])
    assert scratch.up(2) == {"started": [], "stopped": [], "kept": ["node1", "node2"]}

    env = {**os.environ, "SGLFLEET_FLEET_DIR": str(scratch.state_dir), "SGLFLEET_DEVFLEET_BRIDGE": scratch.bridge,
           "SGLFLEET_DEVFLEET_SUBNET": scratch.subnet, "SGLFLEET_DEVFLEET_PREFIX": scratch.prefix}
    added = sglfleet("devfleet", "add", "--os", "trixie", env=env)
    assert added.returncode == 0 and "started: node3" in added.stdout, added.stderr
    rows = [line.split() for line in sglfleet("devfleet", "status", env=env).stdout.splitlines()[1:]]
    assert [(row[0], row[-2], row[-1]) for row in rows] == [
        ("node1", "bookworm", "running"), ("node2", "trixie", "running"), ("node3", "trixie", "running")]
    assert scratch.state()["hosts"]["node3"]["rootfs"] == scratch.state()["hosts"]["node2"]["rootfs"]
    refused = sglfleet("devfleet", "up", "--os", "bookworm,sid", env=env)
    assert refused.returncode == 2 and "--os: sid: use one of bookworm, trixie" in refused.stderr


def test_killed_host_is_stopped_and_up_boots_it_again(scratch):
    scratch.up(1)
    old = scratch.state()["hosts"]["node1"]["leader_pid"]
    scratch.kill_host("node1")
    assert scratch.status()[0]["state"] == "stopped"
    assert scratch.up(1)["started"] == ["node1"]
    assert scratch.state()["hosts"]["node1"]["leader_pid"] != old
    assert scratch.system_state("node1") == "running"


def test_cut_and_restore_link(scratch):
    scratch.up(1)
    scratch.cut_link("node1")
    argv = scratch.ssh_argv("node1", timeout=1) + ["true"]
    assert subprocess.run(argv, capture_output=True, timeout=30).returncode == 255
    scratch.restore_link("node1")
    assert scratch.system_state("node1") == "running"


def test_host_that_never_comes_up_fails_with_its_boot_log_and_is_torn_down(scratch, tmp_path):
    broken = tmp_path / "rootfs"  # marked as built, but holds no OS: nspawn refuses to boot it
    broken.mkdir()
    (broken / ".sglfleet-rootfs.json").write_text("{}")
    scratch.rootfs = broken
    with pytest.raises(DevFleetError) as error:
        scratch.up(2, boot_timeout=20)
    message = str(error.value)
    assert "node1: did not come up" in message and "boot log tail" in message
    assert "os-release" in message  # nspawn's own words, from the boot log
    assert "torn down" in message
    assert scratch.hosts == [] and _mounts_under(scratch.state_dir) == []
    assert not _link_exists("sglfleett0")


def test_taken_subnet_and_bridge_name_are_refused(scratch):
    subprocess.run(["ip", "link", "add", "sglfleett0", "type", "bridge"], check=True)
    try:
        with pytest.raises(DevFleetError, match="sglfleett0 exists and is not this fleet's"):
            scratch.up(1)
        subprocess.run(["ip", "addr", "add", "10.213.48.7/24", "dev", "sglfleett0"], check=True)
        other = Fleet(state_dir=scratch.state_dir, subnet="10.213.48.0/24", bridge="sglfleetu0",
                      prefix="u", log=lambda line: None)
        with pytest.raises(DevFleetError, match=r"subnet 10.213.48.0/24 is taken by sglfleett0"):
            other.up(1)
    finally:
        subprocess.run(["ip", "link", "del", "sglfleett0"], check=True)


def test_a_fleet_ended_without_down_leaves_a_bridge_the_next_checkout_takes_over(scratch, tmp_path):
    # What CI meets after a session stops: the hosts' processes were ended, no 'down' ran,
    # and a fresh clone with an empty state folder boots its own fleet on the same bridge.
    scratch.up(1)
    other = Fleet(state_dir=tmp_path / "clone", subnet=scratch.subnet, bridge=scratch.bridge,
                  prefix="c", log=lambda line: None)
    with pytest.raises(DevFleetError, match="bridge sglfleett0 carries another local fleet's hosts"):
        other.up(1)
    scratch.kill_host("node1")
    try:
        other.up(1)
        assert other.system_state("node1") == "running"
    finally:
        other.down()
    assert not _link_exists("sglfleett0")


def test_running_fleet_refuses_other_network_settings(scratch):
    scratch.up(1)
    other = Fleet(state_dir=scratch.state_dir, subnet="10.213.49.0/24", bridge="sglfleett0",
                  prefix="u", log=lambda line: None)
    with pytest.raises(DevFleetError, match=r"runs with subnet 10.213.48.0/24 \(asked: 10.213.49.0/24\), "
                                            r"prefix t \(asked: u\)"):
        other.up(2)
    assert scratch.hosts == ["node1"] and not _link_exists("vb-unode2")
    assert scratch.up(2)["started"] == ["node2"]  # the same settings still grow it


def test_up_without_root_or_nspawn_says_what_to_install():
    result = sglfleet("devfleet", "up", env={**os.environ, "PATH": "/nonexistent"})
    assert result.returncode == 1
    assert "systemd-nspawn (apt-get install systemd-container)" in result.stderr
    result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                             *SGLFLEET, "devfleet", "up"], text=True, capture_output=True,
                            cwd="/tmp", env={**os.environ, "HOME": "/tmp"})
    assert result.returncode == 1
    assert "needs root" in result.stderr


FIXTURE_USER = '''
import os, signal, time
import pytest

@pytest.mark.fleet
def test_uses_the_fleet(fleet):
    assert fleet.exec("node1", "hostname").stdout == "node1\\n"
    if os.environ.get("INTERRUPT"):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
    assert False, "a failing test must not leave the fleet behind"
'''


@pytest.mark.parametrize("interrupt", ["", "1"], ids=["failing", "interrupted"])
def test_fixture_tears_down_the_fleet_it_booted(tmp_path, interrupt):
    if os.geteuid() != 0:
        pytest.skip("the local fleet needs root")
    (tmp_path / "test_user.py").write_text(FIXTURE_USER)
    shutil.copy(PROJECT_ROOT / "tests/conftest.py", tmp_path)
    state_dir = tmp_path / "fleet"
    env = {**os.environ, "SGLFLEET_FLEET_DIR": str(state_dir), "INTERRUPT": interrupt,
           "SGLFLEET_DEVFLEET_SUBNET": "10.213.51.0/24", "SGLFLEET_DEVFLEET_BRIDGE": "sglfleetf0",
           "SGLFLEET_DEVFLEET_PREFIX": "f"}
    env.pop("PYTEST_XDIST_WORKER", None)  # the inner session is no worker: it keeps the fleet given here
    env.pop("PYTEST_ADDOPTS", None)  # nor runs workers of its own
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(tmp_path)], text=True, capture_output=True, env=env, timeout=120)
    assert result.returncode == (2 if interrupt else 1), result.stdout
    assert ("KeyboardInterrupt" if interrupt else "1 failed") in result.stdout
    assert not (state_dir / "fleet.json").exists()
    assert _mounts_under(state_dir) == [] and not _link_exists("sglfleetf0")
    assert _cgroups("fnode1") == []  # removed only once empty: no process of the host is left
