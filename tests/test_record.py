"""What a run learns and reports lives in one RunRecord on pyinfra's state: each run its own, none in a module."""

from types import SimpleNamespace

import pytest
from pyinfra.api import State
from pyinfra.context import ctx_state

from sglfleet.events import EventLog, read_events
from sglfleet.run import recording, summary
from sglfleet.run.record import Offer, record


def test_each_run_keeps_its_own_record_on_its_state():
    first, second = State(), State()
    with ctx_state.use(first):
        summary.passed("node1", "serves 3f2a9c1d0b7e6a55")
        summary.failed("node2", "gate failed on release 3f2a9c1d0b7e6a55\nits journal: ...")
        summary.failed("node2", "a later line explains it")
        record().offers["dev+9.0"] = Offer("ab" * 32, 10)
    with ctx_state.use(second):
        assert summary.lines() == [] and record().offers == {}
    assert record(first) is first.sglfleet_record
    assert record(first).failed == {"node2": "gate failed on release 3f2a9c1d0b7e6a55"}
    with ctx_state.use(first):
        assert summary.lines()[:2] == ["--> Rollout: 1 passed (node1)",
                                       "--> Rollout: 1 failed: node2 (gate failed on release 3f2a9c1d0b7e6a55)"]


def test_outside_a_run_events_are_dropped_and_the_record_is_refused():
    assert not ctx_state.isset()
    recording.emit("GatePassed", host="node1")  # nothing to record in
    with pytest.raises(RuntimeError, match="no pyinfra run"):
        record()


def test_fail_records_the_first_reason_and_one_host_failed_event(tmp_path):
    state, logged = State(), []
    state.failed_hosts = [SimpleNamespace(name="node3")]  # failed before its switch: pyinfra says so
    host = SimpleNamespace(name="node2", log_styled=lambda message, **_: logged.append(message))
    with ctx_state.use(state):
        record(state).log = EventLog(tmp_path / "events.jsonl", "inv.py")
        recording.batch_reached("canary", ("node2",))
        recording.batch_started("canary")
        assert recording.fail(state, host, "gate failed on release 3f2a9c1d0b7e6a55") is False
        assert recording.fail(state, host, "a later line") is False
        recording._finish(state)
    assert logged == ["gate failed on release 3f2a9c1d0b7e6a55", "a later line"]
    events = [(e["reason"], e["host"], e["message"]) for e in read_events(tmp_path / "events.jsonl")]
    assert events[:4] == [("BatchStarted", None, "canary: node2"),
                          ("HostFailed", "node2", "gate failed on release 3f2a9c1d0b7e6a55"),
                          ("BatchCompleted", None, "canary: 0 of 1 passed; failed: node2"),
                          ("HostFailed", "node3", recording.BEFORE_SWITCH)]
    assert [reason for reason, _, _ in events[4:]] == ["RolloutAborted", "RunFinished"]
    assert events[4][2] == f"node2: gate failed on release 3f2a9c1d0b7e6a55; node3: {recording.BEFORE_SWITCH}"



def test_each_run_plans_its_own_inventory_and_keeps_the_plan_on_its_state():
    from pyinfra.api import Inventory, State

    from sglfleet.plan.fleet_plan import fleet_plan
    from sglfleet.plan.validation import plan_inventory

    data = {"stack": "dev", "server": "standin", "gpu_less": True, "model_path": "moonshotai/Kimi-K2.5",
            "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3", "allow_unpinned_models": True}
    one = plan_inventory(Inventory(([("node1", {**data, "listen_port": 30000})], {})))
    other = plan_inventory(Inventory(([("node1", {**data, "listen_port": 31000})], {})))
    assert [s.port for s in one.hosts["node1"].services] == [30000]
    assert [s.port for s in other.hosts["node1"].services] == [31000]  # the same name, its own plan
    assert one.hosts["node1"].build("3.11").releases["sglang"].release_id != \
        other.hosts["node1"].build("3.11").releases["sglang"].release_id
    run = State()
    with pytest.raises(RuntimeError, match="config.py plans the fleet before pyinfra connects"):
        fleet_plan(run)  # no hook ran: nothing to find by name
    run.sglfleet_plan = one
    assert fleet_plan(run) is one
