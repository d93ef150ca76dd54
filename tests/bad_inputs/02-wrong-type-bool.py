"""enable_metrics is neither true nor false."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["enable_metrics = 'maybe'", 'true or false']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](enable_metrics='maybe')
