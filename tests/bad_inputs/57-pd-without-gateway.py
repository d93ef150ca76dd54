"""Prefill and decode servers with no gateway to pair them."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["disaggregation_mode without a gateway", "add a host to the group gateways"]  # fragments of the one message

canary = [_fleet['host']("node1", listen_host="0.0.0.0", disaggregation_mode="prefill")]
wave1 = [_fleet['host']("node2", listen_host="0.0.0.0", disaggregation_mode="decode")]
