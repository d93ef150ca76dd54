"""A transfer backend the stack's sglang does not offer."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["disaggregation_transfer_backend: 'mooncake-tcp' is not a backend of sglang", "did you mean"]  # fragments of the one message

canary = [_fleet['host']("node1", listen_host="0.0.0.0", disaggregation_mode="prefill",
                         disaggregation_transfer_backend="mooncake-tcp")]
canary += [_fleet['host']("node2", listen_host="0.0.0.0", disaggregation_mode="decode",
                        disaggregation_transfer_backend="mooncake-tcp")]
gateways = [_fleet['host']("node4")]
