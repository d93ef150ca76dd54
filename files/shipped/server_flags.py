"""
The launch flags of an sglang release, read from its own ``server_args.py``.

SGLang declares its command line in ``ServerArgs.add_cli_args``: explicit
``parser.add_argument(...)`` calls up to 0.5.10, and from 0.5.14 on mostly
``Annotated[T, Arg(...)]`` fields expanded by ``add_cli_args_from_dataclass``
(in 0.5.23 the fields live in ``sglang/srt/arg_groups/fields/*.py``). This
module reads both shapes with ``ast``, never importing sglang, and rebuilds an
argparse parser that accepts exactly those flags. The SGLang stand-in parses
its arguments with it, and the controller's lint checks launch configurations
against it.

Standard library only, no sglfleet imports: the file is shipped to hosts
beside the stand-in.

What cannot be resolved statically (choices computed from imported registries
through functions, type callables this module does not know) is recorded as
source text and accepted leniently: any value passes such a flag.

**Example:**

.. code:: python

    flags = load_flags("/opt/sglfleet/stacks/x/venv/lib/python3.11/site-packages/sglang/srt/server_args.py")
    flags.spec("--speculative-draft-model").dest   # "speculative_draft_model_path"
    args = build_parser(flags).parse_args(["--model-path", "m"])
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import logging
import os
import re
import dataclasses
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

# Bump when the extraction changes, so cached flag sets are rebuilt.
EXTRACTOR_VERSION = 2
SERVER_ARGS_MODULE = "sglang.srt.server_args"

logger = logging.getLogger("sglang.srt.server_args")


@dataclass
class FlagSpec:
    """One ``add_argument`` of SGLang's parser, as data."""

    options: list[str]  # option strings as declared, canonical first
    dest: str
    action: str = "store"  # argparse action name or the custom action class name
    type: str | None = None  # "str", "int", "json.loads", ... (source name)
    choices: list | None = None
    choices_expr: str | None = None  # source text of choices we could not resolve
    nargs: str | int | None = None
    has_default: bool = False
    default: Any = None
    default_expr: str | None = None  # source text of a default we could not resolve
    const: Any = None
    required: bool = False
    help: str = ""
    field: str | None = None  # the ServerArgs field this flag feeds
    extra: dict = dataclasses.field(default_factory=dict)  # custom action keywords (new_flag, ...)

    @property
    def all_options(self) -> list[str]:
        """Every option string the parser accepts for this flag (with ``--no-`` forms)."""
        if self.action != "BooleanOptionalAction":
            return list(self.options)
        return self.options + ["--no-" + o[2:] for o in self.options if o.startswith("--")]

    @property
    def effective_default(self) -> Any:
        """The value argparse stores when the flag is absent."""
        if self.has_default:
            return self.default
        return {"store_true": False, "store_false": True}.get(self.action)


@dataclass
class FlagSet:
    """The command line of one sglang release."""

    flags: list[FlagSpec]
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)  # ServerArgs field -> default
    prog: str | None = None  # ArgumentParser(prog=...) in prepare_server_args, if any
    source_sha256: str = ""

    @property
    def options(self) -> dict[str, FlagSpec]:
        """Every accepted option string (aliases included) -> its flag."""
        return {opt: spec for spec in self.flags for opt in spec.all_options}

    @property
    def aliases(self) -> dict[str, str]:
        """Alias option string -> canonical (first declared) option string."""
        return {opt: spec.options[0] for spec in self.flags for opt in spec.all_options[1:]}

    @property
    def dests(self) -> dict[str, FlagSpec]:
        """argparse destination name -> flag."""
        return {spec.dest: spec for spec in self.flags}

    def spec(self, option: str) -> FlagSpec:
        """The flag that ``option`` (any alias) names; KeyError when unknown."""
        return self.options[option]

    def to_json(self) -> dict:
        return {"flags": [asdict(s) for s in self.flags], "fields": self.fields,
                "prog": self.prog, "source_sha256": self.source_sha256}

    @classmethod
    def from_json(cls, data: dict) -> "FlagSet":
        return cls(flags=[FlagSpec(**s) for s in data["flags"]], fields=data["fields"],
                   prog=data.get("prog"), source_sha256=data.get("source_sha256", ""))


# --------------------------------------------------------------------------
# Static evaluation of the little Python that declares flags
# --------------------------------------------------------------------------


class _Unresolved(Exception):
    pass


class _Opaque:
    """A value we could not evaluate where only its presence matters (a dict value)."""


