"""Patch sets: declared fixes to sglang's files, each for named versions, applied in order.

A patch set is a TOML file under ``files/patches/`` (or an operator's folder,
``patch_sets_dir``). It says what it fixes and where the fix comes from, the
sglang versions it is for, the file and the anchor it changes (a top-level
class, one method of it, or a top-level function), the change, how to check it applied, and how to
recognise that upstream already has it. The file is data: nothing in it runs
on the controller. See ``docs/patches.md`` for the format.

Pure: the patch engines (``patcher`` for methods, ``replacer`` for
statements) do the work; this module reads the declarations, decides each
set's status on a file (applies, upstream, not for this version) and applies
a list of sets to one file, starting from the file without any sglfleet block,
so a set that was removed leaves nothing behind.

**Example:**

.. code:: python

    sets = for_file(load_sets(), "0.5.9", "sglang/srt/models/kimi_k25.py")
    new, outcomes = apply_sets(path.read_bytes(), sets)
"""

from __future__ import annotations

import ast
import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from sglfleet import FILES, PROJECT_ROOT
from sglfleet.artifacts import patcher, replacer
from sglfleet.artifacts.patcher import Patch, PatchRefused

SHIPPED = FILES / "patches"
KEYS = {"summary", "upstream", "versions", "file", "anchor", "change", "verify", "upstream_has"}
APPLIES, UPSTREAM, NOT_FOR = "applies", "upstream", "not for this version"
_MARKER = re.compile(rb"^\s*# >>> sglfleet patch (\S+) ")


class PatchSetError(ValueError):
    """A patch set file that does not parse or declares something impossible; one line."""


@dataclass(frozen=True)
class Check:
    """What the anchor holds: methods it ``defines`` (a class anchor), text it ``contains`` (spaces ignored)."""

    defines: tuple[str, ...] = ()
    contains: tuple[str, ...] = ()

    def failures(self, source: bytes, target: str | None, function: str | None) -> list[str]:
        """What of the check ``source`` fails; raises ``PatchRefused`` when the anchor is not there."""
        tree = patcher._parse(source)
        node = replacer.scope(tree, target, function)
        defined = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        text = ast.get_source_segment(source.decode(patcher._encoding(source), errors="replace"), node) or ""
        return ([f"defines no {name}" for name in self.defines if name not in defined]
                + [f"lacks `{snippet}`" for snippet in self.contains if not _holds(text, snippet)])


@dataclass(frozen=True)
class PatchSet:
    """One declared patch set (see the module's docstring)."""

    name: str
    path: Path
    summary: str
    upstream: str                 # a PR or commit, or "local"
    versions: tuple[str, ...]     # the sglang releases it is for, checked against their wheels
    file: str                     # the file it changes, as the wheel names it
    target: str | None            # the anchor: a top-level class ...
    function: str | None          # ... or one method of it; with no class, a top-level function
    changes: tuple[Patch | replacer.Replacement, ...]
    verify: Check
    upstream_has: Check

    @property
    def digest(self) -> str:
        """What the set writes, hashed: one change's own digest (the KimiK25 methods keep theirs)."""
        if len(self.changes) == 1:
            return self.changes[0].digest
        return hashlib.sha256("\n".join(c.digest for c in self.changes).encode()).hexdigest()[:12]

    @property
    def anchor(self) -> str:
        if self.target is None:
            return f"function {self.function}"
        return f"{self.target}.{self.function}" if self.function else f"class {self.target}"

    def has_upstream(self, source: bytes) -> bool:
        """Whether ``source`` (without this set's blocks) already has the fix."""
        try:
            return not self.upstream_has.failures(source, self.target, self.function)
        except PatchRefused:
            return False

    def apply(self, source: bytes) -> bytes:
        """``source`` with every change of the set, checked; ``PatchRefused`` names the set."""
        try:
            for change in self.changes:
                source = (patcher if isinstance(change, Patch) else replacer).apply(source, change)
            failures = self.verify.failures(source, self.target, self.function)
        except PatchRefused as refusal:
            raise PatchRefused(f"patch set {self.name}: {refusal}") from None
        if failures:
            raise PatchRefused(f"patch set {self.name}: applied, but {self.anchor} {'; '.join(failures)}")
        return source

    def revert(self, source: bytes) -> bytes:
        """``source`` without this set's blocks."""
        for change in reversed(self.changes):
            source = (patcher if isinstance(change, Patch) else replacer).revert(source, change)
        return source


