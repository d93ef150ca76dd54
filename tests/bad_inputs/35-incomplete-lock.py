"""A stack whose lock leaves packages unresolved: refused before any connection."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['the lock is incomplete', 'run `sglfleet lock cu130-sglang-0.5.9` where download.pytorch.org']  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](stack='cu130-sglang-0.5.9', server='sglang', gpu_less=False, gpu_compute_cap='12.0', gpu_count=8, tp_size=8)
