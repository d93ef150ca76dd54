"""Two services of a host that both name GPU 1."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['services[1] (small)', 'GPU 1', "services[0] (big)'s"]  # fragments of the one message
_data = ['services=[{"name": "big", "gpus": [0, 1], "port": 30001, "tp_size": 2}, {"name": "small", "gpus": [1], "port": 30002}]']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
