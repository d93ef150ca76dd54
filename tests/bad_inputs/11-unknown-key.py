"""A key sglfleet does not know, with nothing close."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['colour: unknown key', 'group_data/all.py']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](colour='blue')
