"""The fan-out's plan and its progress lines, as pure functions; the fleet test shows the bytes."""

import hashlib
import subprocess
from types import SimpleNamespace

from sglfleet.artifacts.fanout import Progress, aria2_input, human, rounds
from sglfleet.artifacts.wheelhouse import Local
from sglfleet.host.layout import Layout
from sglfleet.controller import wheel_transfer


def test_rounds_double_so_a_fleet_of_n_takes_about_log2_n_rounds():
    assert rounds(["n1", "n2", "n3", "n4", "n5"]) == [["n1"], ["n2"], ["n3", "n4"], ["n5"]]
    hosts = [f"n{i}" for i in range(1, 101)]
    planned = rounds(hosts)
    assert [len(r) for r in planned] == [1, 1, 2, 4, 8, 16, 32, 36]
    assert [name for r in planned for name in r] == hosts  # every host once, in order
    assert rounds([]) == []


def test_every_file_comes_from_every_source_checked_by_sha256():
    text = aria2_input([("a.whl", "aa" * 32), ("b.whl", "bb" * 32)], ("http://n1:30089", "http://n2:30089"))
    assert text.splitlines() == [
        "http://n1:30089/a.whl\thttp://n2:30089/a.whl", "  out=a.whl.part", f"  checksum=sha-256={'aa' * 32}",
        "http://n1:30089/b.whl\thttp://n2:30089/b.whl", "  out=b.whl.part", f"  checksum=sha-256={'bb' * 32}",
    ]


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Host:
    def __init__(self):
        self.lines = []

    def log(self, line, _):
        self.lines.append(line)


def test_progress_says_bytes_rate_and_time_left_at_most_every_interval():
    clock, host = Clock(), Host()
    progress = Progress(host, "wheels from the controller", 4_000_000_000, every_s=15, clock=clock)
    clock.now += 5
    progress.update(500_000_000)
    assert host.lines == []  # not yet 15 s
    clock.now += 15
    progress.update(2_000_000_000)
    assert host.lines == ["wheels from the controller: 2.0 GB of 4.0 GB (50 %), 100.0 MB/s, about 20 s left"]
    assert human(999) == "999 B" and human(1_500_000) == "1.5 MB"


def test_wheels_are_checked_on_arrival_by_one_short_command_however_many(tmp_path, monkeypatch):
    # sudo sh -c takes the script as one argument, which Linux caps at 128 KiB (MAX_ARG_STRLEN):
    # a command per wheel failed cu130-sglang-0.5.23's 207 wheels. Run as a host runs it, with 400.
    monkeypatch.setattr(wheel_transfer, "LAYOUT", Layout(root=str(tmp_path)))
    incoming = tmp_path / "wheelhouse" / ".incoming-x"
    incoming.mkdir(parents=True)
    local = {}
    for i in range(400):
        name = f"nvidia_cutlass_dsl_libs_cu13-4.8.{i}-cp311-cp311-manylinux_2_28_x86_64.whl"
        (incoming / f"{name}.part").write_bytes(name.encode())
        local[name] = Local(incoming / name, hashlib.sha256(name.encode()).hexdigest(), len(name))
    corrupted = sorted(local)[7]
    (incoming / f"{corrupted}.part").write_bytes(b"flipped")
    seen = []

    def run(command, _stdin=""):
        seen.append(command)
        done = subprocess.run(["sh", "-c", command], input=_stdin, capture_output=True, text=True)
        return done.returncode == 0, SimpleNamespace(stdout_lines=done.stdout.splitlines(),
                                                     stderr_lines=done.stderr.splitlines())

    assert wheel_transfer._checked_into_place(None, run, sorted(local), str(incoming), local) == [corrupted]
    assert len(seen[0]) < 1000
    assert sorted(p.name for p in (tmp_path / "wheelhouse").glob("*.whl")) == sorted(set(local) - {corrupted})
    assert not list(incoming.iterdir())  # the corrupted part is removed, the others moved
