"""What a run learns and reports lives in one RunRecord on pyinfra's state: each run its own, none in a module."""

import pytest
from pyinfra.api import State
from pyinfra.context import ctx_state

from sglfleet.run import compile_share, recording, summary
from sglfleet.run.record import record


def test_each_run_keeps_its_own_record_on_its_state():
    first, second = State(), State()
    with ctx_state.use(first):
        summary.passed("node1", "serves 3f2a9c1d0b7e6a55")
        summary.failed("node2", "gate failed on release 3f2a9c1d0b7e6a55\nits journal: ...")
        summary.failed("node2", "a later line explains it")
        record().offers["dev+9.0"] = compile_share.Offer("ab" * 32, 10)
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

