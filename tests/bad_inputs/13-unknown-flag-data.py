"""An unknown sglang flag given with --data."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['--speculative-num-stepz is not a flag', 'did you mean --speculative-num-steps']  # fragments of the one message
_data = ['extra_flags=--speculative-num-stepz 3']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
