"""A port above 65535."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['listen_port = 70000', '65535']  # fragments of the one message
_data = ['listen_port=70000']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
