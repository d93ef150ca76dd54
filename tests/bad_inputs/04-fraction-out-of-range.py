"""mem_fraction_static above 1."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['mem_fraction_static = 1.5', 'between 0 and 1']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](mem_fraction_static=1.5)
