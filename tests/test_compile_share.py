"""
Compile caches handed on during a rollout, on the local fleet: the canary
compiles (the stand-in's kernels, with time when the cache is empty), packs its
caches once its gate passed and serves them; the later hosts of the same stack
start from them, each checked by sha256, owned by the service user. A peer's
caches that do not load cost a host nothing but a cold start.
"""

import re

import pytest

from deploying import converged, deploy, eagle_change
from paths import LAYOUT, UNIT

pytestmark = pytest.mark.fleet

# Seconds of compiling with an empty cache: the later hosts' starts show whether they had to.
COMPILE = ("--data", "standin_compile_s=3", "--data", "standin_sampling_jit_s=2")


def cold(fleet) -> None:
    """Every host's compile caches gone, as on new hosts (the running servers keep what they loaded)."""
    for host in fleet.hosts:
        fleet.inside(host, f"rm -rf {LAYOUT.cache_dir}/compile")


def journal(fleet, host: str, since: str) -> str:
    return fleet.inside(host, f"journalctl -u {UNIT} --since @{since} --no-pager -o cat").stdout


def now(fleet, host: str) -> str:
    return fleet.inside(host, "date +%s").stdout.strip()


@pytest.fixture(scope="module")
def fleet_up(fleet):
    yield from converged(fleet, *COMPILE)


def share_units(fleet, host: str) -> set[str]:
    listed = fleet.inside(host, "systemctl list-units --no-legend --plain 'sglfleet-compile-share-*'").stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def test_the_canarys_caches_warm_the_later_hosts(fleet_up):
    cold(fleet_up)
    since = {host: now(fleet_up, host) for host in fleet_up.hosts}
    # A host that failed in an earlier run keeps its server until RuntimeMaxSec, on the port: the
    # canary's own replaces it.
    fleet_up.inside("node1", "systemd-run --unit=sglfleet-compile-share-deadbeef --property=RuntimeMaxSec=600 "
                             "python3 -m http.server --directory /tmp 30091")
    earlier = {host: share_units(fleet_up, host) for host in fleet_up.hosts}
    done = deploy(*COMPILE, *eagle_change(5))
    assert done.returncode == 0, done.stdout[-3000:]
    logs = {host: journal(fleet_up, host, since[host]) for host in fleet_up.hosts}
    # The canary compiled every kernel of the new flags, and the sampling module during its gate.
    assert "3 kernels: 0 from the compile cache, 3 compiled" in logs["node1"], logs["node1"][-2000:]
    assert "sampling module compiled" in logs["node1"]  # its gate's sampled generation
    assert re.search(r"\[node1\] canary: compile caches packed for later hosts of dev-[\w-]+\+cpu: \d+ files",
                     done.stdout), done.stdout[-3000:]
    # Each later host fetches from every host that holds them by then: the sources double.
    for host, peers in (("node2", 1), ("node3", 2)):
        assert "3 kernels: 3 from the compile cache, 0 compiled" in logs[host], logs[host][-2000:]
        assert "sampling module compiled" not in logs[host]
        assert re.search(rf"\[{host}\] wave\d: compile caches of dev-[\w-]+\+cpu from {peers} peer\(s\), "
                         rf"[\d.]+ KB: \d+ files added, 0 kept", done.stdout), done.stdout[-3000:]
    stack = re.search(r"later hosts of (dev-[\w-]+)\+cpu", done.stdout).group(1)
    owners = fleet_up.inside("node2", f"find {LAYOUT.cache_dir}/compile/{stack} -type f -printf '%u %m\\n' "
                                      "| sort -u").stdout.split("\n")
    assert [line for line in owners if line] == ["sglang 600"]
    # The file servers of this run end with its rollout.
    for host in fleet_up.hosts:
        assert share_units(fleet_up, host) <= earlier[host] - {"sglfleet-compile-share-deadbeef.service"}, host


def test_a_first_start_compiles_the_sampled_path_during_its_gate(fleet_up):
    fleet_up.inside("node3", f"rm -rf {LAYOUT.cache_dir}/compile")  # as a new host has it
    since = now(fleet_up, "node3")
    done = deploy(*COMPILE, *eagle_change(2), "--limit", "node3")
    assert done.returncode == 0, done.stdout[-3000:]
    log = journal(fleet_up, "node3", since)
    assert "sampling module compiled" in log and "0 from the compile cache" in log
    assert re.search(r"gate passed on \w+ \(accept length [\d.]+, 256 tokens in 4 generations", done.stdout)


def test_caches_from_a_peer_that_do_not_load_cost_only_a_cold_start(fleet_up):
    cold(fleet_up)
    fleet_up.fault("node1", "corrupt-cache")  # the canary runs fine, and writes kernels nobody can load
    since = {host: now(fleet_up, host) for host in fleet_up.hosts}
    done = deploy(*COMPILE, *eagle_change(6))
    fleet_up.fault("node1", "clear")
    cold(fleet_up)  # the canary's own copies are corrupt too: its next start would load them
    assert done.returncode == 0, done.stdout[-3000:]
    for host in ("node2", "node3"):
        log = journal(fleet_up, host, since[host])
        assert "device kernel image is invalid" in log, log[-2000:]
        assert re.search(rf"\[{host}\] wave\d: gate failed with the compile caches from peers: \d+ files dropped, "
                         rf"once more cold", done.stdout), done.stdout[-3000:]
        assert "3 kernels: 0 from the compile cache, 3 compiled" in log
    assert "--> Rollout: 3 passed (node1, node2, node3)" in done.stdout
