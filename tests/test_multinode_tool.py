"""
The host tool's ``--together`` for a group's member: a failed gate leaves it as it is, for its group to go
back whole at the settle (exit 4), where alone it goes back at once (exit 1). Systemd and the gate faked.
"""

import pytest

from sglfleet.host import cli, releases, service
from sglfleet.host.gate import GateFailed
from sglfleet.host.layout import LAYOUT
from sglfleet.host.protocol import DOWN, ROLLED_BACK


@pytest.fixture
def member(monkeypatch):
    """A host serving ``old``, ``new`` staged, whose gate fails on ``new``; what it restarted, in order."""
    links = {"current": "old", "previous": None}
    restarted = []
    monkeypatch.setattr(releases, "staged", lambda target, layout: True)
    monkeypatch.setattr(releases, "matches_id", lambda target, layout: True)
    monkeypatch.setattr(releases, "release_id_of", lambda link: links["current" if link == LAYOUT.current else "previous"])
    monkeypatch.setattr(releases, "point", lambda link, target: links.__setitem__(
        "current" if link == LAYOUT.current else "previous", target))
    monkeypatch.setattr(releases, "record", lambda *a, **k: None)
    monkeypatch.setattr(releases, "read", lambda *a, **k: {})
    monkeypatch.setattr(service, "properties", lambda layout: {"ActiveState": "active"})
    monkeypatch.setattr(service, "main_pid_environ", lambda layout: {"SGLFLEET_RELEASE": links["current"]})
    monkeypatch.setattr(service, "journal_cursor", lambda layout: None)
    monkeypatch.setattr(service, "journal_tail", lambda layout: "")
    monkeypatch.setattr(service, "requests_cut", lambda cursor, layout: None)
    monkeypatch.setattr(service, "restart", lambda layout: restarted.append(links["current"]) or 0)

    def gate(release_id, restarts, layout):
        if release_id == "new":
            raise GateFailed("health", "not ready within 60 s warm-up (the group never formed)")
        return {}

    monkeypatch.setattr(cli, "gate_release", gate)
    return links, restarted


def test_a_member_whose_gate_fails_does_not_go_back_alone(member):
    links, restarted = member
    assert cli.activate("new", LAYOUT, together=True) == DOWN
    assert restarted == ["new"] and links == {"current": "new", "previous": "old"}
    # its group's settle takes it back, with the others
    assert cli.rollback(LAYOUT, together=True) == 0
    assert restarted == ["new", "old"] and links["current"] == "old"


def test_a_server_alone_goes_back_at_once(member):
    links, restarted = member
    assert cli.activate("new", LAYOUT) == ROLLED_BACK
    assert restarted == ["new", "old"] and links["current"] == "old"


@pytest.mark.parametrize("state, calls", [("active", [("stop", LAYOUT.unit)]), ("inactive", [])])
def test_stop_stops_a_running_unit_and_leaves_a_stopped_one(monkeypatch, state, calls):
    called = []
    monkeypatch.setattr(service, "properties", lambda layout: {"ActiveState": state})
    monkeypatch.setattr(service, "systemctl", lambda *args, check=True: called.append(args))
    assert cli.stop(LAYOUT) == 0
    assert called == calls


def test_a_group_that_goes_back_undoes_its_switch_and_previous_stays_what_it_was(member, monkeypatch):
    links, restarted = member
    links["previous"] = "older"
    verdicts = {}
    monkeypatch.setattr(releases, "record", lambda release_id, stage, result, layout: verdicts.setdefault(
        release_id, {}).__setitem__(stage, result))
    monkeypatch.setattr(releases, "read", lambda release_id, name, layout, default=None: verdicts.get(release_id, default))
    assert cli.activate("new", LAYOUT, together=True) == DOWN
    assert links == {"current": "new", "previous": "old"}
    # The rollout's settle takes the group back: previous is what it was before the switch, as a host that
    # went back alone has, not the release that failed (which rollback.py would then start).
    assert cli.rollback(LAYOUT, together=True, undo=True) == 0
    assert restarted == ["new", "old"] and links == {"current": "old", "previous": "older"}
    # A rollback of no switch of this host's (rollback.py's, or --undo where no record says so) swaps the two.
    assert cli.rollback(LAYOUT, together=True, undo=True) == 0
    assert links == {"current": "older", "previous": "old"}
    assert cli.rollback(LAYOUT) == 0
    assert links == {"current": "old", "previous": "older"}
