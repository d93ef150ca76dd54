"""router_url that is not an http URL."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["router_url = 'router:30080'", 'http URL']  # fragments of the one message
_data = ['router_url=router:30080']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
