"""A gateway host that is also in a wave: it would get sglang too."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['node4: in group gateways and in wave wave2', 'take it out of wave2']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](listen_host="0.0.0.0")
wave2 = wave2 + [_fleet['host']("node4")]
gateways = [_fleet['host']("node4")]
