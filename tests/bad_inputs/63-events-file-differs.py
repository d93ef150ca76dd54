"""One wave's hosts log the run's events elsewhere: a run has one event log, so the hosts must agree."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node3: events_file = '/tmp/wave2-events.jsonl' differs from node1's None",
           "set it once for the fleet"]  # fragments of the one message

canary, wave1, _ = _fleet['waves']()
wave2 = [_fleet['host']("node3", events_file="/tmp/wave2-events.jsonl")]
