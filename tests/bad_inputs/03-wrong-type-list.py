"""rollout_waves is a number, not a list of groups."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['rollout_waves = 5', 'list of group names']  # fragments of the one message
_data = ['rollout_waves=5']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
