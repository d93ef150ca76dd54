"""A group whose nodes name a host the inventory lacks: its rank would never join."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node1: nodes names node9, which is not in the inventory"]  # fragments of the one message

canary = [_fleet['host']("node1", nodes=["node1", "node9"], tp_size=2)]
wave1 = [_fleet['host']("node2")]
