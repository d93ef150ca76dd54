"""The class-body patch engine: put methods inside one class of a Python file.

Pure: bytes in, bytes out, or ``PatchRefused`` with a one-line reason. The
class is found by parsing, never by searching text, and the methods go after
the last statement of its body, at the body's own indentation. Every byte
outside the inserted lines is kept (line endings, encoding, a missing final
newline). The inserted lines sit between two marker comments, so a later run
recognises them: the same text again changes nothing, a changed patch replaces
them, and ``revert`` takes them out to give back the original bytes.

Shadow and conflict rule, for each method of the patch:

- defined by a ``def`` directly in the class body: present, skipped;
- bound in the class body any other way (assignment, import, a ``def`` under
  ``if``/``try``, a nested class): refused, the patch would shadow it;
- assigned onto the class outside its body (``Target.name = ...``,
  ``setattr(Target, "name", ...)``, ``del``): refused, that would replace the
  patched method when the module is imported;
- defined by a base class of the same file: refused, the patch would shadow
  the inherited method;
- a module-level function of the same name (an earlier patch appended at the
  end of the file, say): left alone, it is not an attribute of the class.

**Example:**

.. code:: python

    patch = load_patch()
    new = apply(Path("kimi_k25.py").read_bytes(), patch)
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import io
import re
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sglfleet import FILES

DEFAULT_PATCH = FILES / "patches" / "kimi_k25_eagle3.py"

_EOLS = (b"\r\n", b"\n", b"\r")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class PatchRefused(Exception):
    """The patch cannot be applied safely; the message is one line that says why."""


@dataclass(frozen=True)
class Method:
    name: str
    # (depth in indentation units, rest of the line); depth None keeps the
    # line verbatim (the inside of a multi-line string).
    lines: tuple[tuple[int | None, str], ...]


@dataclass(frozen=True)
class Patch:
    name: str       # the patch file's stem, written into the markers
    target: str     # the exact name of the top-level class to patch
    methods: tuple[Method, ...]
    digest: str     # short hash of the methods' text, written into the begin marker

    @property
    def method_names(self) -> list[str]:
        return [method.name for method in self.methods]

    @property
    def begin_prefix(self) -> str:
        return f"# >>> sglfleet patch {self.name} "

    @property
    def begin(self) -> str:
        return f"{self.begin_prefix}{self.digest}: managed block, `sglfleet patch revert` removes it"

    @property
    def end(self) -> str:
        return f"# <<< sglfleet patch {self.name}"


def load_patch(path: Path | str | None = None) -> Patch:
    """
    Read a patch file: one top-level class, named as the target, holding the methods.

    + path: the patch file; default ``files/patches/kimi_k25_eagle3.py``

    **Example:**

    .. code:: python

        patch = load_patch()
        patch.target  # "KimiK25ForConditionalGeneration"
    """
    path = Path(path or DEFAULT_PATCH)
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    if len(classes) != 1:
        raise ValueError(f"{path}: needs exactly one top-level class (the target), found {len(classes)}")
    lines = text.splitlines()
    interior = _string_interior_rows(text)
    functions = [n for n in classes[0].body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not functions:
        raise ValueError(f"{path}: class {classes[0].name} holds no methods to insert")
    unit = _indent_of(lines[functions[0].lineno - 1])
    methods = []
    for function in functions:
        first = min([function.lineno] + [d.lineno for d in function.decorator_list])
        body = []
        for row in range(first, function.end_lineno + 1):
            line = lines[row - 1]
            if row in interior:
                body.append((None, line))
            elif not line.strip():
                body.append((0, ""))
            else:
                depth = 0
                while line.startswith(unit * (depth + 1)):
                    depth += 1
                body.append((depth - 1, line[len(unit) * depth:]))
        methods.append(Method(function.name, tuple(body)))
    digest = hashlib.sha256(repr(methods).encode()).hexdigest()[:12]
    return Patch(path.stem, classes[0].name, tuple(methods), digest)


def apply(source: bytes, patch: Patch) -> bytes:
    """
    Return ``source`` with the patch's missing methods inside the target class.

    Returns ``source`` itself when nothing is missing and the block is current.

    + source: the file's exact bytes
    + patch: from ``load_patch``

    **Example:**

    .. code:: python

        new = apply(old, load_patch())
        changed = new != old
    """
    original = revert(source, patch)
    tree = _parse(original)
    target = _find_class(tree, patch.target)
    missing = _missing(target, patch)
    _check_conflicts(tree, target, patch, missing)
    if not missing:
        return original

    lines = original.splitlines(keepends=True)
    header = lines[target.body[0].lineno - 1]
    indent = header[:target.body[0].col_offset]
    if indent.strip():
        raise PatchRefused(f"class {patch.target} has its body on its header line; cannot insert methods")
    encoding = _encoding(original)
    unit = indent.decode("ascii")

    anchor = target.body[-1].end_lineno - 1  # the last line of the class body's last statement
    anchor_line = lines[anchor]
    content = anchor_line.rstrip(b"\r\n")
    eol = anchor_line[len(content):] or _common_eol(lines)

    block = ["", unit + patch.begin]
    for i, method in enumerate(m for m in patch.methods if m.name in missing):
        if i:
            block.append("")
        for depth, text in method.lines:
            block.append(text if depth is None else (unit * (depth + 1) + text if text else ""))
    block.append(unit + patch.end)
    try:
        inserted = b"".join(eol + line.encode(encoding) for line in block)
    except UnicodeEncodeError as error:
        raise PatchRefused(f"the patch text cannot be written in the file's encoding {encoding}: {error}")

    offset = sum(len(line) for line in lines[:anchor]) + len(content)
    result = original[:offset] + inserted + original[offset:]
    _check_result(result, original, patch, target.lineno)
    return result


def revert(source: bytes, patch: Patch) -> bytes:
    """
    Return ``source`` without the patch's marked block: the bytes before ``apply``.

    + source: the file's exact bytes
    + patch: from ``load_patch``

    **Example:**

    .. code:: python

        assert revert(apply(old, patch), patch) == old
    """
    lines = source.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.strip().startswith(patch.begin_prefix.encode())]
    ends = [i for i, line in enumerate(lines) if line.strip() == patch.end.encode()]
    if not begins and not ends:
        return source
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise PatchRefused(
            f"the sglfleet block of patch {patch.name} is damaged ({len(begins)} begin and "
            f"{len(ends)} end markers); restore the file from the package or fix the markers by hand"
        )
    begin, end = begins[0], ends[0]
    if begin < 2 or lines[begin - 1] not in _EOLS:
        raise PatchRefused(
            f"the sglfleet block of patch {patch.name} is damaged (no blank line before its begin "
            "marker); restore the file from the package"
        )
    before = lines[begin - 2]
    start = sum(len(line) for line in lines[:begin - 1]) - (len(before) - len(before.rstrip(b"\r\n")))
    stop = sum(len(line) for line in lines[:end]) + len(lines[end].rstrip(b"\r\n"))
    return source[:start] + source[stop:]


def missing_methods(source: bytes, patch: Patch) -> list[str]:
    """
    Name the patch's methods that the target class body does not define.

    + source: the file's exact bytes
    + patch: from ``load_patch``

    **Example:**

    .. code:: python

        ok = not missing_methods(path.read_bytes(), load_patch())
    """
    return [name for name in patch.method_names
            if name not in _defined(_find_class(_parse(source), patch.target))]


def unified_diff(old: bytes, new: bytes, path: str) -> str:
    """
    A unified diff from ``old`` to ``new``, or "" when they are the same.

    + old, new: the file's bytes before and after
    + path: the name shown in the ``---``/``+++`` lines

    **Example:**

    .. code:: python

        print(unified_diff(old, apply(old, patch), "kimi_k25.py"), end="")
    """
    if old == new:
        return ""
    try:
        encoding = _encoding(old)
    except PatchRefused:
        encoding = "utf-8"

    def lines(data: bytes) -> list[str]:
        split = re.split(r"\r\n|\r|\n", data.decode(encoding, errors="replace"))
        return split[:-1] if split[-1] == "" else split  # no line after the final newline

    diff = difflib.unified_diff(lines(old), lines(new), f"a/{path.lstrip('/')}", f"b/{path.lstrip('/')}", lineterm="")
    return "".join(line + "\n" for line in diff)


def _parse(source: bytes) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as error:
        raise PatchRefused(f"the file does not parse: line {error.lineno}: {error.msg}")
    except ValueError as error:  # null bytes
        raise PatchRefused(f"the file does not parse: {error}")


def _find_class(tree: ast.Module, name: str) -> ast.ClassDef:
    found = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == name]
    if not found:
        raise PatchRefused(f"no class {name} in the file; is this the right file and version?")
    if len(found) > 1:
        where = ", ".join(str(node.lineno) for node in sorted(found, key=lambda n: n.lineno))
        raise PatchRefused(f"{len(found)} classes named {name} (lines {where}); expected exactly one")
    if found[0] not in tree.body:
        raise PatchRefused(f"class {name} at line {found[0].lineno} is not at the top level of the file")
    for node in tree.body:
        if node is not found[0] and name in _top_level_names(node):
            raise PatchRefused(f"line {node.lineno} rebinds {name} at the top level; expected exactly one class")
    return found[0]


def _top_level_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return set()


def _defined(target: ast.ClassDef) -> set[str]:
    return {n.name for n in target.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _missing(target: ast.ClassDef, patch: Patch) -> list[str]:
    defined = _defined(target)
    return [name for name in patch.method_names if name not in defined]


def _check_conflicts(tree: ast.Module, target: ast.ClassDef, patch: Patch, missing: list[str]) -> None:
    names = set(patch.method_names)
    direct = {id(n) for n in target.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for name, node in _class_scope_bindings(target):
        if name in names and id(node) not in direct:
            raise PatchRefused(
                f"class {patch.target} binds {name} at line {node.lineno} other than by a method "
                "definition; the patch would shadow it (remove it or patch by hand)"
            )
    for node in ast.walk(tree):
        name = _assigned_onto(node, patch.target)
        if name in names:
            raise PatchRefused(
                f"line {node.lineno} sets {patch.target}.{name} outside the class; it would replace "
                "the patched method at import (remove that line, then re-run)"
            )
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    seen, bases = set(), [b.id for b in target.bases if isinstance(b, ast.Name)]
    while bases:
        base = classes.get(bases.pop())
        if base is None or base.name in seen:
            continue
        seen.add(base.name)
        for name in missing:
            if name in _defined(base):
                raise PatchRefused(
                    f"{patch.target} inherits {name} from {base.name} (line {base.lineno}); "
                    "the patch would shadow it"
                )
        bases.extend(b.id for b in base.bases if isinstance(b, ast.Name))


def _class_scope_bindings(target: ast.ClassDef):
    """Yield (name, node) for every name the class body binds in its own scope."""
    stack = list(target.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name, node
            continue  # its body is another scope
        if isinstance(node, _SCOPES):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            yield node.id, node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                yield (alias.asname or alias.name).split(".")[0], node
        stack.extend(ast.iter_child_nodes(node))


def _assigned_onto(node: ast.AST, target: str) -> str | None:
    """The attribute name when ``node`` sets or deletes ``target.<name>``, else None."""
    if (isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del))
            and isinstance(node.value, ast.Name) and node.value.id == target):
        return node.attr
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr") and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name) and node.args[0].id == target
            and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        return node.args[1].value
    return None


def _check_result(result: bytes, original: bytes, patch: Patch, class_line: int) -> None:
    try:
        compile(result, f"<{patch.target} patched>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        raise PatchRefused(f"the patched file would not compile: {error}")
    target = _find_class(_parse(result), patch.target)
    if target.lineno != class_line or _missing(target, patch):
        raise PatchRefused(f"after patching, class {patch.target} still lacks methods; file left as it was")
    if revert(result, patch) != original:
        raise PatchRefused("the patched file would not revert to the original bytes; file left as it was")


def _encoding(source: bytes) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError as error:
        raise PatchRefused(f"the file does not parse: {error}")
    return "utf-8" if encoding == "utf-8-sig" else encoding


def _common_eol(lines: list[bytes]) -> bytes:
    counts = Counter(line[len(line.rstrip(b"\r\n")):] for line in lines)
    counts.pop(b"", None)
    return counts.most_common(1)[0][0] if counts else b"\n"


def _indent_of(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _string_interior_rows(text: str) -> set[int]:
    """Rows inside a multi-line string, whose leading whitespace is content."""
    kinds = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    rows = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in kinds and token.end[0] > token.start[0]:
            rows.update(range(token.start[0] + 1, token.end[0] + 1))
    return rows
