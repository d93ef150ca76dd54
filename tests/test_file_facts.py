"""FileBytesUnlessKnown: its command run by a real shell on real files, its output parsed."""

import hashlib
import subprocess

from sglfleet.facts.files import FileBytesUnlessKnown

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
