"""A model revision that is a branch, not a commit, in an inventory that does not allow unpinned models."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["model_revision: moonshotai/Kimi-K2.5: 'main' is a branch or tag, not a commit", 'pin the 40-hex commit']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](model_revision='main', speculative_algorithm=None, speculative_draft_model_path=None, allow_unpinned_models=False)
