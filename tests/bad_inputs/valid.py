"""A valid inventory: the base every case breaks in one way."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))

canary, wave1, wave2 = _fleet['waves']()
