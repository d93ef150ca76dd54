"""
Idempotence at fleet level, molecule's sequence: converge, then verify the
hosts' real state. (Converge again and expect zero changes and zero restarts:
tests/test_rollout.py's second converge, which stood here twice.)
"""

import json
import shutil
import tempfile

import pytest
import testinfra

from deploying import converged, deploy, stack_on
from faulting import results
from paths import LAYOUT, SYSTEMD, UNIT

pytestmark = pytest.mark.fleet

def unit_run(fleet, host: str) -> tuple[str, str, str]:
    """What changes when the unit restarts: its main pid, restart count, and start time."""
    out = fleet.exec(host, f"systemctl show {UNIT} -p MainPID -p NRestarts -p ActiveEnterTimestampMonotonic")
    return tuple(sorted(out.stdout.split()))


@pytest.fixture(scope="module")
def converged_once(fleet):
    yield from converged(fleet)


@pytest.fixture(scope="module")
def hosts(fleet):
    """testinfra hosts over the fleet's strict ssh_config, one multiplexed connection each."""
    sockets = tempfile.mkdtemp(prefix="sglf")  # short: a unix socket path is at most 108 bytes
    try:
        yield {name: testinfra.get_host(f"ssh://{name}", ssh_config=str(fleet.ssh_config),
                                        controlpath=f"{sockets}/{name}", controlpersist=2)
               for name in fleet.hosts}
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def test_hosts_serve_from_the_current_release(converged_once, hosts):
    for name, host in hosts.items():
        stack = stack_on(converged_once, name)  # for the host's own python3
        service = host.service(UNIT)
        assert service.is_running and service.is_enabled, name
        assert host.socket("tcp://127.0.0.1:30000").is_listening, name
        current = host.file(LAYOUT.current)
        assert current.is_symlink and current.linked_to.startswith(f"{LAYOUT.releases}/"), name
        release = json.loads(host.file(f"{LAYOUT.current}/release.json").content_string)
        assert release["stack"] == stack.id, name
        assert json.loads(host.file(stack.marker).content_string)["ok"] is True, name
        env = host.file(LAYOUT.env_file)
        assert (env.user, env.group, env.mode) == ("root", "root", 0o600), name
        unit = host.file(LAYOUT.unit_file)
        assert unit.contains(f"ExecStart={LAYOUT.current}/launch"), name
        # The server runs as its own user, out of the current release's stack.
        process = host.process.get(user="sglang", comm="python")
        assert process.args.startswith(f"{stack.venv}/bin/python "), (name, process.args)
        assert host.run(f"{LAYOUT.tool} --wait-lock 0 gate").rc == 0, name


def test_a_converge_removes_only_the_temporaries_killed_runs_left(converged_once):
    fleet = converged_once
    killed = [f"{LAYOUT.etc}/.sglang.env.sglfleet-deadbeef", f"{SYSTEMD}/.{UNIT}.sglfleet-deadbeef"]
    running = f"{LAYOUT.etc}/.sglang.env.sglfleet-0badf00d"  # a concurrent run's, being written
    fleet.exec("node2", f"for f in {' '.join(killed)} {running}; do install -m 600 /dev/null $f; done;"
                        f" touch -d '2 hours ago' {' '.join(killed)}")
    before = unit_run(fleet, "node2")

    done = deploy()
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"[node2] Will remove what killed runs left: {killed[0]}" in done.stdout
    assert f"[node2] Will remove what killed runs left: {killed[1]}" in done.stdout
    left = fleet.exec("node2", f"ls {' '.join(killed)} {running} 2>/dev/null || true").stdout.split()
    assert left == [running]
    assert unit_run(fleet, "node2") == before  # nothing that serves changed

    fleet.exec("node2", f"rm {running}")
    again = deploy()
    assert results(again.stdout)["no_change"] == results(again.stdout)["hosts"], again.stdout[-3000:]
