"""speculative_num_step (no s)."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['speculative_num_step', "did you mean 'speculative_num_steps'"]  # fragments of the one message
_data = ['speculative_num_step=3']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
