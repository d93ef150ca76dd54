"""A credential-shaped value under an ordinary key."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['served_model_name: holds what looks like a credential']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](served_model_name='hf_notarealtokenbutlookslikeone1234')
