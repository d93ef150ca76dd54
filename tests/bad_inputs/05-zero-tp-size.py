"""tp_size 0."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['tp_size = 0', '>= 1']  # fragments of the one message
_data = ['tp_size=0']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
