"""A routing policy sglang's gateway does not know."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["gateway_policy = 'fastest'", "'round_robin'", "smg 1.13.0"]  # fragments of the one message
_data = ['gateway_policy=fastest']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves'](listen_host="0.0.0.0")
gateways = [_fleet['host']("node4")]
