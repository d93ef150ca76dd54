"""tp_size given as a word on the command line."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["tp_size = 'eight'", 'whole number']  # fragments of the one message
_data = ['tp_size=eight']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
