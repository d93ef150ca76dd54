"""A misspelt sglang flag in extra_flags."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['--enable-metric is not a flag of sglang 0.5.9', 'did you mean --enable-metrics']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](extra_flags=['--enable-metric'])
