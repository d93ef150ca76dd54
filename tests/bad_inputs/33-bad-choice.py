"""A value sglang's parser refuses."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['--attention-backend flashattn', 'not one of']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](extra_flags=['--attention-backend', 'flashattn'])
