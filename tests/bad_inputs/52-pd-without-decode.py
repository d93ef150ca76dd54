"""A PD fleet with prefills and no decode behind its gateway: no pair can serve."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["a PD fleet needs a decode behind its gateway, and has none"]  # fragments of the one message

canary = [_fleet['host']("node1", listen_host="0.0.0.0", disaggregation_mode="prefill")]
wave1 = [_fleet['host']("node2", listen_host="0.0.0.0", disaggregation_mode="prefill")]
gateways = [_fleet['host']("node4")]
