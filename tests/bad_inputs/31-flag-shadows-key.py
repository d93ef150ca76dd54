"""tp size set through extra_flags instead of tp_size."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['--tensor-parallel-size is set through the key tp_size']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](extra_flags=['--tensor-parallel-size', '2'])
