"""An operator's patch set whose anchor is not in the stack's sglang file (read from its wheel)."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["patch_sets_dir: patch set my_drifted: anchor missing: no statement `if self.device_capability < 7:`",
           "TorchSymmMemCommunicator.__init__"]  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](patch_sets_dir='tests/bad_inputs/patch_sets/drifted')