_MISSING = object()


class _Module:
    """Top-level names of one parsed module: assignments, classes, imports."""

    def __init__(self, name: str, tree: ast.Module, is_package: bool = False):
        self.name = name
        self.tree = tree
        self.assigns: dict[str, ast.AST] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.imports: dict[str, tuple[str, str | None]] = {}
        package = name if is_package else name.rpartition(".")[0]
        for stmt in self._top_level(tree.body):
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        self.assigns[target.id] = stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                if isinstance(stmt.target, ast.Name):
                    self.assigns[stmt.target.id] = stmt.value
            elif isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = stmt
            elif isinstance(stmt, ast.FunctionDef):
                self.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname:
                        self.imports[alias.asname] = (alias.name, None)
                    else:
                        top = alias.name.split(".")[0]
                        self.imports[top] = (top, None)
            elif isinstance(stmt, ast.ImportFrom):
                base = stmt.module or ""
                if stmt.level:
                    parts = package.split(".")
                    parent = ".".join(parts[: len(parts) - stmt.level + 1])
                    base = f"{parent}.{base}" if stmt.module else parent
                for alias in stmt.names:
                    if alias.name != "*":
                        self.imports[alias.asname or alias.name] = (base, alias.name)

    @staticmethod
    def _top_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
        # Imports often sit in try/except or `if` blocks; the first branch wins.
        for stmt in body:
            if isinstance(stmt, ast.Try):
                yield from _Module._top_level(stmt.body)
            elif isinstance(stmt, ast.If):
                yield from _Module._top_level(stmt.body)
            else:
                yield stmt


@dataclass
class _ClassRef:
    module: _Module
    node: ast.ClassDef


@dataclass
class _ModuleRef:
    name: str


_BUILTINS = {"list", "tuple", "set", "frozenset", "sorted", "dict", "str", "int", "float", "bool"}


