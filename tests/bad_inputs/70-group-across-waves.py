"""A group whose hosts sit in two waves: a group rolls out as one unit."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node1, node2: a group rolls out as one unit, in one wave", "node1 in canary, node2 in wave1"]

canary = [_fleet['host']("node1", nodes=["node1", "node2"], tp_size=2)]
wave1 = [_fleet['host']("node2", nodes=["node1", "node2"], tp_size=2)]
