"""A negative number of EAGLE-3 steps."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['speculative_num_steps = -1', '>= 1']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](speculative_num_steps=-1, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
