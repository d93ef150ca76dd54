"""A unit template that uses a variable sglfleet does not pass."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['sglang.service.j2', "'gpu_count' is undefined"]  # fragments of the one message
_env = {'SGLFLEET_TEMPLATES': 'tests/bad_inputs/broken_templates'}

canary, wave1, wave2 = _fleet['waves']()
