"""A decode whose page size differs from its prefill's: sglang's decode refuses the pair."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node2: page_size = '16', but the prefill node1 has '1'", "make them equal"]  # fragments of the one message

canary = [_fleet['host']("node1", listen_host="0.0.0.0", disaggregation_mode="prefill")]
wave1 = [_fleet['host']("node2", listen_host="0.0.0.0", disaggregation_mode="decode",
                        extra_flags=["--page-size", "16"])]
gateways = [_fleet['host']("node4")]
