"""tp_sise instead of tp_size."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['tp_sise', "did you mean 'tp_size'"]  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](tp_sise=8)