class _Evaluator:
    """Evaluates constant-ish expressions across the modules of one package."""

    def __init__(self, loader: Callable[[str], tuple[str, bool] | None]):
        self.loader = loader
        self.cache: dict[str, _Module | None] = {}
        self.scopes: dict[int, dict[str, ast.AST]] = {}

    def class_scope(self, cls: ast.ClassDef) -> dict[str, ast.AST]:
        """Names assigned in a class body -> their value nodes (computed once)."""
        if id(cls) not in self.scopes:
            scope = {}
            for stmt in cls.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else (
                    [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value else [])
                for target in targets:
                    if isinstance(target, ast.Name):
                        scope[target.id] = stmt.value
            self.scopes[id(cls)] = scope
        return self.scopes[id(cls)]

    def module(self, name: str) -> _Module | None:
        if name not in self.cache:
            found = self.loader(name)
            self.cache[name] = None
            if found is not None:
                source, is_package = found
                try:
                    self.cache[name] = _Module(name, ast.parse(source), is_package)
                except SyntaxError:
                    pass
        return self.cache[name]

    def lookup(self, module: _Module, name: str, depth: int = 0) -> Any:
        if depth > 12:
            raise _Unresolved(name)
        if name in module.assigns:
            return self.eval(module.assigns[name], module, depth=depth + 1)
        if name in module.classes:
            return _ClassRef(module, module.classes[name])
        if name in module.imports:
            target, attr = module.imports[name]
            if attr is None:
                return _ModuleRef(target)
            source = self.module(target)
            if source is not None and (attr in source.assigns or attr in source.classes
                                       or attr in source.imports):
                return self.lookup(source, attr, depth + 1)
            if self.module(f"{target}.{attr}") is not None:
                return _ModuleRef(f"{target}.{attr}")
            raise _Unresolved(name)
        if name in _BUILTINS:
            return name
        raise _Unresolved(name)

    def eval(self, node: ast.AST, module: _Module, local: Mapping[str, ast.AST] | None = None,
             depth: int = 0) -> Any:
        if depth > 24:
            raise _Unresolved(ast.unparse(node))
        ev = lambda n: self.eval(n, module, local, depth + 1)  # noqa: E731
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out: list = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    out.extend(self._iterate(ev(elt.value)))
                else:
                    out.append(ev(elt))
            return out
        if isinstance(node, ast.Dict):
            result = {}
            for key, value in zip(node.keys, node.values):
                if key is None:
                    result.update(ev(value))
                    continue
                try:
                    result[ev(key)] = ev(value)
                except _Unresolved:
                    result[ev(key)] = _Opaque()
            return result
        if isinstance(node, ast.Name):
            if local and node.id in local:
                return self.eval(local[node.id], module, None, depth + 1)
            return self.lookup(module, node.id, depth)
        if isinstance(node, ast.Attribute):
            base = ev(node.value)
            if isinstance(base, _ClassRef):
                # Class-body names (ALL = (FULL, BREAKABLE)) resolve in the class scope.
                scope = self.class_scope(base.node)
                if scope.get(node.attr) is None:
                    raise _Unresolved(ast.unparse(node))
                return self.eval(scope[node.attr], base.module, scope, depth + 1)
            if isinstance(base, _ModuleRef):
                mod = self.module(base.name)
                if mod is not None:
                    return self.lookup(mod, node.attr, depth)
                return _ModuleRef(f"{base.name}.{node.attr}")
            raise _Unresolved(ast.unparse(node))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            left, right = ev(node.left), ev(node.right)
            if isinstance(left, (int, float)) and isinstance(right, (int, float)):
                return left * right
            raise _Unresolved(ast.unparse(node))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = ev(node.left), ev(node.right)
            if isinstance(left, list) and isinstance(right, list):
                return left + right
            if isinstance(left, str) and isinstance(right, str):
                return left + right
            if isinstance(left, (int, float)) and isinstance(right, (int, float)):
                return left + right
            raise _Unresolved(ast.unparse(node))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            base = ev(node.value)
            try:
                return base[node.slice.value]
            except (TypeError, KeyError, IndexError):
                raise _Unresolved(ast.unparse(node)) from None
        if isinstance(node, ast.Lambda):
            return ev(node.body)
        if isinstance(node, ast.Call):
            return self._call(node, module, local, depth)
        raise _Unresolved(ast.unparse(node))

    def _call(self, node: ast.Call, module, local, depth) -> Any:
        ev = lambda n: self.eval(n, module, local, depth + 1)  # noqa: E731
        func = node.func
        name = ast.unparse(func)
        if name.split(".")[-1] == "field":  # dataclasses.field / msgspec.field
            kwargs = {k.arg: k.value for k in node.keywords}
            if "default" in kwargs:
                return ev(kwargs["default"])
            if "default_factory" in kwargs:
                factory = kwargs["default_factory"]
                if isinstance(factory, ast.Name) and factory.id in ("list", "dict", "set"):
                    return {"list": [], "dict": {}, "set": []}[factory.id]
                return ev(factory)
            raise _Unresolved(name)
        if isinstance(func, ast.Attribute) and func.attr in ("keys", "values", "copy") \
                and not node.args:
            base = ev(func.value)
            if isinstance(base, dict):
                return list(base.keys() if func.attr == "keys" else base.values()) \
                    if func.attr != "copy" else dict(base)
            if isinstance(base, list) and func.attr == "copy":
                return list(base)
            raise _Unresolved(name)
        if isinstance(func, ast.Name) and func.id in _BUILTINS and len(node.args) <= 1:
            if not node.args:
                return {"dict": {}, "str": "", "int": 0, "float": 0.0, "bool": False}.get(
                    func.id, [])
            value = ev(node.args[0])
            if func.id in ("list", "tuple", "set", "frozenset"):
                return list(self._iterate(value))
            if func.id == "sorted":
                return sorted(self._iterate(value))
            if func.id in ("str", "int", "float", "bool") and isinstance(
                    value, (str, int, float, bool)):
                return {"str": str, "int": int, "float": float, "bool": bool}[func.id](value)
        raise _Unresolved(name)

    @staticmethod
    def _iterate(value: Any) -> list:
        if isinstance(value, dict):
            return list(value.keys())
        if isinstance(value, (list, str)):
            return list(value)
        raise _Unresolved(repr(value))


def _text(node: ast.AST | None, evaluator: _Evaluator, module: _Module, local=None) -> str:
    """Best-effort help text: literal parts kept, unresolved parts as ``{source}``."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                try:
                    parts.append(str(evaluator.eval(value.value, module, local)))
                except _Unresolved:
                    parts.append("{" + ast.unparse(value.value) + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left, evaluator, module, local) + _text(node.right, evaluator,
                                                                  module, local)
    return ast.unparse(node)


def _jsonable(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, list):
        return all(_jsonable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _jsonable(v) for k, v in value.items())
    return False


def _name_of(node: ast.AST) -> str:
    """``argparse.BooleanOptionalAction`` -> ``BooleanOptionalAction``; ``"store_true"`` kept."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    return ast.unparse(node).split(".")[-1]


def _dest_for(options: list[str]) -> str:
    # argparse: the first long option, else the first option, dashes to underscores.
    long = [o for o in options if o.startswith("--")]
    return (long or options)[0].lstrip("-").replace("-", "_")


# --------------------------------------------------------------------------
# The two declaration shapes
# --------------------------------------------------------------------------


class _Extraction:
    def __init__(self, source: str, loader):
        self.ev = _Evaluator(loader)
        self.main = _Module(SERVER_ARGS_MODULE, ast.parse(source))
        self.ev.cache[SERVER_ARGS_MODULE] = self.main
        server_args = self.main.classes.get("ServerArgs")
        if server_args is None:
            raise ValueError("no class ServerArgs in this server_args.py")
        self.cls = _ClassRef(self.main, server_args)
        self.add_cli_args = next(
            (s for s in server_args.body
             if isinstance(s, ast.FunctionDef) and s.name == "add_cli_args"), None)
        if self.add_cli_args is None:
            raise ValueError("ServerArgs has no add_cli_args in this server_args.py")
        self.fields: dict[str, Any] = {}

    def run(self) -> FlagSet:
        local = {}
        calls = []
        for node in ast.walk(self.add_cli_args):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                    node.targets[0], ast.Name):
                local[node.targets[0].id] = node.value
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func).split(".")[-1]
                if name in ("add_argument", "add_cli_args_from_dataclass"):
                    calls.append(node)
        calls.sort(key=lambda n: (n.lineno, n.col_offset))

        fields, annotated = self._fields()
        self.fields = fields
        flags: list[FlagSpec] = []
        for call in calls:
            if ast.unparse(call.func).split(".")[-1] == "add_argument":
                spec = self._from_add_argument(call, local)
                if spec is not None:
                    flags.append(spec)
            else:
                flags.extend(self._from_dataclass(annotated))

        renames = self._from_cli_args_renames()
        for spec in flags:
            target = renames.get(spec.dest, spec.dest)
            spec.field = target if target in fields else None
        return FlagSet(flags=_without_conflicts(flags), fields={
            name: (value if value is not _MISSING and _jsonable(value) else None)
            for name, value in fields.items()}, prog=self._prog())

    # -- explicit add_argument calls -------------------------------------

    def _from_add_argument(self, call: ast.Call, local) -> FlagSpec | None:
        ev = lambda n: self.ev.eval(n, self.main, local)  # noqa: E731
        options = [a.value for a in call.args if isinstance(a, ast.Constant)]
        if not options or len(options) != len(call.args):
            return None
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        spec = FlagSpec(options=options, dest=_dest_for(options))
        for key, node in kw.items():
            if key == "dest":
                spec.dest = ev(node)
            elif key == "action":
                spec.action = _name_of(node)
            elif key == "type":
                spec.type = ast.unparse(node)
            elif key == "help":
                spec.help = _text(node, self.ev, self.main, local)
            elif key == "choices":
                self._set_choices(spec, node, local)
            elif key == "default":
                self._set_default(spec, node, local)
            elif key in ("nargs", "const", "required"):
                try:
                    setattr(spec, key, ev(node))
                except _Unresolved:
                    continue
                if key == "nargs" and spec.nargs is None:
                    spec.extra["nargs"] = None  # explicit: overrides a custom action's nargs=0
            elif key != "metavar":
                try:
                    value = ev(node)
                    if _jsonable(value):
                        spec.extra[key] = value
                except _Unresolved:
                    pass
        return spec

    def _set_choices(self, spec: FlagSpec, node: ast.AST, local=None, module=None) -> None:
        try:
            value = self.ev.eval(node, module or self.main, local)
            if isinstance(value, list) and _jsonable(value):
                spec.choices = value
                return
        except _Unresolved:
            pass
        spec.choices, spec.choices_expr = None, ast.unparse(node)

    def _set_default(self, spec: FlagSpec, node: ast.AST, local=None, module=None) -> None:
        spec.has_default = True
        # 0.5.23: default=_declared_default("name") reads the field's own default.
        if (isinstance(node, ast.Call) and _name_of(node.func) == "_declared_default"
                and node.args and isinstance(node.args[0], ast.Constant)
                and self.fields.get(node.args[0].value, _MISSING) is not _MISSING):
            node = ast.Constant(self.fields[node.args[0].value])
        try:
            value = self.ev.eval(node, module or self.main, local)
            if _jsonable(value):
                spec.default = value
                return
        except _Unresolved:
            pass
        spec.default, spec.default_expr = None, ast.unparse(node)

    # -- Annotated[T, Arg(...)] fields (0.5.14 and later) ------------------

    def _fields(self) -> tuple[dict[str, Any], list[tuple[str, ast.AnnAssign, _Module]]]:
        """ServerArgs fields -> defaults, and the annotated ones with their module."""
        fields: dict[str, Any] = {}
        annotated: list[tuple[str, ast.AnnAssign, _Module]] = []

        def take(cls: _ClassRef) -> None:
            for stmt in cls.node.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                if ast.unparse(stmt.annotation).startswith(("ClassVar", "typing.ClassVar")):
                    continue
                name = stmt.target.id
                default: Any = _MISSING
                if stmt.value is not None:
                    try:
                        default = self.ev.eval(stmt.value, cls.module)
                    except _Unresolved:
                        default = None
                fields[name] = default
                annotated.append((name, stmt, cls.module))

        # 0.5.23: ServerArgs is assembled from namespace classes named in a
        # module-level `collect_input_fields([...])` call.
        for stmt in self.main.tree.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and \
                    ast.unparse(stmt.value.func).endswith("collect_input_fields"):
                for cls in self._namespaces(stmt.value):
                    take(cls)
                order = self._positional_order()
                if order:
                    known = [n for n in order if n in fields]
                    rest = [n for n in fields if n not in set(order)]
                    by_name = {a[0]: a for a in annotated}
                    annotated = [by_name[n] for n in known + rest]
                    fields = {n: fields[n] for n in known + rest}
        take(self.cls)
        return fields, annotated

    def _namespaces(self, call: ast.Call) -> list[_ClassRef]:
        out = []
        try:
            arg = call.args[0]
            items = self.main.assigns[arg.id].elts if isinstance(arg, ast.Name) else arg.elts
        except (IndexError, KeyError, AttributeError):
            return out
        for item in items:
            try:
                ref = self.ev.eval(item, self.main)
            except _Unresolved:
                continue
            if isinstance(ref, _ClassRef):
                out.append(ref)
        return out

    def _positional_order(self) -> list[str]:
        try:
            ref = self.ev.lookup(self.main, "collect_input_fields")
        except _Unresolved:
            ref = None
        target = self.main.imports.get("collect_input_fields", (None,))[0]
        module = self.ev.module(target) if target else None
        if module is None:
            return []
        try:
            order = self.ev.lookup(module, "POSITIONAL_FIELD_ORDER")
        except _Unresolved:
            return []
        del ref
        return [n for n in order if isinstance(n, str)] if isinstance(order, list) else []

    def _from_dataclass(self, annotated) -> list[FlagSpec]:
        out = []
        for name, stmt, module in annotated:
            spec = self._from_annotation(name, stmt, module)
            if spec is not None:
                out.append(spec)
        return out

    def _from_annotation(self, name: str, stmt: ast.AnnAssign, module: _Module) -> FlagSpec | None:
        # Mirrors sglang.srt.arg_groups.arg_utils.add_cli_args_from_dataclass.
        ann = stmt.annotation
        if not (isinstance(ann, ast.Subscript) and ast.unparse(ann.value).split(".")[-1]
                in ("A", "Annotated") and isinstance(ann.slice, ast.Tuple)):
            return None
        raw_type, metas = ann.slice.elts[0], ann.slice.elts[1:]
        meta: dict[str, ast.AST] | None = None
        for m in metas:
            if isinstance(m, ast.Call) and _name_of(m.func) == "Arg":
                meta = {k.arg: k.value for k in m.keywords if k.arg}
                break
            if isinstance(m, (ast.Constant, ast.JoinedStr, ast.BinOp)):
                meta = {"help": m}
                break
        if meta is None:
            return None
        ev = lambda n: self.ev.eval(n, module)  # noqa: E731

        def opt(key, default=None):
            if key not in meta:
                return default
            try:
                return ev(meta[key])
            except _Unresolved:
                return default

        if opt("no_cli", False):
            return None
        cli_name = opt("cli_name") or "--" + name.replace("_", "-")
        spec = FlagSpec(options=[cli_name] + list(opt("aliases") or []), dest=name,
                        help=_text(meta.get("help"), self.ev, module))
        if stmt.value is not None:
            self._set_default(spec, stmt.value, module=module)
        type_parser = ast.unparse(meta["type_parser"]) if "type_parser" in meta else None
        nargs = opt("nargs")
        const = opt("const")
        required = opt("required")

        if "action" in meta:
            spec.action = _name_of(meta["action"])
            kwargs = meta.get("action_kwargs")
            if isinstance(kwargs, ast.Dict):
                for key, value in zip(kwargs.keys, kwargs.values):
                    key = key.value if isinstance(key, ast.Constant) else None
                    if key == "type":
                        spec.type = ast.unparse(value)
                    elif key == "choices":
                        self._set_choices(spec, value, module=module)
                    elif key is not None:
                        try:
                            value = ev(value)
                        except _Unresolved:
                            continue
                        if key in ("nargs", "const", "required"):
                            setattr(spec, key, value)
                        elif _jsonable(value):
                            spec.extra[key] = value
            return spec

        inner = _unwrap_optional(raw_type)
        literal = _literal_values(inner, ev)
        if literal is not None:
            if "choices" in meta:
                self._set_choices(spec, meta["choices"], module=module)
            if not spec.choices and not spec.choices_expr:
                spec.choices = literal
            first = type(literal[0]).__name__ if literal else "str"
            spec.type = type_parser or (first if first in ("int", "float") else "str")
            spec.const = const
            return spec
        elem = _list_element(inner)
        if elem is not None and type_parser is None:
            spec.type = elem
            spec.nargs = nargs or "+"
            if "choices" in meta:
                self._set_choices(spec, meta["choices"], module=module)
            spec.const = const
            return spec
        if isinstance(inner, ast.Name) and inner.id == "bool":
            spec.action = "store_true"
            return spec
        spec.type = type_parser or (inner.id if isinstance(inner, ast.Name)
                                    and inner.id in ("int", "float") else "str")
        if "choices" in meta:
            self._set_choices(spec, meta["choices"], module=module)
        spec.nargs = nargs
        spec.const = const
        spec.required = required is True or (required is None and stmt.value is None)
        return spec

    # -- the rest ----------------------------------------------------------

    def _from_cli_args_renames(self) -> dict[str, str]:
        """0.5.9: ``args.tp_size = args.tensor_parallel_size`` -> {dest: field}."""
        renames = {}
        for stmt in self.cls.node.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "from_cli_args":
                for node in ast.walk(stmt):
                    if (isinstance(node, ast.Assign) and len(node.targets) == 1
                            and isinstance(node.targets[0], ast.Attribute)
                            and isinstance(node.value, ast.Attribute)):
                        renames[node.value.attr] = node.targets[0].attr
        return renames

    def _prog(self) -> str | None:
        func = self.main.functions.get("prepare_server_args")
        for node in ast.walk(func) if func else ():
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("ArgumentParser"):
                for k in node.keywords:
                    if k.arg == "prog" and isinstance(k.value, ast.Constant):
                        return k.value.value
        return None


