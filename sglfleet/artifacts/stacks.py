"""Stacks: a named definition (files/stacks/<name>.toml) and its hash-pinned lock.

The lock is PEP 751 ``pylock.toml`` (files/stacks/locks/<name>/pylock.toml,
written by ``sglfleet lock``): one wheel per package and interpreter with its
URL, size and sha256 (an entry's ``marker`` names the Pythons it is for, when
not all the stack serves), plus a ``[tool.sglfleet]`` table for what the build needs besides
(overrides, packages installed without dependencies, the uv wheel shipped to
hosts, and packages not resolved yet). Why pylock and not requirements with
``--hash``: it is the standard and records every file's URL and size, which
the controller's wheelhouse downloads and checks. uv 0.13 writes it well
(``uv pip compile --format pylock.toml``) but installing from it is still a
preview that fetches the lock's URLs and ignores ``--no-index`` /
``--find-links``; so hosts install from requirements with ``--hash`` rendered
from the lock (``Stack.requirements()``), offline, from their wheelhouse.

**Example:**

.. code:: python

    stack = load_stack("dev")
    stack.pythons          # ("3.11", "3.12", "3.13")
    built = stack.for_python("3.13")
    built.id               # "dev-3f2a9c1b7d4e-cp313": name, short hash of the lock, interpreter
    built.venv             # "/opt/sglfleet/stacks/dev-3f2a9c1b7d4e-cp313/venv"
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from packaging.markers import InvalidMarker, Marker

from sglfleet import FILES
from sglfleet.host.layout import LAYOUT

# $SGLFLEET_STACKS points a run at another folder of stack definitions (a test's).
STACKS_DIR = Path(os.environ.get("SGLFLEET_STACKS", FILES / "stacks"))
MARKER = "verified.json"


class StackError(ValueError):
    """A stack definition or lock that cannot be used as it is; the message says the fix."""


@dataclass(frozen=True)
class StackFile:
    """One locked wheel: what the wheelhouse fetches and a host installs."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str | None
    size: int | None
    pythons: tuple[str, ...] = ()  # the interpreters it is for ("3.11", ...)


@dataclass(frozen=True)
class Stack:
    """
    A loaded stack: its definition's facts and its locked files.

    As loaded, it holds the files of every Python it serves (``pythons``) and
    ``python`` is the first of them; a host builds ``for_python(its python3)``,
    whose id, files and venv are that interpreter's alone.
    """

    name: str
    id: str
    python: str
    sglang_version: str | None
    cuda: str | None  # None: a GPU-less stack (dev)
    compute_caps: tuple[str, ...]
    min_driver: int | None
    files: tuple[StackFile, ...]
    overrides: tuple[str, ...] = ()
    no_deps: bool = False  # some package is installed without its dependencies
    bootstrap: tuple[str, ...] = ("uv",)  # shipped to hosts, not installed in the venv
    unresolved: tuple[dict, ...] = ()
    lock_path: Path | None = field(default=None, compare=False)
    pythons: tuple[str, ...] = ()
    lock_id: str = ""  # name + short hash of the lock, before any interpreter is chosen
    glibc: str | None = None  # the newest glibc one of this interpreter's wheels needs ("2.34")
    every_file: tuple[StackFile, ...] = field(default=(), compare=False)  # all Pythons' files
    # for_python's answers: a run asks for a host's stack some twenty times
    _for_python: dict[str, Stack] = field(default_factory=dict, init=False, compare=False, repr=False)

    def serves(self, python: str | None) -> bool:
        """Whether the lock holds wheels for ``python`` (``"3.13"`` or ``"3.13.5"``)."""
        return bool(python) and ".".join(python.split(".")[:2]) in self.pythons

    def for_python(self, python: str) -> Stack:
        """
        The stack a host with ``python`` builds: that interpreter's files, its own id.

        + python: ``"3.13"`` (a patch level is dropped); one of ``pythons``

        **Example:**

        .. code:: python

            load_stack("dev").for_python("3.13").id   # "dev-3f2a9c1b7d4e-cp313"
        """
        python = ".".join(python.split(".")[:2])
        if python not in self._for_python:
            self._for_python[python] = self._built_for(python)
        return self._for_python[python]

    def _built_for(self, python: str) -> Stack:
        if python not in self.pythons:
            raise StackError(f"stack {self.name} serves python {', '.join(self.pythons)}, not {python}: "
                             f"add it to the stack's pythons and run `sglfleet lock {self.name}`")
        files = tuple(f for f in self.every_file or self.files if python in f.pythons)
        return replace(self, id=f"{self.lock_id}-cp{python.replace('.', '')}", python=python, files=files,
                       glibc=newest_glibc(f.filename for f in files))

    @property
    def path(self) -> str:
        """The stack's folder on a host."""
        return LAYOUT.stack(self.id)

    @property
    def venv(self) -> str:
        """The stack's venv on a host (``<venv>/bin/python`` runs sglang)."""
        return LAYOUT.venv(self.id)

    @property
    def marker(self) -> str:
        return LAYOUT.stack(self.id, MARKER)

    @property
    def size(self) -> int:
        """Bytes of all locked files (unknown sizes count as 0)."""
        return sum(f.size or 0 for f in self.files)

    @property
    def complete(self) -> bool:
        return not self.unresolved

    @property
    def uv(self) -> StackFile:
        """The uv wheel hosts extract their uv binary from."""
        for f in self.files:
            if f.name == "uv":
                return f
        raise StackError(f"stack {self.name}: the lock has no uv wheel: run `sglfleet lock {self.name}`")

    @property
    def venv_files(self) -> tuple[StackFile, ...]:
        return tuple(f for f in self.files if f.name not in self.bootstrap)

    def require_complete(self) -> None:
        """Raise when the lock still has unresolved packages, naming the fix."""
        if self.unresolved:
            names = ", ".join(u["name"] for u in self.unresolved)
            sources = sorted({u.get("source", "?") for u in self.unresolved})
            raise StackError(
                f"stack {self.name}: the lock is incomplete ({names} unresolved): run "
                f"`sglfleet lock {self.name}` where {', '.join(sources)} can be reached"
            )

    def requirements(self, hashes: dict[str, str] | None = None) -> str:
        """
        The venv's files as requirements with ``--hash``, for an offline uv install.

        + hashes: ``{filename: sha256}`` for files the lock has no hash for (an
          allowed unhashed lock: the controller's download is trusted)
        """
        hashes = hashes or {}
        lines = [f"# stack {self.id}, rendered from its lock"]
        for f in sorted(self.venv_files, key=lambda f: f.name):
            lines.append(f"{f.name}=={f.version} --hash=sha256:{f.sha256 or hashes[f.filename]}")
        return "\n".join(lines) + "\n"


