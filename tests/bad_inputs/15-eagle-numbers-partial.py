"""One EAGLE-3 number without the other two."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['speculative_eagle_topk', 'all three or none']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](speculative_num_steps=3)
