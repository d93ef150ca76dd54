"""A group whose ranks run different stacks: one server runs one sglang."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node2: stack = 'dev-sglang-0.5.23'", "its group's head node1 has 'dev'", "make them equal"]

canary = [_fleet['host']("node1", nodes=["node1", "node2"], tp_size=2),
          _fleet['host']("node2", nodes=["node1", "node2"], tp_size=2, stack="dev-sglang-0.5.23")]
wave1 = [_fleet['host']("node3")]
