"""A bake with metrics off: it has nothing to read."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['gate_bake_s', 'enable_metrics = True']  # fragments of the one message
_data = ['gate_bake_s=60', 'enable_metrics=false', 'router_url=http://router:30080', 'listen_host=0.0.0.0']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
