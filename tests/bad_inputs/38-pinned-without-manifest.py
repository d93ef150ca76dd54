"""A model pinned to a commit with no committed manifest: refused, naming the command and what it must reach."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['has no manifest', 'run `sglfleet model lock moonshotai/Kimi-K2.5@4d01dfe0332d63057c186e0b262165819efb6611` where https://huggingface.co can be reached']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](model_revision='4d01dfe0332d63057c186e0b262165819efb6611')
