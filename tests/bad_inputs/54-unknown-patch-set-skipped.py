"""patch_sets_skip names a patch set that does not exist (a typo skips nothing)."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["patch_sets_skip: no patch set named 'sm120_symmmem'", "did you mean 'sm120_symm_mem'?"]  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](patch_sets_skip=['sm120_symmmem'])
