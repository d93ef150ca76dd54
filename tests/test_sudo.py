"""
The production connection on the local fleet: a non-root SSH user (``deploy``)
with passwordless sudo, as ``pyinfra inventory/prod.py deploy.py`` reaches GPU
hosts. Secrets never sit in a file others can read; a user without sudo is
refused before anything changes; a jump host works; root without sudo still
converges. The rollout, its gate, dry run, status and rollback as ``deploy``, with
root never logging in, are tests/test_rollout.py's: inventory/dev.py connects as
``deploy`` with sudo.
"""

import json
import re
import subprocess
from pathlib import Path
import time

import pytest

from deploying import converged, deploy, pyinfra, ssh_logins, tree_digest
from paths import LAYOUT, UNIT

pytestmark = pytest.mark.fleet

AS_DEPLOY = ("--ssh-user", "deploy", "--sudo")
CHANGE = ("--data", "speculative_num_steps=4", "--data", "speculative_eagle_topk=1",
          "--data", "speculative_num_draft_tokens=5")
WATCHER = Path(__file__).parent / "data" / "secret_watch.py"


def started(fleet, host: str) -> str:
    return fleet.inside(host, f"systemctl show {UNIT} -p ActiveEnterTimestampMonotonic").stdout


@pytest.fixture(scope="module")
def as_deploy(fleet):
    yield from converged(fleet, *AS_DEPLOY)


def test_root_login_without_sudo_still_converges(as_deploy):
    since = time.time()
    starts = {host: started(as_deploy, host) for host in as_deploy.hosts}
    done = pyinfra("deploy.py", "-y", env={"SGLFLEET_DEVFLEET_USER": "root"})
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(r"Grand total\s+\d+\s+\S+\s+-", done.stdout), done.stdout[-2000:]  # no error
    assert {host: started(as_deploy, host) for host in as_deploy.hosts} == starts  # serving as it was
    assert {user for user, _ in ssh_logins(as_deploy, "node1", since)} == {"root"}


def test_secrets_never_sit_in_a_file_others_can_read_during_a_converge(as_deploy):
    """Rotate the API key (a new env file and a rolling restart) while every host
    watches /tmp, the login users' homes and /etc/sglfleet for the new key."""
    fleet = as_deploy
    rotated = "sk-rotatedQ7pN3xV9"
    stop = "/run/sglfleet-watch-stop"
    folders = f"/tmp /var/tmp /dev/shm /home {LAYOUT.etc} {LAYOUT.root}"
    watchers = {}
    fleet.inside("node2", "mkdir -p /home/deploy/.cache")  # there before the watcher starts
    for host in fleet.hosts:
        fleet.inside(host, f"rm -f {stop}")
        record = fleet.state()["hosts"][host]
        watchers[host] = subprocess.Popen(
            ["nsenter", "-t", str(record["leader_pid"]), "--all", "python3", "-", rotated, stop, "300",
             *folders.split()],
            stdin=open(WATCHER), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert watchers[host].stdout.readline().strip() == "watching"
    try:
        # The positive controls: the watcher sees a secret in a file deploy can read, in /tmp
        # and deep in a folder that was there before it started (the SSH user's home).
        fleet.inside("node2", f"echo {rotated} > /tmp/planted && chown deploy /tmp/planted && "
                              f"echo {rotated} > /home/deploy/.cache/planted")
        done = pyinfra("deploy.py", "-y", *AS_DEPLOY, env={"SGLFLEET_API_KEY": rotated})
    finally:
        for host in fleet.hosts:
            fleet.inside(host, f"touch {stop}")
        found = {host: [json.loads(line) for line in watcher.communicate(timeout=30)[0].splitlines()]
                 for host, watcher in watchers.items()}
        fleet.inside("node2", "rm -f /tmp/planted /home/deploy/.cache/planted")
        restored = deploy(*AS_DEPLOY)
    assert done.returncode == 0, done.stdout[-3000:]
    assert rotated not in done.stdout
    assert restored.returncode == 0, restored.stdout[-3000:]
    assert sorted(entry["path"] for entry in found["node2"]) == ["/home/deploy/.cache/planted", "/tmp/planted"], found
    assert found["node1"] == found["node3"] == [], found
    for host in fleet.hosts:  # and the key did reach the root-only env file
        assert fleet.inside(host, f"stat -c '%a %U' {LAYOUT.env_file}").stdout.split() == ["600", "root"]


# sudo asks for the password before it reads sudoers, so a user outside sudoers
# (nosudo) and one whose sudo wants a password (pwsudo) look the same to sudo -n.
@pytest.mark.parametrize("user, why", [
    ("nosudo", "sudo asks nosudo for a password"),
    ("pwsudo", "sudo asks pwsudo for a password"),
])
def test_user_without_passwordless_sudo_is_refused_before_anything_changes(as_deploy, user, why):
    fleet = as_deploy
    before = {host: tree_digest(fleet, host, LAYOUT.root, "/etc") for host in fleet.hosts}
    done = deploy("--ssh-user", user, "--sudo", *CHANGE, timeout=120)
    assert done.returncode != 0
    assert re.search(rf"node\d: the inventory asks for sudo, but {why} \(.*\); give {user} passwordless "
                     rf"sudo on the host, e\.g\. the line '{user} ALL=\(ALL:ALL\) NOPASSWD: ALL'", done.stdout), \
        done.stdout[-3000:]
    assert "Nothing was changed." in done.stdout
    assert {host: tree_digest(fleet, host, LAYOUT.root, "/etc") for host in fleet.hosts} == before


def test_hosts_behind_a_jump_host(as_deploy):
    """node1 is the bastion: the other hosts are reached through it (ProxyJump)."""
    fleet = as_deploy
    since = time.time()
    done = pyinfra("deploy.py", "-y", *AS_DEPLOY, env={"SGLFLEET_DEVFLEET_JUMP": "1"})
    assert done.returncode == 0, done.stdout[-3000:]
    bastion = fleet.address("node1")
    for host in fleet.hosts[1:]:
        logins = ssh_logins(fleet, host, since)
        assert logins and all(login == ("deploy", bastion) for login in logins), (host, logins)
    assert all(address != bastion for _, address in ssh_logins(fleet, "node1", since))
