"""
Who may call what, as the installed sglang decides it: its routes' auth levels, read from its own
``http_server.py``, and its ``decide_request_auth`` (0.5.9 ``srt/utils/auth.py:74-146``).

- **NORMAL** (every route without a level): ``api_key`` where one is set, else open, also when
  only ``admin_api_key`` is set;
- **ADMIN_OPTIONAL** (``flush_cache``, ``update_weights_from_disk``, ``pause_generation``, ...):
  ``admin_api_key`` where one is set (``api_key`` is then refused), else ``api_key``, else open;
- **ADMIN_FORCE**: ``admin_api_key`` alone, refused (403) where none is set;
- ``/health*``, ``/metrics*`` and ``OPTIONS`` always open.

A request matches a route by path and method, as Starlette's ``Match.FULL``; one that matches
none is NORMAL (0.5.9 ``auth.py:38-59``). The middleware is there only where a key is set or a
route is ADMIN_FORCE (0.5.9 ``http_server.py:1939-1950``). Standard library only.

**Example:**

.. code:: python

    routes = route_levels(find_sglang())
    allowed, status = decide("POST", "/flush_cache", "Bearer sk-client", "sk-client", "sk-admin",
                             level_of(routes, "POST", "/flush_cache"))   # (False, 401)
"""

from __future__ import annotations

import ast
import hmac
import re
from pathlib import Path

NORMAL, ADMIN_OPTIONAL, ADMIN_FORCE = "NORMAL", "ADMIN_OPTIONAL", "ADMIN_FORCE"
_VERBS = {"get": ("GET",), "post": ("POST",), "put": ("PUT",), "delete": ("DELETE",), "patch": ("PATCH",)}


def route_levels(package: Path) -> list[tuple[re.Pattern, tuple[str, ...], str]]:
    """
    ``(path pattern, methods, level)`` of each route of the installed ``http_server.py`` that declares a level.

    + package: the installed ``sglang`` package directory
    """
    try:
        tree = ast.parse((package / "srt" / "entrypoints" / "http_server.py").read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return []
    routes = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        level, paths = None, []
        for decorator in node.decorator_list:
            if not isinstance(decorator, ast.Call) or not isinstance(decorator.func, (ast.Attribute, ast.Name)):
                continue
            name = decorator.func.attr if isinstance(decorator.func, ast.Attribute) else decorator.func.id
            if name == "auth_level" and decorator.args and isinstance(decorator.args[0], ast.Attribute):
                level = decorator.args[0].attr
            elif (name in _VERBS or name == "api_route") and decorator.args \
                    and isinstance(decorator.args[0], ast.Constant):
                methods = _VERBS.get(name) or _methods(decorator)
                paths.append((decorator.args[0].value, methods))
        if level:
            routes += [(_pattern(path), methods, level) for path, methods in paths]
    return routes


def _methods(decorator: ast.Call) -> tuple[str, ...]:
    for keyword in decorator.keywords:
        if keyword.arg == "methods" and isinstance(keyword.value, (ast.List, ast.Tuple)):
            return tuple(element.value for element in keyword.value.elts if isinstance(element, ast.Constant))
    return ("GET",)


def _pattern(path: str) -> re.Pattern:
    # Starlette's {name} matches one segment, {name:path} the rest.
    parts = re.split(r"(\{[^}]+\})", path)
    return re.compile("^" + "".join(
        ("(.+)" if part.endswith(":path}") else "([^/]+)") if part.startswith("{") else re.escape(part)
        for part in parts) + "$")


def level_of(routes, method: str, path: str) -> str:
    """The level of the route ``method path`` matches in full; NORMAL where none does."""
    for pattern, methods, level in routes:
        if pattern.match(path) and method in methods:
            return level
    return NORMAL


def decide(method: str, path: str, authorization: str | None, api_key: str | None,
           admin_api_key: str | None, level: str) -> tuple[bool, int]:
    """``(allowed, status when refused)``, as 0.5.9's ``decide_request_auth``."""
    if method == "OPTIONS" or path.startswith(("/health", "/metrics")):
        return True, 401
    if level == ADMIN_FORCE:
        if not admin_api_key:
            return False, 403
        return _bearer(authorization, admin_api_key), 401
    if level == ADMIN_OPTIONAL:
        expected = admin_api_key or api_key
        return (_bearer(authorization, expected) if expected else True), 401
    return (_bearer(authorization, api_key) if api_key else True), 401


def _bearer(authorization: str | None, expected: str) -> bool:
    scheme, _, token = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), expected.encode())
