"""
What a host offers a stack (``HostOs``: os-release, glibc, python3) and what
preflight makes of it, for each OS a GPU host may run.

The Debian answers were recorded on the local fleet's hosts with the fact's own
command; Ubuntu cannot be booted here (its archive is unreachable), so its two
answers are what 22.04 and 24.04 ship (os-release, glibc 2.35 and 2.39, Python
3.10.12 and 3.12.3), written in the same form.
"""

import subprocess
from pathlib import Path

import pytest

from sglfleet.artifacts.stacks import load_stack
from sglfleet.facts.host import HostRead
from sglfleet.facts.os import HostOs, OsInfo
from sglfleet.plan.preflight import check, fitting, serves

DATA = Path(__file__).parent / "data" / "os"
GIB = 1 << 30


def answer(name: str) -> OsInfo:
    return HostOs().process((DATA / f"{name}.txt").read_text().splitlines())


@pytest.fixture(scope="module")
def stacks():
    return {name: load_stack(name, allow_unhashed=True)
            for name in ("dev", "dev-sglang-0.5.23", "cu130-sglang-0.5.23", "cu130-sglang-0.5.9")}


@pytest.mark.parametrize("name, os_id, version, pretty, glibc, python", [
    ("debian-bookworm", "debian", "12", "Debian GNU/Linux 12 (bookworm)", "2.36", "3.11.2"),
    ("debian-trixie", "debian", "13", "Debian GNU/Linux 13 (trixie)", "2.41", "3.13.5"),
    ("ubuntu-22.04", "ubuntu", "22.04", "Ubuntu 22.04.5 LTS", "2.35", "3.10.12"),
    ("ubuntu-24.04", "ubuntu", "24.04", "Ubuntu 24.04.3 LTS", "2.39", "3.12.3"),
])
def test_each_os_reads_as_its_distribution_glibc_and_python3(name, os_id, version, pretty, glibc, python):
    found = answer(name)
    assert (found.id, found.version_id, found.pretty, found.glibc, found.python) == (os_id, version, pretty, glibc,
                                                                                     python)
    assert found.python_minor == python.rsplit(".", 1)[0] and found.name == f"{os_id} {version}"


def test_the_command_runs_in_a_shell_and_a_host_without_python3_reads_as_none():
    here = subprocess.run(["sh", "-c", HostOs().command()], capture_output=True, text=True, check=True)
    found = HostOs().process(here.stdout.splitlines())
    assert found.id and found.glibc and found.python  # this machine has all three
    bare = subprocess.run(["/bin/sh", "-c", HostOs().command()], capture_output=True, text=True, check=True,
                          env={"PATH": "/nonexistent"})
    assert HostOs().process(bare.stdout.splitlines()).python is None
    assert HostOs().process([]) == OsInfo() and HostOs.default().python_minor is None


@pytest.mark.parametrize("name, gpu_less, fits", [
    ("debian-bookworm", True, ["dev", "dev-sglang-0.5.23"]),
    ("debian-trixie", True, ["dev", "dev-sglang-0.5.23"]),
    ("ubuntu-22.04", True, ["dev"]),  # sglang 0.5.23 has no cp310 wheel
    ("ubuntu-24.04", True, ["dev", "dev-sglang-0.5.23"]),
    ("debian-bookworm", False, ["cu130-sglang-0.5.23", "cu130-sglang-0.5.9"]),
    ("ubuntu-22.04", False, ["cu130-sglang-0.5.9"]),
    ("ubuntu-24.04", False, ["cu130-sglang-0.5.23", "cu130-sglang-0.5.9"]),
])
def test_which_stacks_serve_each_os(stacks, name, gpu_less, fits):
    assert fitting(list(stacks.values()), answer(name), gpu_less) == fits


def test_preflight_refuses_a_python3_the_lock_does_not_serve_naming_the_stacks_that_would(stacks):
    ubuntu = answer("ubuntu-22.04")
    stack = stacks["dev-sglang-0.5.23"].for_python("3.11")  # what a host it does not serve is planned with
    assert check("gpu1", stack, [], 100 * GIB, True, ubuntu, others=["dev", "dev-sglang-0.5.23"]) == [
        "gpu1: python3 is 3.10.12 (Ubuntu 22.04.5 LTS, glibc 2.35), which stack dev-sglang-0.5.23 does not serve "
        "(its lock holds 3.11, 3.12, 3.13): give the host a stack that serves it (dev)"]
    assert check("gpu1", stack, [], 100 * GIB, True, ubuntu, others=[]) == [
        "gpu1: python3 is 3.10.12 (Ubuntu 22.04.5 LTS, glibc 2.35), which stack dev-sglang-0.5.23 does not serve "
        "(its lock holds 3.11, 3.12, 3.13): no stack defined here serves it: add its Python to a stack's pythons "
        "and re-lock"]
    assert check("gpu1", stacks["dev"].for_python("3.10"), [], 100 * GIB, True, ubuntu) == []


def test_preflight_refuses_a_glibc_older_than_the_wheels_of_the_hosts_python_need(stacks):
    old = OsInfo(id="debian", version_id="11", pretty="Debian GNU/Linux 11 (bullseye)", glibc="2.31", python="3.11.2")
    stack = stacks["dev-sglang-0.5.23"].for_python("3.11")
    assert not serves(stack, old) and serves(stacks["dev"], old)  # dev's compiled wheels need 2.17
    (problem,) = check("node9", stack, [], 100 * GIB, True, old, others=["dev"])
    assert problem == ("node9: glibc 2.31 (Debian GNU/Linux 11 (bullseye)) is older than stack dev-sglang-0.5.23's "
                       "wheels for python 3.11 need (2.34): give the host a stack that serves it (dev)")


def test_the_one_read_asks_the_arguments_of_the_hosts_own_python(tmp_path):
    """The read's command, for real, in a shell whose python3 is 3.13 (a stand-in answering -V): its branch ran."""
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho Python 3.13.5\n")
    fake.chmod(0o755)
    common = dict(python="3.11", uv_version="0.13.9", user="nobody", paths=[], model_spec=None)
    variants = {python: {"stack_id": f"dev-0123456789ab-cp{python.replace('.', '')}",
                         "patch_path": f"/nonexistent/{python}", "patch_known": [], "release_id": f"r{python}"}
                for python in ("3.11", "3.13")}
    command = HostRead().command(**common, **variants["3.11"], variants=variants)
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    found = HostRead().process(done.stdout.splitlines())
    assert (found.os.python, found.stack.stack_id) == ("3.13.5", "dev-0123456789ab-cp313")
    fake.write_text("#!/bin/sh\necho Python 3.14.0\n")  # no branch of its own: the first Python's arguments
    found = HostRead().process(subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                                              env={"PATH": f"{tmp_path}:/usr/bin:/bin"}).stdout.splitlines())
    assert (found.os.python, found.stack.stack_id) == ("3.14.0", "dev-0123456789ab-cp311")
