"""The statement patch engine: replace one statement of a class or a method, found by parsing.

Pure: bytes in, bytes out, or ``PatchRefused`` with a one-line reason. The
statement to replace is given as source text and found by comparing syntax
trees (``ast.dump``), so formatting, comments and line breaks of the file do
not matter, and a statement that differs in any token does not match. It is
searched only directly in the body of the anchor: a top-level class, one
method of it, or a top-level function. None found or more than one is a refusal.

The replacement keeps every byte outside the statement's lines. It sits between
two marker comments and carries the replaced lines as ``# |`` comments, so a
later run recognises it, a changed patch replaces it, and ``revert`` gives back
the original bytes.

**Example:**

.. code:: python

    change = Replacement("sm120_symm_mem", "TorchSymmMemCommunicator", "__init__",
                         old="if x < 9:\\n    return\\n", new="if x not in SIZES:\\n    return\\n")
    new = apply(Path("torch_symm_mem.py").read_bytes(), change)
"""

from __future__ import annotations

import ast
import hashlib
import textwrap
from dataclasses import dataclass, field

from sglfleet.artifacts.patcher import PatchRefused, _common_eol, _encoding, _find_class, _parse, _top_level_names

KEPT = "# | "  # the prefix of a replaced line, kept as a comment inside the block
_TAG = "replaced the lines marked '# |'"


@dataclass(frozen=True)
class Replacement:
    """One statement of ``target`` (or of its method ``function``, or of the top-level ``function``) replaced by ``new``."""

    name: str               # written into the markers
    target: str | None      # the top-level class, or None for a top-level function
    function: str | None    # a method directly in its body, or None for the class body itself
    old: str                # the statement as source text
    new: str                # what replaces it, one statement or more
    digest: str = field(default="")

    def __post_init__(self):
        old, new = textwrap.dedent(self.old).strip("\n"), textwrap.dedent(self.new).strip("\n")
        try:
            tree, replacement = ast.parse(old), ast.parse(new)
        except SyntaxError as error:
            raise ValueError(f"{self.name}: the statement text does not parse: {error.msg} (line {error.lineno})")
        if len(tree.body) != 1:
            raise ValueError(f"{self.name}: `replace` must be exactly one statement, found {len(tree.body)}")
        if not replacement.body:
            raise ValueError(f"{self.name}: `with` holds no statement")
        object.__setattr__(self, "old", old)
        object.__setattr__(self, "new", new)
        if not self.digest:
            text = f"{self.target}\0{self.function}\0{old}\0{new}"
            object.__setattr__(self, "digest", hashlib.sha256(text.encode()).hexdigest()[:12])

    @property
    def where(self) -> str:
        if self.target is None:
            return f"function {self.function}"
        return f"{self.target}.{self.function}" if self.function else f"class {self.target}"

    @property
    def begin_prefix(self) -> str:
        return f"# >>> sglfleet patch {self.name} "

    @property
    def begin(self) -> str:
        return f"{self.begin_prefix}{self.digest}: {_TAG}, `sglfleet patch revert --all` restores them"

    @property
    def end(self) -> str:
        return f"# <<< sglfleet patch {self.name}"


def is_replacement_marker(line: bytes) -> bool:
    """Whether a begin marker line is a replacement's (rather than inserted methods')."""
    return _TAG.encode() in line


