"""Every host a gateway: nothing for them to route to."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['node1, node2: gateways without workers', 'add serving hosts']  # fragments of the one message

gateways = [_fleet['host']("node1"), _fleet['host']("node2")]
