"""A group whose hosts have different GPU counts: tensor parallel splits evenly over them."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node2: gpu_count = 4", "its group's head node1 has 8"]

canary = [_fleet['host']("node1", nodes=["node1", "node2"], tp_size=16, gpu_count=8),
          _fleet['host']("node2", nodes=["node1", "node2"], tp_size=16, gpu_count=4)]
wave1 = [_fleet['host']("node3")]
