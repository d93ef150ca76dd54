"""A PD rollout whose first batch has no prefill: the gateways would flip to a release that cannot serve."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["canary batch 1 (node2): the first batch of a PD rollout flips the gateways", "needs a prefill and a decode"]  # fragments of the one message

canary = [_fleet['host']("node2", listen_host="0.0.0.0", disaggregation_mode="decode")]
wave1 = [_fleet['host']("node1", listen_host="0.0.0.0", disaggregation_mode="prefill")]
gateways = [_fleet['host']("node4")]
