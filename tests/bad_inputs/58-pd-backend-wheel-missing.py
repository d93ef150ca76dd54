"""A real sglang PD server whose stack's lock lacks its transfer backend's wheel (mooncake-transfer-engine)."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["disaggregation_transfer_backend", "needs the mooncake-transfer-engine-cuda13 wheel, and the lock of stack dev has none"]  # fragments of the one message

_gpu = dict(stack='dev', server='sglang', gpu_less=False, gpu_compute_cap='12.0', gpu_count=8, listen_host="0.0.0.0")
canary = [_fleet['host']("node1", disaggregation_mode="prefill", **_gpu)]
canary += [_fleet['host']("node2", disaggregation_mode="decode", **_gpu)]
gateways = [_fleet['host']("node4")]
