"""Two services of a host on one port."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['services[1] (small)', 'port 30001', "services[0] (big)'s"]  # fragments of the one message
_data = ['services=[{"name": "big", "gpus": [0], "port": 30001}, {"name": "small", "gpus": [1], "port": 30001}]']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
