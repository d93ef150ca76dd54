"""A service on the port the model store's file server takes."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['model_share_port', 'port 30090', "services[0] (big)'s"]  # fragments of the one message
_data = ['services=[{"name": "big", "gpus": [0], "port": 30090}]']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
