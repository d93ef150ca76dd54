"""An inventory file that raises."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ['does not load', 'NameError']  # fragments of the one message

canary = [undefined_host_list]  # noqa: F821
