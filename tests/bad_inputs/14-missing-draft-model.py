"""Kimi K2.5 with EAGLE-3 and no draft model."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['speculative_draft_model_path', 'KimiK25']  # fragments of the one message
_data = ['speculative_draft_model_path=null']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