def available() -> list[str]:
    """Names of the stacks defined in files/stacks/."""
    return sorted(p.stem for p in STACKS_DIR.glob("*.toml"))


def loadable() -> tuple[Stack, ...]:
    """
    Every stack defined here whose lock loads (hashed or not): what would fit a host. About 0.1 s:
    preflight reads it only for a host its own stack does not serve, the lint once an inventory.
    """
    stacks = []
    for name in available():
        try:
            stacks.append(load_stack(name, allow_unhashed=True))
        except StackError:
            continue  # a stack without a usable lock fits no host
    return tuple(stacks)


def definition_path(name: str, stacks_dir: Path | None = None) -> Path:
    stacks_dir = stacks_dir or STACKS_DIR
    path = stacks_dir / f"{name}.toml"
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in stacks_dir.glob("*.toml"))) or "none"
        raise StackError(
            f"no stack named {name!r} in {stacks_dir} (available: {names}): "
            f"fix the inventory's `stack`, or add {name}.toml there"
        )
    return path


def lock_path(name: str, stacks_dir: Path | None = None) -> Path:
    return (stacks_dir or STACKS_DIR) / "locks" / name / "pylock.toml"


def read_definition(name: str, stacks_dir: Path | None = None) -> tuple[dict, bytes]:
    """The parsed definition and its raw bytes (the lock records their hash)."""
    raw = definition_path(name, stacks_dir).read_bytes()
    return _parsed_definition(name, raw), raw


def _parsed_definition(name: str, raw: bytes) -> dict:
    """A stack definition's TOML, or a ``StackError`` that says to fix the file."""
    try:
        return tomllib.loads(raw.decode())
    except tomllib.TOMLDecodeError as e:
        raise StackError(f"stack {name}: {name}.toml is not valid TOML ({e}): fix the file") from None


def stack_id(name: str, lock_bytes: bytes) -> str:
    """``<name>-<12 hex of sha256(lock)>``: a new lock is a new stack folder on hosts (``-cp3XX`` follows)."""
    return f"{name}-{hashlib.sha256(lock_bytes).hexdigest()[:12]}"


def definition_pythons(definition: dict) -> list[str]:
    """The Pythons a definition serves: ``pythons = [...]``, or one ``python = "3.11"``."""
    pythons = definition.get("pythons") or [definition["python"]]
    return [str(python) for python in pythons]


def newest_glibc(filenames) -> str | None:
    """
    The newest glibc any of these wheels needs, from their manylinux tags; None when all are pure.

    + filenames: wheel file names (a wheel needs the oldest of its own tags)

    **Example:**

    .. code:: python

        newest_glibc(["orjson-3.13.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"])  # "2.17"
    """
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    needed = []
    for filename in filenames:
        platforms = filename[:-len(".whl")].split("-")[-1].split(".")
        versions = []
        for platform in platforms:
            if platform.startswith("manylinux_"):
                major, minor = platform.split("_")[1:3]
                versions.append((int(major), int(minor)))
            elif platform.split("_")[0] in legacy:
                versions.append(legacy[platform.split("_")[0]])
        if versions:
            needed.append(min(versions))
    return "%d.%d" % max(needed) if needed else None


