"""A service key spelt wrong."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['services[0] (big)', 'gpu: not a service key', "did you mean 'gpus'?"]  # fragments of the one message
_data = ['services=[{"name": "big", "gpu": [0], "gpus": [0], "port": 30001}]']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
