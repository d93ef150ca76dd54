"""The fan-out's plan and its progress lines, as pure functions; the fleet test shows the bytes."""

from sglfleet.fanout import Progress, aria2_input, human, rounds


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
