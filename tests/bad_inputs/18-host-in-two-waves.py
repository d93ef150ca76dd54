"""node2 in wave1 and in wave2."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['node2: in waves wave1 and wave2']  # fragments of the one message

canary = [_fleet['host']('node1')]
wave1 = [_fleet['host']('node2')]
wave2 = [_fleet['host']('node2'), _fleet['host']('node3')]