def _unwrap_optional(node: ast.AST) -> ast.AST:
    def is_none(n):
        return isinstance(n, ast.Constant) and n.value is None
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value).split(".")[-1]
        if head == "Optional":
            return node.slice
        if head == "Union" and isinstance(node.slice, ast.Tuple):
            rest = [e for e in node.slice.elts if not is_none(e)]
            if len(rest) == 1 and len(node.slice.elts) == 2:
                return rest[0]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        if is_none(node.right) and not isinstance(node.left, ast.BinOp):
            return node.left
        if is_none(node.left) and not isinstance(node.right, ast.BinOp):
            return node.right
    return node


def _literal_values(node: ast.AST, ev) -> list | None:
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).split(".")[-1] == "Literal":
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        try:
            return [ev(e) for e in elts]
        except _Unresolved:
            return None
    return None


def _list_element(node: ast.AST) -> str | None:
    """``List[int]`` -> ``"int"``; None when not a list type."""
    head = node.value if isinstance(node, ast.Subscript) else node
    name = ast.unparse(head).split(".")[-1]
    if name == "List" or (name == "list" and isinstance(node, ast.Subscript)):
        elem = node.slice if isinstance(node, ast.Subscript) else None
        if isinstance(elem, ast.Name) and elem.id in ("int", "float"):
            return elem.id
        return "str"
    return None


