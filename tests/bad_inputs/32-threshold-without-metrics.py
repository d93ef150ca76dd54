"""A spec-accept threshold with metrics off."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['gate_min_spec_accept_length', 'enable_metrics = True']  # fragments of the one message
_data = ['gate_min_spec_accept_length=2.0', 'enable_metrics=false']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
