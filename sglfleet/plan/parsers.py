"""
The reasoning and tool-call parsers an sglang release offers, read from its own wheel.

sglang 0.5.9 declares each flag's choices as a literal list, which the flag set
resolves. 0.5.14 and later compute them at parse time (``server_args.py``
``_reasoning_parser_choices()``: ``["auto"] + REASONING_PARSER_NAMES``), so for
those the names are read from the dependency-free modules that list them
(``srt/parser/reasoning_parser_names.py``, ``srt/function_call/parser_names.py``).

**Example:**

.. code:: python

    parser_choices("0.5.9", flagset_for("0.5.9"), "--reasoning-parser")  # ["deepseek-r1", ..., "kimi_k2", ...]
"""

from __future__ import annotations

import ast

from sglfleet.artifacts.upstream import CACHE

# flag -> (the module under sglang/srt that lists the names, the list's name)
NAME_MODULES = {
    "--reasoning-parser": ("parser/reasoning_parser_names.py", "REASONING_PARSER_NAMES"),
    "--tool-call-parser": ("function_call/parser_names.py", "TOOL_CALL_PARSER_NAMES"),
}


def parser_choices(version: str, flagset, flag: str) -> list[str] | None:
    """
    The values ``flag`` takes in sglang ``version``, or None where they cannot be read.

    + version: the stack's sglang release, e.g. ``"0.5.9"``
    + flagset: its flag set (``sglfleet.plan.flagsets.flagset_for``), whose tree is extracted
    + flag: ``"--reasoning-parser"`` or ``"--tool-call-parser"``
    """
    spec = flagset.options.get(flag)
    if spec is None:
        return None
    if spec.choices is not None:
        return [str(choice) for choice in spec.choices]
    module, name = NAME_MODULES[flag]
    path = CACHE / "tree" / version / "sglang" / "srt" / module
    if not path.exists():
        return None
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            names = ast.literal_eval(node.value)
            # server_args.py: choices=["auto"] + <names>, where the expression says so
            return (["auto"] if "'auto'" in (spec.choices_expr or "") else []) + list(names)
    return None
