"""An operator's patch set that declares no anchor and no change."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["patch_sets_dir: patch set", "unfinished.toml", "`anchor` needs `class`"]  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](patch_sets_dir='tests/bad_inputs/patch_sets/broken')
