"""
The one read (``sglfleet.facts.host.HostRead``): every part's own command in one
shell, each part's lines handed to its own fact. Its command runs here for real,
in a shell, on a machine that holds no sglfleet host; the fleet's no-op converge
(one remote command per host, counted by sshd) is in test_rollout.
"""

import posixpath
import shlex
import subprocess

import pytest
from pyinfra.api import FactProcessError

from paths import GATEWAY, LAYOUT, UNIT, service
from sglfleet.facts.host import END, MARK, HostRead, HostState
from sglfleet.facts.release import Installed, InstalledServices, ReleaseState
from sglfleet.host import drift
from sglfleet.host.layout import Layout

ARGS = dict(stack_id="dev-0123456789ab", python="3.11", uv_version="0.9.2", user="nobody",
            paths=[LAYOUT.unit_file, LAYOUT.env_file], patch_path="/nonexistent/kimi_k25.py",
            patch_known=["0" * 64], release_id="3f2a9c1d0b7e6a55")


def run(command: str) -> list[str]:
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_host_without_sglfleet_reads_as_empty_in_every_part():
    found = HostRead().process(run(HostRead().command(**ARGS)))
    assert found.sudo is None  # not asked
    assert found.stack.stack_id == ARGS["stack_id"] and not found.stack.venv and not found.stack.verified
    assert found.stack.disk_free > 0  # the nearest existing parent of the stacks folder
    assert found.user == {"uid": 65534, "gid": 65534, "home": "/nonexistent", "shell": "/usr/sbin/nologin"}
    assert found.files == {"files": {LAYOUT.unit_file: None, LAYOUT.env_file: None}, "leftovers": []}
    assert found.patch is None  # no such file
    assert found.release.current is None and found.release.files is None and not found.release.busy
    assert found.models is None  # no model asked for
    assert found.installed == Installed()  # no sglang unit, no gateway


def test_each_part_is_its_own_facts_answer_even_when_a_part_exits():
    """A part's own ``exit`` (sudo's check exits when sudo is missing) ends only its subshell."""
    mark = f"echo {shlex.quote(MARK + 'user')};"
    command = HostRead().command(**ARGS).replace(f"{mark} ( ", f"{mark} ( exit 3; ", 1)
    assert "exit 3" in command
    lines = run(command)
    assert lines[-1] == END
    found = HostRead().process(lines)
    assert found.user is None and found.release is not None


def test_a_read_cut_short_fails_the_host_instead_of_reading_as_empty():
    lines = run(HostRead().command(**ARGS))
    cut = lines[:lines.index(f"{MARK}release")]
    with pytest.raises(FactProcessError, match="ended early, after .*stack"):
        HostRead().process(cut)


@pytest.mark.parametrize("sudo_lines, status", [
    (["sudo: a password is required", "sudo-exit=1"], "password"),
    (["deploy is not in the sudoers file.", "sudo-exit=1"], "refused"),
    (["sudo-missing"], "missing"),
])
def test_without_sudo_only_sudos_answer_comes_back(sudo_lines, status):
    found = HostRead().process([f"{MARK}sudo", *sudo_lines])
    assert found.sudo["status"] == status
    assert found.release is None and found.stack.stack_id == ""  # nothing else was read


def test_with_sudo_check_the_rest_runs_under_sudo_n():
    command = HostRead().command(**ARGS, sudo_check=True)
    first, _, rest = command.partition("sudo -H -n sh -c ")
    assert first.startswith(f"echo '{MARK}sudo'") and "sudo -n true" in first
    body, *after = shlex.split(rest)
    assert after == ["2>/dev/null", "||", "true"]
    assert run(body)[-1] == END  # the same parts, run as root there


def test_an_ok_sudo_answer_keeps_every_part():
    lines = run(HostRead().command(**ARGS))
    found = HostRead().process([f"{MARK}sudo", "sudo-exit=0", *lines])
    assert found.sudo["status"] == "ok" and found.release is not None


def test_the_default_is_an_empty_host():
    assert HostRead.default() == HostState()


def test_the_release_read_carries_the_drift_an_earlier_converge_left_marked(tmp_path):
    """``drifted`` comes from the host's drift.json, as the host tool writes it; none without the file."""
    layout = Layout(root=str(tmp_path))
    drift.mark("stack", layout)
    written = open(drift.path(layout)).read().replace("\n", "")  # as the read's `tr -d '\n'` gives it
    lines = [f"current={LAYOUT.releases}/r1", f"drift={written}", "ActiveState=active"]
    assert ReleaseState().process(lines).drifted == ["stack"]
    drift.clear(layout)
    cleared = open(drift.path(layout)).read().replace("\n", "")
    assert ReleaseState().process([f"current={LAYOUT.releases}/r1", f"drift={cleared}"]).drifted == []
    assert ReleaseState().process([f"current={LAYOUT.releases}/r1", "drift="]).drifted == []
    assert "drift.json" in ReleaseState().command("r1")


def test_the_installed_services_are_sglfleets_units_each_with_the_port_its_current_release_serves_on(tmp_path):
    """And the gateway's unit, where sglfleet installed one."""
    units, root = tmp_path / "units", tmp_path / "opt"
    units.mkdir()
    managed = "# Managed by sglfleet. ExecStart goes through ...\n[Unit]\n"
    for unit in (UNIT, service("b").unit, service("new").unit, GATEWAY.unit):
        (units / unit).write_text(managed)
    (units / service("mine").unit).write_text("[Unit]\nDescription=written by hand\n")  # not sglfleet's
    for service_root, port in ((root, 30000), (root / "services" / "b", 30002)):
        release = service_root / "releases" / "3f2a"
        release.mkdir(parents=True)
        (release / "launch.args").write_text(f"--model-path /models/x\n--port {port}\n--tp-size 1\n")
        (service_root / "current").symlink_to(release)
    # The command as a host runs it, its two folders moved under tmp_path.
    command = (InstalledServices().command().replace(posixpath.dirname(LAYOUT.unit_file), str(units))
               .replace(LAYOUT.root, str(root)))
    assert str(units) in command and str(root) in command
    # "new" has no current release yet (staged, never switched): its port is unknown.
    assert InstalledServices().process(run(command)) == Installed(
        services={"sglang": 30000, "b": 30002, "new": None}, gateway=True)
