"""An abbreviated sglang flag: sglang accepts it, sglfleet asks for it in full."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['--max-running-req is an abbreviation of --max-running-requests', 'write --max-running-requests in full']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](extra_flags=['--max-running-req', '64'])
