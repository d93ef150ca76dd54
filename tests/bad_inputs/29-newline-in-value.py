"""A newline smuggled into the model path."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['model_path', 'has the wrong form']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](model_path='m\nExecStart=/bin/sh')
