"""sglang 0.5.9 on SM120 with torch symmetric memory, without the patch set that backports the fix."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["enable_torch_symm_mem", "KeyError 12", "patch set sm120_symm_mem backports it"]  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](stack='dev', server='sglang', gpu_less=False, gpu_compute_cap='12.0', gpu_count=8, tp_size=8, enable_torch_symm_mem=True, patch_sets_skip=['sm120_symm_mem'])
