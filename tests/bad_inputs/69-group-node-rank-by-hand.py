"""A rank set by hand: sglfleet sets it from nodes."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node2: node_rank: set by sglfleet from nodes; remove it"]

canary = [_fleet['host']("node1", nodes=["node1", "node2"], tp_size=2)]
wave1 = [_fleet['host']("node2", nodes=["node1", "node2"], tp_size=2, node_rank=1)]
