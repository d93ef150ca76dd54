"""A decode of another model than its prefill's."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node2: model_path = 'Qwen/Qwen3-8B', but the prefill node1 has 'moonshotai/Kimi-K2.5'"]  # fragments of the one message

canary = [_fleet['host']("node1", listen_host="0.0.0.0", disaggregation_mode="prefill")]
wave1 = [_fleet['host']("node2", listen_host="0.0.0.0", disaggregation_mode="decode", model_path="Qwen/Qwen3-8B",
                        speculative_draft_model_path=None, speculative_algorithm=None)]
gateways = [_fleet['host']("node4")]