def scope(tree: ast.Module, target: str | None,
          function: str | None) -> ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef:
    """
    The anchor's node: the top-level class ``target``, or its method ``function``;
    with no ``target``, the top-level function ``function``.

    + tree: the parsed file
    + target, function: the anchor

    **Example:**

    .. code:: python

        node = scope(ast.parse(source), "ServerArgs", None)
        route = scope(ast.parse(source), None, "server_info")   # async def server_info() at the top level
    """
    if target is None:
        return _find_function(tree, function)
    cls = _find_class(tree, target)
    if function is None:
        return cls
    found = [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    if not found:
        raise PatchRefused(f"anchor missing: class {target} defines no method {function}")
    if len(found) > 1:
        raise PatchRefused(f"anchor ambiguous: class {target} defines {function} {len(found)} times "
                           f"(lines {', '.join(str(n.lineno) for n in found)})")
    return found[0]


def _find_function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    # As a class anchor: exactly one, at the top level, and nothing else at the top level binds its name.
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if not found:
        raise PatchRefused(f"anchor missing: no top-level function {name} in the file; is this the right file and version?")
    if len(found) > 1:
        raise PatchRefused(f"anchor ambiguous: {len(found)} top-level functions named {name} "
                           f"(lines {', '.join(str(n.lineno) for n in found)})")
    for node in tree.body:
        if node is not found[0] and name in _top_level_names(node):
            raise PatchRefused(f"line {node.lineno} rebinds {name} at the top level; expected exactly one function")
    return found[0]


def apply(source: bytes, change: Replacement) -> bytes:
    """
    Return ``source`` with the statement replaced; ``source`` itself when the block is current.

    + source: the file's exact bytes
    + change: the ``Replacement``

    **Example:**

    .. code:: python

        new = apply(old, change)
        assert revert(new, change) == old
    """
    original = revert(source, change)
    node = _statement(_parse(original), change)
    lines = original.splitlines(keepends=True)
    first, last = node.lineno - 1, node.end_lineno - 1
    indent = lines[first][:node.col_offset]
    if indent.strip():
        raise PatchRefused(f"the statement at line {node.lineno} shares its line with another; patch by hand")
    encoding = _encoding(original)
    kept = [line.rstrip(b"\r\n") for line in lines[first:last + 1]]
    eols = [line[len(content):] for line, content in zip(lines[first:last + 1], kept)]
    eol = eols[-1] or _common_eol(lines)
    try:
        new_lines = [(indent + line.encode(encoding)) if line.strip() else b""
                     for line in change.new.splitlines()]
        begin, end = change.begin.encode(encoding), change.end.encode(encoding)
    except UnicodeEncodeError as error:
        raise PatchRefused(f"the patch text cannot be written in the file's encoding {encoding}: {error}")
    block = indent + begin + eol
    block += b"".join(indent + KEPT.encode() + content + (line_eol or eol) for content, line_eol in zip(kept, eols))
    block += b"".join(line + eol for line in new_lines)
    block += indent + end + eols[-1]
    start = sum(len(line) for line in lines[:first])
    stop = sum(len(line) for line in lines[:last + 1])
    result = original[:start] + block + original[stop:]
    try:
        compile(result, f"<{change.where} patched>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        raise PatchRefused(f"the patched file would not compile: {error}")
    if revert(result, change) != original:
        raise PatchRefused("the patched file would not revert to the original bytes; file left as it was")
    return result


def revert(source: bytes, change: Replacement) -> bytes:
    """
    Return ``source`` with the replaced lines back in place of the block: the bytes before ``apply``.

    + source: the file's exact bytes
    + change: the ``Replacement`` (only its name is used)

    **Example:**

    .. code:: python

        original = revert(path.read_bytes(), change)
    """
    lines = source.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.strip().startswith(change.begin_prefix.encode())]
    ends = [i for i, line in enumerate(lines) if line.strip() == change.end.encode()]
    if not begins and not ends:
        return source
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise PatchRefused(
            f"the sglfleet block of patch {change.name} is damaged ({len(begins)} begin and "
            f"{len(ends)} end markers); restore the file from the package or fix the markers by hand"
        )
    begin, end = begins[0], ends[0]
    indent = lines[begin][:len(lines[begin]) - len(lines[begin].lstrip())]
    prefix = indent + KEPT.encode()
    kept = []
    for line in lines[begin + 1:end]:
        if not line.startswith(prefix):
            break
        kept.append(line)
    if not kept:
        raise PatchRefused(f"the sglfleet block of patch {change.name} is damaged (no replaced lines "
                           "kept in it); restore the file from the package")
    end_line = lines[end]
    end_eol = end_line[len(end_line.rstrip(b"\r\n")):]
    restored = [line[len(prefix):] for line in kept]
    restored[-1] = restored[-1].rstrip(b"\r\n") + end_eol
    start = sum(len(line) for line in lines[:begin])
    stop = sum(len(line) for line in lines[:end + 1])
    return source[:start] + b"".join(restored) + source[stop:]


def _statement(tree: ast.Module, change: Replacement) -> ast.stmt:
    node = scope(tree, change.target, change.function)
    wanted = ast.dump(ast.parse(change.old).body[0])
    found = [stmt for stmt in node.body if ast.dump(stmt) == wanted]
    summary = change.old.splitlines()[0].strip()
    if not found:
        raise PatchRefused(f"anchor missing: no statement `{summary}` directly in {change.where}")
    if len(found) > 1:
        raise PatchRefused(f"anchor ambiguous: {len(found)} statements `{summary}` in {change.where} "
                           f"(lines {', '.join(str(n.lineno) for n in found)})")
    stmt = found[0]
    siblings = node.body
    i = siblings.index(stmt)
    if (i and siblings[i - 1].end_lineno >= stmt.lineno) or (
            i + 1 < len(siblings) and siblings[i + 1].lineno <= stmt.end_lineno):
        raise PatchRefused(f"the statement at line {stmt.lineno} shares its line with another; patch by hand")
    return stmt