def _without_conflicts(flags: list[FlagSpec]) -> list[FlagSpec]:
    # argparse would refuse a second declaration of an option string; keep the first.
    seen: set[str] = set()
    out = []
    for spec in flags:
        spec.options = [o for o in spec.options if o not in seen]
        if spec.options:
            seen.update(spec.all_options)
            out.append(spec)
    return out


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def extract_flags(source: str, modules: Mapping[str, str] | Callable[[str], str | None]
                  | None = None) -> FlagSet:
    """
    Read the flag set out of the text of an sglang ``server_args.py``.

    + source: the text of ``sglang/srt/server_args.py``
    + modules: other sglang modules by dotted name (a mapping, or a function
      returning the text or None), to follow imports of choices and of the
      0.5.23 field namespaces; without it only this file is read

    **Example:**

    .. code:: python

        flags = extract_flags(Path("server_args.py").read_text())
    """
    def loader(name: str):
        if modules is None:
            return None
        if callable(modules):
            found = modules(name)
            if isinstance(found, tuple):
                return found
            return None if found is None else (found, False)
        if name in modules:
            return modules[name], False
        if f"{name}.__init__" in modules:
            return modules[f"{name}.__init__"], True
        return None

    flagset = _Extraction(source, loader).run()
    flagset.source_sha256 = hashlib.sha256(source.encode()).hexdigest()
    return flagset


