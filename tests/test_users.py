"""The passwd fact behind the system-user operation, on recorded real output."""

from paths import LAYOUT
from sglfleet.facts.users import PasswdEntry


def test_passwd_entry_reads_getent_output():
    entry = PasswdEntry().process([f"sglang:x:997:996::{LAYOUT.state_dir}:/usr/sbin/nologin"])
    assert entry == {"uid": 997, "gid": 996, "home": LAYOUT.state_dir, "shell": "/usr/sbin/nologin"}


def test_passwd_entry_is_none_for_a_missing_user():
    assert PasswdEntry().process([]) is None
