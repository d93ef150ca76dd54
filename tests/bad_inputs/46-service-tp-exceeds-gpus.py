"""A service whose tp_size times dp_size needs more GPUs than it owns."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['services[0] (big)', 'tp_size 2 times dp_size 2 needs 4 GPUs', 'holds 2']  # fragments of the one message
_data = ['services=[{"name": "big", "gpus": [0, 1], "port": 30001, "tp_size": 2, "extra_flags": ["--dp-size", "2"]}]']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
