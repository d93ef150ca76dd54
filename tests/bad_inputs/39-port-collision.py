"""The compile caches' file server on the port the model store's already takes."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['compile_share_port', 'port 30090', "model_share_port's"]  # fragments of the one message
_data = ['compile_share_port=30090']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