def marker_pythons(marker: str | None, pythons: list[str], where: str) -> tuple[str, ...]:
    """The ``pythons`` a lock entry's PEP 508 ``marker`` holds for (all of them without one)."""
    if not marker:
        return tuple(pythons)
    try:
        parsed = Marker(marker)
    except InvalidMarker as e:
        raise StackError(f"{where}: marker {marker!r} is not PEP 508 ({e})") from None
    return tuple(p for p in pythons if parsed.evaluate({"python_version": p, "python_full_version": f"{p}.0"}))


def load_stack(name: str, allow_unhashed: bool = False, stacks_dir: Path | None = None) -> Stack:
    """
    Load a stack's definition and lock.

    + name: the stack's name, a file files/stacks/<name>.toml
    + allow_unhashed: accept locked files without sha256 (the inventory's
      ``allow_unhashed_lock``); refused otherwise
    + stacks_dir: where definitions live (default files/stacks, or $SGLFLEET_STACKS)

    **Example:**

    .. code:: python

        stack = load_stack(host.data.stack)
    """
    raw_definition = definition_path(name, stacks_dir).read_bytes()
    path = lock_path(name, stacks_dir)
    if not path.is_file():
        raise StackError(f"stack {name} has no lock ({path}): run `sglfleet lock {name}`")
    return _parsed_stack(name, raw_definition, path.read_bytes(), path, allow_unhashed)


@cache
def _parsed_stack(name: str, raw_definition: bytes, lock_bytes: bytes, path: Path, allow_unhashed: bool) -> Stack:
    """The stack these bytes define: parsed once a run however many hosts take it (a lock is ~1 MB of TOML)."""
    definition = _parsed_definition(name, raw_definition)
    try:
        lock = tomllib.loads(lock_bytes.decode())
    except tomllib.TOMLDecodeError as e:
        raise StackError(f"stack {name}: {path} is not valid TOML ({e}): run `sglfleet lock {name}`") from None
    tool = lock.get("tool", {}).get("sglfleet", {})
    if tool.get("definition-sha256") != hashlib.sha256(raw_definition).hexdigest():
        raise StackError(f"stack {name}: {name}.toml changed since it was locked: run `sglfleet lock {name}`")

    pythons = definition_pythons(definition)
    files = []
    for package in lock.get("packages", []):
        wheels = package.get("wheels") or []
        if len(wheels) != 1:
            raise StackError(
                f"stack {name}: {package.get('name')} has {len(wheels)} wheels in the lock, "
                f"sglfleet locks exactly one: run `sglfleet lock {name}`"
            )
        wheel = wheels[0]
        url = wheel["url"]
        files.append(StackFile(
            name=package["name"],
            version=package["version"],
            filename=wheel.get("name") or url.rsplit("/", 1)[-1],
            url=url,
            sha256=wheel.get("hashes", {}).get("sha256"),
            size=wheel.get("size"),
            pythons=marker_pythons(package.get("marker"), pythons, f"stack {name}: {package['name']}"),
        ))
    for python in pythons:
        names = [f.name for f in files if python in f.pythons]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise StackError(f"stack {name}: {', '.join(twice)} locked twice for python {python}: "
                             f"run `sglfleet lock {name}`")
    unhashed = [f.filename for f in files if not f.sha256]
    if unhashed and not allow_unhashed:
        raise StackError(
            f"stack {name}: {len(unhashed)} locked files have no sha256 ({', '.join(unhashed[:3])}): "
            f"run `sglfleet lock {name}`, or set allow_unhashed_lock=True in the inventory to accept them"
        )

    # sglang's version for the probe: the same release for every interpreter.
    versions = {f.name: f.version for f in files}
    unresolved = tuple(tool.get("unresolved", []))
    sglang = versions.get("sglang") or next(
        (u.get("version") for u in unresolved if u["name"] == "sglang"), None
    )
    return Stack(
        name=name,
        id=stack_id(name, lock_bytes),
        python=pythons[0],
        sglang_version=sglang,
        cuda=definition.get("cuda"),
        compute_caps=tuple(definition.get("compute-caps", ())),
        min_driver=definition.get("min-driver"),
        files=tuple(files),
        overrides=tuple(tool.get("overrides", ())),
        no_deps=bool(tool.get("no-deps")),
        bootstrap=tuple(tool.get("bootstrap", ("uv",))),
        unresolved=unresolved,
        lock_path=path,
        pythons=tuple(pythons),
        lock_id=stack_id(name, lock_bytes),
        every_file=tuple(files),
    )
