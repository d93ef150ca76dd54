"""A stack name with no files/stacks/<name>.toml."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["stack = 'cu130-sglang-0.5.8'", "did you mean 'cu130-sglang-0.5.9'"]  # fragments of the one message
_data = ['stack=cu130-sglang-0.5.8']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
