"""The real server on a GPU-less host."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['server', 'SGLang needs GPUs']  # fragments of the one message
_data = ['server=sglang']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
