"""What a run learns and reports lives in one RunRecord on pyinfra's state, passed to whoever needs it: none in a module."""

from types import SimpleNamespace

from pyinfra.api import State

from sglfleet.controller import drift
from sglfleet.controller.outcomes import fail
from sglfleet.events import EventLog, read_events
from sglfleet.hooks import event_log
from sglfleet.record import events, summary
from sglfleet.record.run import Offer, RunRecord, record


def test_each_run_keeps_its_own_record_on_its_state():
    first, second = State(), State()
    run = record(first)
    summary.passed(run, "node1", "serves 3f2a9c1d0b7e6a55")
    summary.failed(run, "node2", "gate failed on release 3f2a9c1d0b7e6a55\nits journal: ...")
    summary.failed(run, "node2", "a later line explains it")
    run.offers["dev+9.0"] = Offer("ab" * 32, 10)
    assert summary.lines(record(second)) == [] and record(second).offers == {}
    assert record(first) is first.sglfleet_record is run
    assert run.failed == {"node2": "gate failed on release 3f2a9c1d0b7e6a55"}
    assert summary.lines(run)[:2] == ["--> Rollout: 1 passed (node1)",
                                      "--> Rollout: 1 failed: node2 (gate failed on release 3f2a9c1d0b7e6a55)"]


def test_a_run_that_records_nothing_drops_its_events():
    run = RunRecord()  # a dry run, or pyinfra exec: no event log
    events.emit(run, "GatePassed", host="node1")
    events.batch_reached(run, "canary", ("node1",))
    assert run.log is None and run.batches == []


def test_drift_is_kept_as_the_run_executes_and_read_back_by_kind():
    state, host = State(), SimpleNamespace(name="node1")
    assert drift.kinds(state, "node1") == set()
    assert drift.recorded(state, host, "stack", "stack dev-0a24", "Drift: stack dev-0a24 changed on the host: ...")
    assert drift.kinds(state, "node1") == {"stack"} and drift.kinds(state, "node2") == set()
    assert record(state).drifted == {"node1": ["stack dev-0a24"]}


def test_what_rollout_until_holds_back_comes_from_the_plan():
    held = SimpleNamespace(rollout=SimpleNamespace(held=(SimpleNamespace(name="wave2"),),
                                                   batches=(SimpleNamespace(wave="canary"),)),
                           hosts={"node1": SimpleNamespace(is_gateway=False)})
    assert summary.paused(None) is None
    assert summary.paused(held) == "paused after wave canary: wave2 not started; run again without rollout_until to go on"
    assert summary.lines(RunRecord(), held) == [f"--> Rollout: {summary.paused(held)}"]
    gateways_only = SimpleNamespace(**{**vars(held), "hosts": {"node4": SimpleNamespace(is_gateway=True)}})
    assert summary.paused(gateways_only) is None  # no batch to hold


def test_fail_records_the_first_reason_and_one_host_failed_event(tmp_path):
    state, logged = State(), []
    state.failed_hosts = [SimpleNamespace(name="node3")]  # failed before its switch: pyinfra says so
    state.sglfleet_plan = SimpleNamespace(rollout=SimpleNamespace(held=()), hosts={})  # no rollout_until
    host = SimpleNamespace(name="node2", log_styled=lambda message, **_: logged.append(message))
    run = record(state)
    run.log = EventLog(tmp_path / "events.jsonl", "inv.py")
    events.batch_reached(run, "canary", ("node2",))
    events.batch_started(run, "canary")
    assert fail(state, host, "gate failed on release 3f2a9c1d0b7e6a55") is False
    assert fail(state, host, "a later line") is False
    event_log._finish(state)
    assert logged == ["gate failed on release 3f2a9c1d0b7e6a55", "a later line"]
    found = [(e["reason"], e["host"], e["message"]) for e in read_events(tmp_path / "events.jsonl")]
    assert found[:4] == [("BatchStarted", None, "canary: node2"),
                         ("HostFailed", "node2", "gate failed on release 3f2a9c1d0b7e6a55"),
                         ("BatchCompleted", None, "canary: 0 of 1 passed; failed: node2"),
                         ("HostFailed", "node3", event_log.BEFORE_SWITCH)]
    assert [reason for reason, _, _ in found[4:]] == ["RolloutAborted", "RunFinished"]
    assert found[4][2] == f"node2: gate failed on release 3f2a9c1d0b7e6a55; node3: {event_log.BEFORE_SWITCH}"
