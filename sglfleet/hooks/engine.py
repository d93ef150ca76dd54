"""
Four of pyinfra's costs, made cheap without changing what they return, and one of Python's.

pyinfra 3.10 pays the first three for every operation, ``@deploy`` step or
fact (the first for operations alone) that a deploy calls on a host, the
fourth once for every variable of a group data file:

- ``get_operation_order_from_stack`` builds ``inspect.stack()``, then
  ``getframeinfo`` of each frame again: each reads the frame's source line and
  looks its module up, and ``inspect.getmodule`` scans all of ``sys.modules``
  for a file that is no module's (``deploy.py`` is one): 3 to 6 ms a call here.
  The order needs only each frame's file name and line number.
- ``pop_global_arguments`` looks each of some thirty global arguments up in the
  host's data, and each lookup merges every group's data again (``all.py``'s
  120 variables, for a key no layer has): its host's data is merged once a call.
- ``all_global_arguments`` evaluates ``typing.get_type_hints(AllArguments)``
  on each call, though the class never changes.
- the inventory loader parses a group data file again for each of its
  variables, to learn the names it imports (``_get_imported_names``): 120
  parses of ``group_data/all.py``.

And one of Python's: its last garbage collection at exit walks every object
the run made (0.25 s of a no-op converge here); the run's objects are frozen
(``gc.freeze``) once it is done, and the process ends without that walk.

Each replacement is checked against pyinfra's own in ``tests/test_engine.py``;
pyproject.toml pins pyinfra to 3.10. What they save is measured in
BENCHMARKS.md ("Fleet scale").

**Example:**

.. code:: python

    faster_pyinfra()  # config.py, before the inventory and the deploy file are loaded
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from copy import copy
from functools import cache
from types import SimpleNamespace

import pyinfra
from pyinfra.api import arguments, facts, util
from pyinfra_cli import inventory

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


def faster_pyinfra() -> None:
    """
    Put ``operation_order``, ``pop_global_arguments``, ``all_global_arguments`` and ``imported_names`` where
    pyinfra calls its own, and freeze the run's objects at exit.

    **Example:**

    .. code:: python

        faster_pyinfra()
    """
    # Registered now, so run after every later exit handler (pyinfra's summary, the event log).
    atexit.register(gc.freeze)
    _operations.get_operation_order_from_stack = operation_order
    _operations.pop_global_arguments = _deploys.pop_global_arguments = facts.pop_global_arguments = pop_global_arguments
    arguments.all_global_arguments = facts.all_global_arguments = all_global_arguments
    inventory._get_imported_names = imported_names
