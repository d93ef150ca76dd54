"""
What the installed sglang shows of its secrets, read from its own (possibly patched) sources.

- **/server_info** (and ``/get_server_info``) answers ``dataclasses.asdict(server_args)`` and
  each scheduler's ``vars(server_args)``: ``api_key``, ``admin_api_key`` and
  ``ssl_keyfile_password`` in plain text (0.5.9 entrypoints/http_server.py:593-610,
  managers/scheduler.py:2651). A release patched by one of sglfleet's
  ``server_info_keys_redacted*`` sets (its marker in ``http_server.py``, or from 0.5.22 in
  ``sampling/watermarking/core.py``) answers each that is set as ``"<redacted>"``, and null
  for one that is not, at the top and in every internal state.
- **The start-up log**: ``ServerArgs``' repr (0.5.9 entrypoints/engine.py:1031), which leaves out
  a field declared ``dataclasses.field(..., repr=False)``, as ``api_key_not_logged`` and
  ``api_key_not_logged_annotated`` declare the two keys.

Standard library only, nothing imported of sglang: the files are read as text and syntax.

**Example:**

.. code:: python

    package = find_sglang()
    if redacts_server_info(package):
        answer = redacted(answer)
    hidden = hidden_from_repr(package)   # {"api_key", "admin_api_key"} once patched
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SECRET_FIELDS = ("api_key", "admin_api_key", "ssl_keyfile_password")
REDACTED = "<redacted>"
# The files a server_info_keys_redacted* set changes: the route up to 0.5.16, the redactor from 0.5.22.
SERVER_INFO_FILES = ("srt/entrypoints/http_server.py", "srt/sampling/watermarking/core.py")
# A replacement's begin marker (sglfleet/artifacts/replacer.py); a set of several changes adds ".N".
_MARKER = re.compile(r"^[ \t]*# >>> sglfleet patch server_info_keys_redacted[\w.]* ", re.MULTILINE)


def redacts_server_info(package: Path) -> bool:
    """
    Whether the installed release's /server_info hides the keys' values: one of its files carries
    a ``server_info_keys_redacted*`` block.

    + package: the installed ``sglang`` package directory (``find_sglang()``)
    """
    for name in SERVER_INFO_FILES:
        path = package / name
        if path.is_file() and _MARKER.search(path.read_text(errors="replace")):
            return True
    return False


def redacted(state: dict) -> dict:
    """``state`` with each secret field that is set as ``"<redacted>"``; unset ones stay null, absent ones absent."""
    return {key: (REDACTED if key in SECRET_FIELDS and value is not None else value) for key, value in state.items()}


def hidden_from_repr(package: Path) -> set[str]:
    """
    The ``ServerArgs`` fields the installed ``server_args.py`` declares ``repr=False``: the logged
    repr leaves them out.

    + package: the installed ``sglang`` package directory
    """
    path = package / "srt" / "server_args.py"
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return set()
    hidden = set()
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name == "ServerArgs"):
            continue
        for field in node.body:
            if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                    and isinstance(field.value, ast.Call) and _is_field_call(field.value.func)
                    and any(k.arg == "repr" and isinstance(k.value, ast.Constant) and k.value.value is False
                            for k in field.value.keywords)):
                hidden.add(field.target.id)
    return hidden


def _is_field_call(func: ast.expr) -> bool:
    # dataclasses.field(...) or field(...)
    return (isinstance(func, ast.Attribute) and func.attr == "field") or (isinstance(func, ast.Name) and func.id == "field")
