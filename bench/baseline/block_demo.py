"""
What ``files.block`` does to kimi_k25.py where it cannot do the right thing, for bench/run.py.

Run on the controller (``@local``) against copies of the real upstream files
in ``--data demo_dir=DIR``: ``0.5.9.py`` (with the class anchor and with the
operation's default, no anchor), ``0.5.10.py`` (methods already upstream) and
``missing.py`` (a stack without the file). bench/run.py then parses each result.
"""

from pathlib import Path

from pyinfra import host
from pyinfra.operations import files

demo = host.data.demo_dir
lines = (Path(__file__).parents[2] / "files/patches/kimi_k25_eagle3.py").read_text().splitlines()
methods = "\n".join(lines[lines.index("class KimiK25ForConditionalGeneration:") + 1:]).rstrip()
anchor = {"line": "^class KimiK25ForConditionalGeneration\\(", "after": True}

for name, where in (("0.5.9-anchor.py", anchor), ("0.5.9-default.py", {}),
                    ("0.5.10-anchor.py", anchor), ("missing-anchor.py", anchor)):
    files.block(name=name, path=f"{demo}/{name}", content=methods, marker="# {mark} EAGLE-3 METHODS", **where)
