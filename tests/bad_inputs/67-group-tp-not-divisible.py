"""A group whose tp_size does not split over its hosts."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node1: tp_size 3 over the 2 hosts of its group", "set a multiple of 2"]

canary = [_fleet['host']("node1", nodes=["node1", "node2"], tp_size=3),
          _fleet['host']("node2", nodes=["node1", "node2"], tp_size=3)]
wave1 = [_fleet['host']("node3")]
