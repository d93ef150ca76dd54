"""
Security on the local fleet: the secrets file, secrets kept out of every
output, process argument and log, host keys enforced, the unit's exposure
score, and the API key guarding the stand-in as it guards SGLang.
"""

import json
import re
import shlex
import subprocess
import time

import pytest

from deploying import SECRETS, deploy, journal_shows_logins, sshd_connections
from faulting import Run, new_release, serving
from paths import LAYOUT, UNIT

pytestmark = pytest.mark.fleet

PORT = 30000


@pytest.fixture(scope="module")
def converged(fleet):
    done = deploy()
    assert done.returncode == 0, done.stdout[-3000:]
    return fleet


def test_env_file_is_root_only(converged):
    for host in converged.hosts:
        found = converged.exec(host, f"stat -c '%a %U %G' {LAYOUT.env_file} {LAYOUT.etc} "
                                     f"{LAYOUT.runtime_dir} {LAYOUT.runtime_dir}/secrets.yaml").stdout.split("\n")
        assert found[:4] == ["600 root root", "755 root root", "700 sglang sglang", "600 sglang sglang"], host


def test_no_secret_in_process_arguments_logs_or_files_during_a_rollout(converged):
    fleet = converged
    # Look while a release restarts and is gated, as well as once it serves.
    run = Run("--data", "standin_warmup_s=1.3")
    seen = []
    try:
        while run.process.poll() is None:
            for host in fleet.hosts:
                seen.append(fleet.exec(host, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; ps -eo args",
                                       check=False).stdout)
            time.sleep(0.5)
        done = run.finish(120)  # checks pyinfra's output
    finally:
        run.stop()
    assert done.returncode == 0, done.stdout[-3000:]
    assert any("sglfleet-release" in s and "sglang_standin" in s for s in seen)  # caught mid-rollout
    for host in fleet.hosts:
        seen.append(fleet.exec(host, f"journalctl --no-pager -o cat; cat {LAYOUT.unit_file} "
                                     f"{LAYOUT.current}/*; systemctl show {UNIT}").stdout)
    for value in SECRETS.values():
        assert not any(value in text for text in seen)


def test_changed_host_key_refuses_that_host_and_no_other(converged, tmp_path):
    fleet = converged
    before = serving(fleet)
    known = fleet.known_hosts.read_text()
    forged = tmp_path / "forged"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(forged)], check=True)
    address = fleet.address("node2")
    lines = [f"{address} {forged.with_suffix('.pub').read_text().split()[0]} "
             f"{forged.with_suffix('.pub').read_text().split()[1]}" if line.startswith(f"{address} ") else line
             for line in known.splitlines()]
    since = time.time()
    fleet.known_hosts.write_text("\n".join(lines) + "\n")
    try:
        done = deploy("--data", "standin_warmup_s=1.4")
    finally:
        fleet.known_hosts.write_text(known)
    forged_until = time.time()

    assert done.returncode != 0
    assert re.search(r"\[node2\].*(host key|Host key)", done.stdout), done.stdout[:3000]
    after = serving(fleet)
    assert after["node1"] == new_release(done.stdout) and after["node2"] == before["node2"]
    assert after["node3"] == before["node3"]
    assert "wave2 not started: node2 of wave1 did not pass (1 of 1 hosts, above max_fail_percentage 0)" in done.stdout

    again = deploy("--data", "standin_warmup_s=1.4")  # the key is right again: the rollout completes
    assert again.returncode == 0, again.stdout[-3000:]
    # The control: node2's journal shows the logins of the run with the right key, so
    # it holds the forged run's window too, where node2 was reached (pyinfra's host-key
    # error above needs its key exchange) and refused before any login.
    assert journal_shows_logins(fleet, ["node2"], forged_until)
    assert sshd_connections(fleet, "node2", since, logins=True, until=forged_until) == 0


def test_unit_exposure_score(converged):
    out = converged.exec("node1", f"systemd-analyze security {UNIT} --no-pager").stdout
    score = float(re.search(rf"Overall exposure level for {re.escape(UNIT)}: ([\d.]+)", out).group(1))
    print(f"\nsystemd-analyze security {UNIT}: {score} (0 best, 10 worst)")
    assert score <= 2.0, out[-2000:]


def test_api_key_guards_generate_and_the_gate_still_passes(converged):
    fleet = converged
    assert all(serving(fleet).values())  # every gate passed with the key set
    key = SECRETS["SGLFLEET_API_KEY"]
    probe = ("import json, sys, urllib.request, urllib.error\n"
             "def ask(path, headers, body=None):\n"
             f"    r = urllib.request.Request('http://127.0.0.1:{PORT}' + path, headers=headers,\n"
             "        data=json.dumps(body).encode() if body else None)\n"
             "    try:\n"
             "        return urllib.request.urlopen(r, timeout=10).status\n"
             "    except urllib.error.HTTPError as e:\n"
             "        return e.code\n"
             "body = {'text': 'Hi', 'sampling_params': {'max_new_tokens': 2}}\n"
             "auth = {'Authorization': 'Bearer ' + sys.stdin.read(), 'Content-Type': 'application/json'}\n"
             "print(json.dumps([ask('/generate', {'Content-Type': 'application/json'}, body),\n"
             "                  ask('/generate', {'Authorization': 'Bearer wrong', 'Content-Type': 'application/json'}, body),\n"
             "                  ask('/generate', auth, body), ask('/health', {})]))\n")
    for host in fleet.hosts:
        # The key goes over stdin, never on a command line.
        out = subprocess.run(fleet.ssh_argv(host) + ["--", f"python3 -c {shlex.quote(probe)}"],
                             input=key, capture_output=True, text=True, timeout=60, check=True).stdout
        assert json.loads(out) == [401, 401, 200, 200], host
