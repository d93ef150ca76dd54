"""The API key passed as an extra flag."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['--api-key carries a secret']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](extra_flags=['--api-key', 'notarealkey'])
