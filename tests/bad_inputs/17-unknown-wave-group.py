"""rollout_waves names a group the inventory lacks."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["'wave3' is not a group"]  # fragments of the one message
_data = ['rollout_waves=canary,wave1,wave3']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
