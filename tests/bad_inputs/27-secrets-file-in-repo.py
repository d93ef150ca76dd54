"""The secrets file inside the repository."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['secrets_file', 'inside the repository']  # fragments of the one message
_data = ['secrets_file=files/secrets.env']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves']()
