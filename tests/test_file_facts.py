"""File facts: their commands run by a real shell on real files, their output parsed."""

import hashlib
import os
import subprocess
import time

from paths import UNIT
from sglfleet.facts.files import FileBytesUnlessKnown, FileDigests

DATA = b"import logging\r\nno final newline"


def fact(path, known):
    command = FileBytesUnlessKnown().command(path=str(path), known=known)
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    return FileBytesUnlessKnown().process(output.splitlines())


def test_a_known_file_returns_its_digest_not_its_bytes(tmp_path):
    path = tmp_path / "kimi k25.py"
    path.write_bytes(DATA)
    digest = hashlib.sha256(DATA).hexdigest()
    assert fact(path, ["0" * 64, digest]) == digest


def test_an_unknown_file_returns_its_exact_bytes_and_a_missing_one_none(tmp_path):
    path = tmp_path / "kimi_k25.py"
    path.write_bytes(DATA)
    assert fact(path, ["0" * 64]) == DATA
    assert fact(path, []) == DATA
    assert fact(tmp_path / "missing.py", [hashlib.sha256(DATA).hexdigest()]) is None


def test_digests_name_the_temporaries_killed_runs_left_over_an_hour_ago(tmp_path):
    folder = tmp_path / "a [b]* c"  # a space and glob characters, taken literally
    folder.mkdir()
    unit = folder / UNIT
    unit.write_text("[Unit]\n")
    killed = folder / ".sglang.service.sglfleet-deadbeef"
    running = folder / ".sglang.service.sglfleet-0badf00d"  # a run writing it now
    other = folder / ".other.service.sglfleet-deadbeef"  # not a file we asked about
    for path in (killed, running, other):
        path.write_text("partial")
    for path in (killed, other):
        os.utime(path, (time.time() - 2 * 3600,) * 2)

    paths = [str(unit), str(tmp_path / "missing" / "sglang.env"), str(tmp_path)]
    command = FileDigests().command(paths=paths)
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    found = FileDigests().process(output.splitlines())

    assert found["files"] == {
        str(unit): {"sha256": hashlib.sha256(b"[Unit]\n").hexdigest(), "mode": f"{unit.stat().st_mode & 0o777:o}",
                    "owner": "root", "group": "root"},
        paths[1]: None,  # missing
        paths[2]: None,  # a folder, not a file
    }
    assert found["leftovers"] == [str(killed)]
