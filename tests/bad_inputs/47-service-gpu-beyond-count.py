"""A service that names a GPU the host, by its gpu_count, does not have."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['services[1] (small)', 'GPU 4 does not exist', 'gpu_count 4']  # fragments of the one message
_data = ['gpu_count=4', 'services=[{"name": "big", "gpus": [0, 1], "port": 30001, "tp_size": 2}, {"name": "small", "gpus": [4], "port": 30002}]']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