def _package_loader(root: Path, read: dict[str, str]):
    """Load modules from a site-packages style ``root``, recording what was read."""
    def load(name: str):
        base = root.joinpath(*name.split("."))
        for path, is_package in ((base.with_suffix(".py"), False), (base / "__init__.py", True)):
            if path.is_file():
                data = path.read_bytes()
                read[str(path.relative_to(root))] = hashlib.sha256(data).hexdigest()
                return data.decode("utf-8", "replace"), is_package
        return None
    return load


def default_cache_dir() -> Path:
    """
    ``$SGLFLEET_CACHE``, else ``~/.cache/sglfleet``: the stand-in's cache on a host.

    The controller always passes ``sglfleet.cache_dir()``; this module is shipped to
    hosts beside the stand-in, where there is no checkout (and no ``sglfleet``) to
    hold a ``.cache``.
    """
    env = os.environ.get("SGLFLEET_CACHE")
    if env:
        return Path(env)
    try:
        return Path.home() / ".cache" / "sglfleet"
    except RuntimeError:  # a system user without a home
        return Path("/var/cache/sglfleet")


def load_flags(server_args_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None
               ) -> FlagSet:
    """
    The flag set of an installed sglang, cached as JSON keyed by the file's sha256.

    + server_args_path: ``.../site-packages/sglang/srt/server_args.py``
    + cache_dir: where the cache lives (default ``$SGLFLEET_CACHE`` or
      ``~/.cache/sglfleet``); an unwritable cache is not an error

    **Example:**

    .. code:: python

        flags = load_flags(sglang_file("0.5.9", "sglang/srt/server_args.py"))
    """
    path = Path(server_args_path)
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    # sglang/srt/server_args.py -> the directory that holds the sglang package
    root = path.resolve().parents[2]
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    entry = cache / "flags" / f"{sha}-v{EXTRACTOR_VERSION}.json"
    try:
        cached = json.loads(entry.read_text())
        if all(_sha_of(root / rel) == digest for rel, digest in cached["deps"].items()):
            return FlagSet.from_json(cached["flagset"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    read: dict[str, str] = {}
    flagset = extract_flags(data.decode("utf-8"), _package_loader(root, read))
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        partial = entry.with_name(f".{entry.name}.{os.getpid()}")
        partial.write_text(json.dumps({"deps": read, "flagset": flagset.to_json()}))
        partial.replace(entry)
    except OSError:
        pass
    return flagset


def _sha_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


# --------------------------------------------------------------------------
# A parser equivalent to SGLang's
# --------------------------------------------------------------------------


def loads(value: str) -> Any:
    """``type=json.loads`` (same name, so argparse says "invalid loads value")."""
    return json.loads(value)


def json_list_type(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(
            f"Invalid JSON list: {value}. Please provide a valid JSON list.")


def nullable_str(val: str) -> str | None:
    if not val or val == "None":
        return None
    return val


def human_readable_int(value: str) -> int:
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'.")
            return int(number) * iec[suffix]
        return int(float(number) * si[suffix])
    return int(value)


_TYPES: dict[str, Callable] = {
    "str": str, "int": int, "float": float, "json.loads": loads, "orjson.loads": loads,
    "json_list_type": json_list_type, "nullable_str": nullable_str,
    "human_readable_int": human_readable_int,
}


def _deprecated_warning(message: str) -> None:
    logger.warning(message)


class DeprecatedAction(argparse.Action):
    """A retired flag: warns (or stops, with ``error_message``), stores nothing."""

    def __init__(self, option_strings, dest, error_message=None, nargs=0, **kwargs):
        self.error_message = error_message
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if self.error_message is not None:
            parser.error(self.error_message)
        _deprecated_warning(f"The command line argument '{option_string}' is deprecated "
                            "and will be removed in future versions.")


class DeprecatedStoreTrueAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True,
                 default=False, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default,
                         **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        hint = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _deprecated_warning(f"'{option_string}' is deprecated and will be removed in a "
                            f"future release.{hint}")
        setattr(namespace, self.dest, True)


class DeprecatedStoreConstAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, const_value=None, nargs=0,
                 default=None, **kwargs):
        self.new_flag, self.const_value = new_flag, const_value
        super().__init__(option_strings, dest, nargs=nargs, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        hint = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _deprecated_warning(f"'{option_string}' is deprecated and will be removed in a "
                            f"future release.{hint}")
        setattr(namespace, self.dest, self.const_value)


class DeprecatedAliasStoreAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        hint = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _deprecated_warning(f"'{option_string}' is deprecated and will be removed in a "
                            f"future release.{hint}")
        setattr(namespace, self.dest, values)


class LoRAPathAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        paths = []
        for value in values or []:
            value = value.strip()
            paths.append(json.loads(value) if value.startswith("{") and value.endswith("}")
                         else value)
        setattr(namespace, self.dest, paths)


_ACTIONS: dict[str, Any] = {
    "BooleanOptionalAction": argparse.BooleanOptionalAction,
    "DeprecatedAction": DeprecatedAction,
    "DeprecatedStoreTrueAction": DeprecatedStoreTrueAction,
    "DeprecatedStoreConstAction": DeprecatedStoreConstAction,
    "DeprecatedAliasStoreAction": DeprecatedAliasStoreAction,
    "LoRAPathAction": LoRAPathAction,
}
# argparse's own actions whose flag takes no value
_NO_VALUE_ACTIONS = {"store_true", "store_false", "store_const", "append_const", "count",
                     "help", "version"}
# Every action whose flag is written without a value, sglang's own among them
# (BooleanOptionalAction takes --no-X instead): what the lint checks extra_flags by.
NO_VALUE_ACTIONS = _NO_VALUE_ACTIONS | {"BooleanOptionalAction", "DeprecatedAction", "DeprecatedStoreTrueAction",
                                        "DeprecatedStoreConstAction"}


def build_parser(flagset: FlagSet, prog: str | None = None) -> argparse.ArgumentParser:
    """
    An ``argparse`` parser that accepts exactly the flags of ``flagset``.

    Unknown flags, bad choices and missing required flags exit 2 with
    argparse's own message, as SGLang's parser does. Choices or types this
    module could not resolve accept any value.

    + flagset: from ``extract_flags`` or ``load_flags``
    + prog: the program name in messages (default: the release's own, else argparse's)

    **Example:**

    .. code:: python

        args = build_parser(flags, prog="launch_server.py").parse_args(sys.argv[1:])
    """
    parser = argparse.ArgumentParser(prog=prog or flagset.prog)
    for spec in flagset.flags:
        kwargs: dict[str, Any] = {"dest": spec.dest, "help": spec.help.replace("%", "%%")}
        action = _ACTIONS.get(spec.action, spec.action)
        known = spec.action in _ACTIONS or spec.action in _NO_VALUE_ACTIONS or spec.action in (
            "store", "append", "extend")
        if not known:
            action = "store"  # an action this module does not know: keep its value as given
        kwargs["action"] = action
        if spec.has_default:
            kwargs["default"] = spec.default
        if spec.required:
            kwargs["required"] = True
        if spec.action in ("store_const", "append_const") or spec.const is not None:
            kwargs["const"] = spec.const
        if spec.action not in _NO_VALUE_ACTIONS and spec.action != "BooleanOptionalAction":
            if spec.type is not None and spec.action not in ("DeprecatedAction",):
                kwargs["type"] = _TYPES.get(spec.type, str)
            if spec.choices is not None:
                kwargs["choices"] = spec.choices
            if spec.nargs is not None:
                kwargs["nargs"] = spec.nargs
        if spec.action in _ACTIONS and spec.action != "BooleanOptionalAction":
            kwargs.update(spec.extra)
        if spec.action == "store_true" or spec.action == "store_false":
            kwargs.pop("const", None)
        parser.add_argument(*spec.options, **kwargs)
    return parser
