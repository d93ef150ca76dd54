"""reasoning_parser names a parser the stack's sglang does not have."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["reasoning_parser", "'kimi-k2' is not a --reasoning-parser of sglang", "did you mean 'kimi_k2'?"]
_data = ['reasoning_parser=kimi-k2']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
