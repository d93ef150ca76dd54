"""A policy smg refuses at start-up for the workers this inventory gives it: power of two with one worker."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node4: gateway_policy = 'power_of_two' needs two workers or more", "has 1"]  # fragments of the one message
_data = ['gateway_policy=power_of_two']  # pyinfra --data overrides

canary = [_fleet['host']("node1", listen_host="0.0.0.0")]
gateways = [_fleet['host']("node4")]
