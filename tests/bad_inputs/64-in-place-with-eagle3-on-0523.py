"""Weights updated in place with EAGLE-3 on sglang 0.5.23: it loads the draft from the new model path and dies."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["error: weights_update: \"in_place\" cannot be", "sglang 0.5.23 loads the EAGLE3 draft from the new model path",
           'set it to "auto"']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](stack="dev-sglang-0.5.23", weights_update="in_place")
