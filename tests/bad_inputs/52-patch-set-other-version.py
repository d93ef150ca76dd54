"""An operator's patch set that does not name the stack's sglang version."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["patch_sets_dir: patch set my_symm_mem", "is for sglang 0.5.10; stack dev has sglang 0.5.9"]  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](patch_sets_dir='tests/bad_inputs/patch_sets/other_version')
