"""The rootfs mirror comes from the machine's own apt sources (no fleet needed)."""

import pytest

from sglfleet.devfleet import DevFleetError, apt_mirror


def test_mirror_from_deb822_sources_skips_security_and_disabled(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d/debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\n"
        "Types: deb\nURIs: http://old.example/debian\nSuites: bookworm\nEnabled: no\n\n"
        "Types: deb deb-src\n# a comment\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n")
    assert apt_mirror(tmp_path) == "http://mirror.example/debian"


def test_mirror_from_one_line_sources_list(tmp_path):
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb [signed-by=/usr/share/keyrings/k.gpg] http://line.example/debian bookworm main\n")
    assert apt_mirror(tmp_path) == "http://line.example/debian"


def test_no_bookworm_source_says_what_to_add(tmp_path):
    (tmp_path / "sources.list").write_text("deb http://x.example/debian trixie main\n")
    with pytest.raises(DevFleetError, match="no apt source for Debian bookworm"):
        apt_mirror(tmp_path)