def load_set(path: Path | str) -> PatchSet:
    """
    Read one patch set file; ``PatchSetError`` (one line, naming the file) when it is wrong.

    + path: the ``.toml`` file

    **Example:**

    .. code:: python

        kimi = load_set(SHIPPED / "kimi_k25_eagle3.toml")
        kimi.versions   # ("0.5.9", "0.5.10", ...)
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return _build(path, data)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise PatchSetError(f"patch set {path}: does not parse: {error}") from None
    except (ValueError, TypeError, KeyError, SyntaxError) as error:
        raise PatchSetError(f"patch set {path}: {error}") from None


def _build(path: Path, data: dict) -> PatchSet:
    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]} (keys: {', '.join(sorted(KEYS))})")
    for key in ("summary", "upstream", "file"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ValueError(f"`{key}` must be a non-empty string")
    versions = data.get("versions")
    if not isinstance(versions, list) or not versions or not all(isinstance(v, str) and v for v in versions):
        raise ValueError("`versions` must list the sglang releases it is for, e.g. [\"0.5.9\"]")
    anchor = data.get("anchor") or {}
    target, function = anchor.get("class"), anchor.get("function")
    if (set(anchor) - {"class", "function"} or (target is None and function is None)
            or (target is not None and not (isinstance(target, str) and target.isidentifier()))
            or (function is not None and not (isinstance(function, str) and function.isidentifier()))):
        raise ValueError("`anchor` needs `class` (and optionally `function`), or `function` alone "
                         "(a top-level function), Python names")
    changes_data = data.get("change")
    changes_data = [changes_data] if isinstance(changes_data, dict) else changes_data
    if not isinstance(changes_data, list) or not changes_data:
        raise ValueError("needs at least one [[change]]")
    name = path.stem
    changes = []
    for i, change in enumerate(changes_data, start=1):
        marker = name if len(changes_data) == 1 else f"{name}.{i}"
        if set(change) == {"methods"}:
            if target is None or function is not None:
                raise ValueError("`methods` go into a class: the anchor must name no function")
            patch = patcher.load_patch(path.parent / change["methods"])
            if patch.target != target:
                raise ValueError(f"{change['methods']} holds class {patch.target}, the anchor names {target}")
            changes.append(Patch(marker, patch.target, patch.methods, patch.digest))
        elif set(change) == {"replace", "with"}:
            changes.append(replacer.Replacement(marker, target, function, change["replace"], change["with"]))
        else:
            raise ValueError(f"[[change]] {i} needs `methods`, or `replace` and `with`")
    checks = {}
    for key in ("verify", "upstream_has"):
        check = data.get(key) or {}
        if set(check) - {"defines", "contains"} or not check:
            raise ValueError(f"[{key}] needs `defines` (method names) or `contains` (text), and nothing else")
        checks[key] = Check(tuple(check.get("defines", ())), tuple(check.get("contains", ())))
    return PatchSet(name, path, data["summary"].strip(), data["upstream"].strip(), tuple(versions),
                    data["file"], target, function, tuple(changes), checks["verify"], checks["upstream_has"])


def load_sets(extra: Path | str | None = None) -> list[PatchSet]:
    """
    The shipped patch sets, then the operator's from ``extra``, each group in file-name order.

    + extra: an operator's folder of ``*.toml`` patch sets (``patch_sets_dir``), or None

    **Example:**

    .. code:: python

        names = [s.name for s in load_sets()]
    """
    sets = [load_set(path) for path in sorted(SHIPPED.glob("*.toml"))]
    if extra is not None:
        own = [load_set(path) for path in sorted(Path(extra).glob("*.toml"))]
        clash = {s.name for s in sets} & {s.name for s in own}
        if clash:
            raise PatchSetError(f"patch set {sorted(clash)[0]} in {extra}: a shipped set has that name; rename the file")
        sets += own
    return sets


def resolve_sets_dir(patch_sets_dir: str | None) -> Path | None:
    """An inventory's ``patch_sets_dir`` as a path: ``~`` expanded, a relative path from the project's root."""
    if patch_sets_dir is None:
        return None
    return PROJECT_ROOT / Path(patch_sets_dir).expanduser()


def for_version(sets: list[PatchSet], version: str | None) -> list[PatchSet]:
    """The sets that name sglang ``version``, in order."""
    return [s for s in sets if version in s.versions]


def for_file(sets: list[PatchSet], version: str | None, file: str) -> list[PatchSet]:
    """The sets that name ``version`` and change ``file``, in order."""
    return [s for s in for_version(sets, version) if s.file == file]


def files(sets: list[PatchSet]) -> list[str]:
    """The files the sets change, each once, in the order of the sets."""
    return list(dict.fromkeys(s.file for s in sets))


def digest(sets: list[PatchSet]) -> str:
    """
    What a stack's patch sets write, as one short hash for the release id; "" for none.

    One set gives its own digest (the KimiK25 methods' as before patch sets).
    """
    if len(sets) <= 1:
        return sets[0].digest if sets else ""
    return hashlib.sha256("\n".join(f"{s.name}:{s.digest}" for s in sets).encode()).hexdigest()[:12]


def strip(source: bytes) -> bytes:
    """
    ``source`` without any sglfleet block, whichever set wrote it: the file as the package has it.

    **Example:**

    .. code:: python

        pristine = strip(path.read_bytes())
    """
    while True:
        found = next((m for m in map(_MARKER.match, source.splitlines()) if m), None)
        if found is None:
            return source
        name = found.group(1).decode("ascii", errors="replace")
        line = found.string
        # The marker says which engine wrote the block; each engine's revert needs only its name.
        if replacer.is_replacement_marker(line):
            source = replacer.revert(source, replacer.Replacement(name, "X", None, "pass", "pass"))
        else:
            source = patcher.revert(source, Patch(name, "", (), ""))


def status(source: bytes, patch_set: PatchSet, version: str | None = None) -> str:
    """
    A set's status on one file: "applies", "upstream", or "not for this version";
    ``PatchRefused`` (naming the set) when it names the version but cannot be placed.

    + source: the file's bytes (sglfleet blocks are ignored)
    + patch_set: the set
    + version: the file's sglang version; None skips the version check

    **Example:**

    .. code:: python

        status(wheel_file_bytes, kimi, "0.5.23")   # "upstream"
    """
    if version is not None and version not in patch_set.versions:
        return NOT_FOR
    pristine = strip(source)
    if patch_set.has_upstream(pristine):
        return UPSTREAM
    patch_set.apply(pristine)
    return APPLIES


def apply_sets(source: bytes, sets: list[PatchSet]) -> tuple[bytes, list[tuple[PatchSet, str]]]:
    """
    ``source`` with each set in order, from the file without any sglfleet block;
    and each set's outcome ("applies" or "upstream"). The first refusal raises.

    + source: the file's exact bytes, as the host has it
    + sets: the sets for this file and version (``for_file``)

    **Example:**

    .. code:: python

        new, outcomes = apply_sets(old, for_file(load_sets(), "0.5.9", KIMI))
        changed = new != old
    """
    result, outcomes = strip(source), []
    for patch_set in sets:
        if patch_set.has_upstream(result):
            outcomes.append((patch_set, UPSTREAM))
        else:
            result = patch_set.apply(result)
            outcomes.append((patch_set, APPLIES))
    return result, outcomes


def _squeeze(text: str) -> str:
    return "".join(text.split())


def _holds(text: str, snippet: str) -> bool:
    """
    Whether ``snippet`` is in ``text``, spaces and line breaks aside, as whole names:
    `api_key: ...` is not in `admin_api_key: ...`.
    """
    wanted = _squeeze(snippet)
    pattern = r"\s*".join(map(re.escape, wanted))
    if wanted[:1].isalnum() or wanted[:1] == "_":
        pattern = r"(?<![A-Za-z0-9_])" + pattern
    if wanted[-1:].isalnum() or wanted[-1:] == "_":
        pattern += r"(?![A-Za-z0-9_])"
    return re.search(pattern, text) is not None
