"""A host two groups claim: it would run two servers on the same GPUs."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node2: node1's nodes put it in the group (node1, node2), its own nodes = ['node2', 'node3']",
           "a host serves one group"]

canary = [_fleet['host']("node1", nodes=["node1", "node2"], tp_size=2)]
wave1 = [_fleet['host']("node2", nodes=["node2", "node3"], tp_size=2),
         _fleet['host']("node3", nodes=["node2", "node3"], tp_size=2)]
