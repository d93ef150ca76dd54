"""A negative gate warm-up budget."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['gate_warmup_s = -5', 'seconds > 0']  # fragments of the one message
_data = ['gate_warmup_s=-5']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
