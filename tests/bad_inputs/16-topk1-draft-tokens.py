"""topk 1 with draft tokens other than steps + 1."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['speculative_num_draft_tokens', '= 4']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=6)
