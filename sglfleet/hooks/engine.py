"""
Four of pyinfra's costs, made cheap without changing what they return, and one of Python's.

pyinfra 3.10 pays the first three for every operation, ``@deploy`` step or
fact (the first for operations alone) that a deploy calls on a host, the
fourth once for every variable of a group data file. Each is a cut (``CUTS``):
a function of pyinfra's replaced where pyinfra calls it.

- ``operation_order`` for ``get_operation_order_from_stack``, which builds
  ``inspect.stack()``, then ``getframeinfo`` of each frame again: each reads the
  frame's source line and looks its module up, and ``inspect.getmodule`` scans
  all of ``sys.modules`` for a file that is no module's (``deploy.py`` is one):
  3 to 6 ms a call here. The order needs only each frame's file name and line number.
- ``pop_global_arguments``, which looks each of some thirty global arguments up
  in the host's data, and each lookup merges every group's data again
  (``all.py``'s 120 variables, for a key no layer has): its host's data is
  merged once a call.
- ``all_global_arguments``, which evaluates ``typing.get_type_hints(AllArguments)``
  on each call, though the class never changes.
- ``imported_names`` for the inventory loader's ``_get_imported_names``, which
  parses a group data file again for each of its variables, to learn the names
  it imports: 120 parses of ``group_data/all.py``.

And one of Python's, ``gc_freeze``: its last garbage collection at exit walks
every object the run made (0.13 to 0.19 s of a no-op converge of 3 hosts here); the run's objects
are frozen (``gc.freeze``) once it is done, and the process ends without that walk.

The cuts are written against pyinfra ``PYINFRA`` (3.10.0), its source read
function by function, and ``faster_pyinfra`` puts them in place on that exact
version only: on any other, pyinfra runs as it ships, and the run says so in
one line. ``gc_freeze`` holds for any pyinfra. ``stock_pyinfra`` puts pyinfra's
own functions back (the tests do, after each).

``SGLFLEET_PYINFRA`` runs pyinfra as it ships on purpose, to compare:

- unset (or empty): every cut
- ``stock``: none of them, ``gc_freeze`` included
- ``stock:NAME,NAME``: those named left out, the others in place
  (``stock:pop_global_arguments``: what that cut alone buys)

Each replacement is checked against pyinfra's own in ``tests/test_engine.py``,
and a whole run's plan against stock pyinfra's in ``tests/test_engine_fleet.py``;
each cut as an upstream change, with its test, is in ``docs/pyinfra-patches/``.
What they save is measured in BENCHMARKS.md ("pyinfra's costs cut").

**Example:**

.. code:: python

    faster_pyinfra()  # config.py, before the inventory and the deploy file are loaded
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from collections.abc import Callable
from copy import copy
from dataclasses import dataclass
from functools import cache
from types import ModuleType, SimpleNamespace

import pyinfra
from pyinfra import logger
from pyinfra.api import arguments, facts, util
from pyinfra_cli import inventory

PYINFRA = "3.10.0"  # the pyinfra each cut was written against: on any other, pyinfra runs as it ships
SWITCH = "SGLFLEET_PYINFRA"

# pyinfra.api re-exports ``operation`` and ``deploy``, the decorators, under their modules' own names.
_operations = sys.modules["pyinfra.api.operation"]
_deploys = sys.modules["pyinfra.api.deploy"]
_pyinfra_global_arguments = arguments.all_global_arguments
_pyinfra_pop_global_arguments = arguments.pop_global_arguments
_pyinfra_imported_names = inventory._get_imported_names


def operation_order(state) -> list[int]:
    """
    The order pyinfra gives an operation called from the current stack, as ``get_operation_order_from_stack``.

    + state: pyinfra's ``State``: the deploy file being run, and its operation number

    The line numbers of the stack's frames from the first frame of the deploy file inwards,
    pyinfra's own frames left out, after the deploy file's number in CLI mode.

    **Example:**

    .. code:: python

        operation_order(state)  # [1, 27, 14]: deploy.py's line 27, then a task's line 14
    """
    frames = []
    frame = sys._getframe(1)  # from the caller: pyinfra's own function skips its own frame, as pyinfra's
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()

    start = 0
    if state.current_deploy_filename:
        names = [frame.f_code.co_filename for frame in frames]
        # Not on the stack: pyinfra's search ends on its own innermost frame, which it then skips.
        start = names.index(state.current_deploy_filename) if state.current_deploy_filename in names else len(frames)

    order = [state.current_op_file_number] if pyinfra.is_cli else []
    order.extend(frame.f_lineno for frame in frames[start:]
                 if not frame.f_code.co_filename.startswith(util.PYINFRA_INSTALL_DIR))
    return order


class _ReadOnceHost:
    """
    What ``pop_global_arguments`` asks of a host: its deploy's arguments, and the global arguments its
    data sets, each looked up as ``HostData`` does (the first layer that has it, a shallow copy), once.
    """

    __slots__ = ("current_deploy_kwargs", "data")

    def __init__(self, host):
        self.current_deploy_kwargs = host.current_deploy_kwargs
        merged = host.data.dict()  # its layers merged as HostData.__getattr__ looks through them
        # Attributes: a key the data does not set is missed without an exception raised and caught.
        self.data = SimpleNamespace(**{key: copy(merged[key]) for key in _global_names() if key in merged})


def pop_global_arguments(state, host, kwargs: dict):
    """
    Pop the global arguments out of ``kwargs``, as pyinfra's ``pop_global_arguments``, the host's data merged once.

    + state: pyinfra's ``State``
    + host: the host the call is for
    + kwargs: the call's keyword arguments: its global ones are taken out

    **Example:**

    .. code:: python

        arguments, given = pop_global_arguments(state, host, {"_sudo": True, "name": "x"})  # given: ["_sudo"]
    """
    return _pyinfra_pop_global_arguments(state, _ReadOnceHost(host), kwargs)


@cache
def _global_arguments() -> tuple[tuple[str, type], ...]:
    return tuple(_pyinfra_global_arguments())


@cache
def _global_names() -> frozenset[str]:
    return frozenset(name for name, _ in _global_arguments())


def all_global_arguments() -> list[tuple[str, type]]:
    """
    pyinfra's global arguments and their types, as ``all_global_arguments``, evaluated once.

    **Example:**

    .. code:: python

        dict(all_global_arguments())["_sudo"]  # bool
    """
    return list(_global_arguments())


@cache
def _imported_names(filename: str, size: int, mtime_ns: int) -> frozenset[str]:
    # Once per ``size`` and ``mtime_ns``, which name the file's content: a changed file is parsed again.
    return frozenset(_pyinfra_imported_names(filename))


def imported_names(filename: str) -> set[str]:
    """
    The names a group data file's imports bind, as the inventory loader's ``_get_imported_names``, parsed once.

    + filename: the group data file

    **Example:**

    .. code:: python

        imported_names("inventory/group_data/all.py")  # set(): all.py imports nothing
    """
    stat = os.stat(filename)
    return set(_imported_names(filename, stat.st_size, stat.st_mtime_ns))


@dataclass(frozen=True)
class Cut:
    """
    One of pyinfra's functions replaced: every module attribute pyinfra calls it through, and the replacement.

    + name: what ``SGLFLEET_PYINFRA`` calls it
    + places: ``(module, attribute)`` pairs: where pyinfra 3.10.0 looks the function up when it calls it
    + replacement: what is put there
    + stock: pyinfra's own function, put back by ``stock_pyinfra``

    **Example:**

    .. code:: python

        Cut("imported_names", ((inventory, "_get_imported_names"),), imported_names, inventory._get_imported_names)
    """

    name: str
    places: tuple[tuple[ModuleType, str], ...]
    replacement: Callable
    stock: Callable

    def in_place(self) -> bool:
        """Whether every place holds the replacement."""
        return all(getattr(module, attribute) is self.replacement for module, attribute in self.places)


# Each module that imported the function by name holds its own reference: each is a place.
CUTS = (
    Cut("operation_order", ((_operations, "get_operation_order_from_stack"),), operation_order,
        util.get_operation_order_from_stack),
    Cut("pop_global_arguments",
        ((_operations, "pop_global_arguments"), (_deploys, "pop_global_arguments"), (facts, "pop_global_arguments")),
        pop_global_arguments, _pyinfra_pop_global_arguments),
    # arguments' own: pyinfra's pop_global_arguments calls it there.
    Cut("all_global_arguments", ((arguments, "all_global_arguments"), (facts, "all_global_arguments")),
        all_global_arguments, _pyinfra_global_arguments),
    Cut("imported_names", ((inventory, "_get_imported_names"),), imported_names, _pyinfra_imported_names),
)
GC_FREEZE = "gc_freeze"
NAMES = tuple(cut.name for cut in CUTS) + (GC_FREEZE,)

_said = False  # the one line for another pyinfra, said once a process


def left_out(switch: str | None = None) -> frozenset[str]:
    """
    The names ``SGLFLEET_PYINFRA`` leaves out: none, all (``stock``), or those after ``stock:``.

    + switch: the variable's value; None: read from the environment

    **Example:**

    .. code:: python

        left_out("stock:operation_order,gc_freeze")  # frozenset({"operation_order", "gc_freeze"})
    """
    switch = (os.environ.get(SWITCH, "") if switch is None else switch).strip()
    if not switch:
        return frozenset()
    if switch == "stock":
        return frozenset(NAMES)
    names = switch.removeprefix("stock:").split(",") if switch.startswith("stock:") else [switch]
    unknown = [name for name in names if name not in NAMES]
    if unknown:
        # A typo would compare stock pyinfra with itself without a word.
        raise ValueError(f"{SWITCH}={switch}: no cut named {', '.join(unknown)} "
                         f"(stock, or stock: and some of {', '.join(NAMES)})")
    return frozenset(names)


def faster_pyinfra() -> tuple[str, ...]:
    """
    Put the cuts in place where pyinfra calls its own functions, on pyinfra 3.10.0 alone, and freeze the run's
    objects at exit; return the names of those put in place.

    On any other pyinfra, its functions stay as they are and one line says so (once a process):
    ``pyinfra 3.10.1: sglfleet runs it unpatched (its cuts are written for 3.10.0)``.
    ``SGLFLEET_PYINFRA`` leaves some or all out (the module's docstring).

    **Example:**

    .. code:: python

        faster_pyinfra()  # every cut's name, then "gc_freeze"
    """
    global _said
    skipped = left_out()
    freeze = () if GC_FREEZE in skipped else (GC_FREEZE,)
    atexit.unregister(gc.freeze)
    if freeze:
        # Registered now, so run after every later exit handler (pyinfra's summary, the event log).
        atexit.register(gc.freeze)
    if pyinfra.__version__ != PYINFRA:
        # Another pyinfra's functions may differ from what each cut reproduces: it runs as it ships.
        if not _said:
            logger.warning(f"pyinfra {pyinfra.__version__}: sglfleet runs it unpatched "
                           f"(its cuts are written for {PYINFRA})")
            _said = True
        return freeze
    for cut in CUTS:
        for module, attribute in cut.places:
            setattr(module, attribute, cut.stock if cut.name in skipped else cut.replacement)
    return tuple(cut.name for cut in CUTS if cut.name not in skipped) + freeze


def stock_pyinfra() -> None:
    """
    Put pyinfra's own functions back where the cuts were, and let the run's last collection walk its objects again.

    **Example:**

    .. code:: python

        faster_pyinfra()
        ...
        stock_pyinfra()  # pyinfra as it ships, as before faster_pyinfra
    """
    global _said
    for cut in CUTS:
        for module, attribute in cut.places:
            setattr(module, attribute, cut.stock)
    atexit.unregister(gc.freeze)
    _said = False


def cuts_in_place() -> tuple[str, ...]:
    """
    The names of the cuts whose every place holds the replacement, ``gc_freeze`` left aside.

    **Example:**

    .. code:: python

        cuts_in_place()  # () on stock pyinfra
    """
    return tuple(cut.name for cut in CUTS if cut.in_place())
