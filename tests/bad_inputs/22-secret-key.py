"""An HF token in inventory data."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['hf_token: secrets do not belong in inventory data', 'SGLFLEET_HF_TOKEN']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](hf_token='hf_notarealtokenbutlookslikeone1234')
