"""A stack whose lock has no sha256 for its wheels."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['no sha256', 'allow_unhashed_lock']  # fragments of the one message
_env = {'SGLFLEET_STACKS': 'tests/bad_inputs/stacks'}

canary, wave1, wave2 = _fleet['waves'](stack='unhashed')
