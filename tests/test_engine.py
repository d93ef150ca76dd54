"""
sglfleet.hooks.engine's replacements return what pyinfra's own return, on the same stacks and files; each cut
is put in place on pyinfra 3.10.0 alone, left out on any other (one line says so) or when asked, and taken out.

Every test here ends with pyinfra as it ships (``stock``): no cut leaks into a later test on the same worker.
"""

from __future__ import annotations

import gc
import logging
import sys
from types import SimpleNamespace

import pyinfra
import pytest
from pyinfra.api import util

from sglfleet import PROJECT_ROOT
from sglfleet.hooks import engine


@pytest.fixture(autouse=True)
def stock(monkeypatch):
    """pyinfra as it ships after each test, whatever the test put in place; no ``SGLFLEET_PYINFRA`` during it."""
    monkeypatch.delenv(engine.SWITCH, raising=False)
    yield
    engine.stock_pyinfra()


DEPLOY = "deploy.py"  # pyinfra runs the deploy file under the name it was given: relative, here


def _code(filename: str, source: str) -> dict:
    """The functions of ``source``, compiled as if they were ``filename``'s."""
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def _both(state) -> tuple[list[int], list[int]]:
    return util.get_operation_order_from_stack(state), engine.operation_order(state)


# A deploy file calling a task, which calls through a frame of pyinfra's own (its @deploy, say) to the
# operation, which asks for its order: the stack a real run has, twice over for a nested deploy file.
_deploy = _code(DEPLOY, "def deploy_body(inner):\n    return task(inner)\n\n\ndef again(inner):\n    return inner()\n")
_task = _code(str(PROJECT_ROOT / "tasks" / "example.py"), "def task(inner):\n    x = 1\n    return engine_frame(inner)\n")
_pyinfra_frame = _code(util.PYINFRA_INSTALL_DIR + "/api/deploy_example.py", "def engine_frame(inner):\n    return inner()\n")
_deploy["task"] = _task["task"]
_task["engine_frame"] = _pyinfra_frame["engine_frame"]


@pytest.mark.parametrize("cli", [True, False])
@pytest.mark.parametrize("deploy_file", [DEPLOY, None, "elsewhere.py"])
@pytest.mark.parametrize("nested", [False, True])
def test_operation_order_is_pyinfras(monkeypatch, cli, deploy_file, nested):
    monkeypatch.setattr(pyinfra, "is_cli", cli)
    state = SimpleNamespace(current_deploy_filename=deploy_file, current_op_file_number=3)
    call = (lambda: _deploy["again"](lambda: _deploy["deploy_body"](lambda: _both(state)))) if nested \
        else (lambda: _deploy["deploy_body"](lambda: _both(state)))

    theirs, ours = call()

    assert ours == theirs
    if deploy_file == DEPLOY:
        # The order starts at the deploy file's first frame, leaves pyinfra's out, and ends in this file.
        assert ours[: 2 if cli else 1] == ([3] if cli else []) + [6 if nested else 2]  # again's call, else deploy_body's
        body = ours.index(2)
        assert ours[body : body + 2] == [2, 3]  # deploy_body's call, then task's: the pyinfra frame is left out
        assert ours[-1] == _both.__code__.co_firstlineno + 1
    if deploy_file == "elsewhere.py":
        assert ours == ([3] if cli else [])


def test_global_arguments_are_pyinfras():
    ours = engine.all_global_arguments()

    assert ours == engine._pyinfra_global_arguments()
    assert dict(ours)["_sudo"] is bool
    ours.clear()  # a caller's own list: the kept answer is untouched
    assert engine.all_global_arguments() == engine._pyinfra_global_arguments()


@pytest.mark.parametrize("given", [{}, {"_sudo": False, "name": "x"}, {"_su_user": "ops", "_retries": 2}])
@pytest.mark.parametrize("in_deploy", [False, True])
def test_global_arguments_popped_as_pyinfra_pops_them(given, in_deploy):
    """Each data layer (override, host, groups, all, a deploy's data and arguments) as pyinfra looks it up."""
    from pyinfra.api import Config, Inventory, State

    inventory = Inventory(
        (["node1", ("node2", {"_sudo_user": "svc", "_env": {"HOST": "2"}})], {"_sudo": True, "_retries": 1}),
        web=(["node2"], {"_su_user": "web", "_env": {"GROUP": "web"}, "_timeout": 30}),
        canary=(["node2"], {"_su_user": "canary"}))
    inventory.override_data = {"_retry_delay": 7}
    state = State(inventory, Config())
    host = inventory.get_host("node2")
    deploy = host.deploy("step", {"_shell_executable": "bash"}, {"_timeout": 9, "_get_pty": True}) if in_deploy else None
    if deploy:
        deploy.__enter__()
    try:
        theirs_kwargs, ours_kwargs = dict(given), dict(given)
        theirs = engine._pyinfra_pop_global_arguments(state, host, theirs_kwargs)
        ours = engine.pop_global_arguments(state, host, ours_kwargs)
    finally:
        if deploy:
            deploy.__exit__(None, None, None)

    assert ours == theirs and ours_kwargs == theirs_kwargs
    arguments = ours[0]
    # The host's own over its groups, the later group over the earlier, a group over the deploy's data.
    assert arguments["_sudo_user"] == "svc" and arguments["_retry_delay"] == 7 and arguments["_timeout"] == 30
    assert arguments["_su_user"] == given.get("_su_user", "canary") and arguments["_env"] == {"HOST": "2"}
    assert arguments["_get_pty"] is in_deploy and (arguments["_shell_executable"] == "bash") is in_deploy
    arguments["_env"]["HOST"] = "changed"  # a copy, as pyinfra hands out: the host's data keeps its own
    assert host.data._env == {"HOST": "2"}


def test_imported_names_are_pyinfras(tmp_path):
    group_data = tmp_path / "all.py"
    group_data.write_text("import os\nfrom pathlib import Path as P\nfrom json import *\n\nport = 30000\n")

    assert engine.imported_names(str(group_data)) == engine._pyinfra_imported_names(str(group_data)) == {"os", "P"}
    real = str(PROJECT_ROOT / "inventory" / "group_data" / "all.py")
    assert engine.imported_names(real) == engine._pyinfra_imported_names(real)


class _ExitHandlers:
    """``atexit`` as the engine uses it, its handlers in a list: the test process's own exit is left alone."""

    def __init__(self):
        self.functions = []

    def register(self, function):
        self.functions.append(function)

    def unregister(self, function):
        self.functions = [each for each in self.functions if each is not function]


def _held(cut) -> list:
    return [getattr(module, attribute) for module, attribute in cut.places]


def test_the_installed_pyinfra_is_the_one_the_cuts_are_written_for():
    # Another pyinfra runs unpatched (below): its cuts would be dead weight, and these tests compare against it.
    assert pyinfra.__version__ == engine.PYINFRA, (
        f"pyinfra {pyinfra.__version__} is installed, the cuts are written for {engine.PYINFRA}: read each against "
        f"the new source (docs/pyinfra-patches/) and move engine.PYINFRA, or drop the cut")


@pytest.mark.parametrize("cut", engine.CUTS, ids=lambda cut: cut.name)
def test_the_places_are_every_module_that_holds_the_function(cut):
    """Each module of pyinfra's that imported the function holds its own reference, which pyinfra calls: each is a
    place. The module that defines it is one only where it calls it itself (``arguments``, ``inventory``)."""
    import pyinfra_cli.cli  # noqa: F401  (every module of pyinfra's the CLI loads, loaded)

    holders = {(module.__name__, attribute) for module in list(sys.modules.values())
               if module.__name__.split(".")[0] in ("pyinfra", "pyinfra_cli")
               for attribute, value in vars(module).items() if value is cut.stock}
    places = {(module.__name__, attribute) for module, attribute in cut.places}

    assert places <= holders and holders - places <= {(cut.stock.__module__, cut.stock.__name__)}
    assert engine.cuts_in_place() == ()  # nothing in place before faster_pyinfra


@pytest.mark.parametrize("cut", engine.CUTS, ids=lambda cut: cut.name)
def test_a_cut_is_in_place_on_its_pyinfra_and_taken_out_after(monkeypatch, cut):
    monkeypatch.setattr(pyinfra, "__version__", engine.PYINFRA)
    exit_handlers = _ExitHandlers()
    monkeypatch.setattr(engine, "atexit", exit_handlers)
    before = _held(cut)

    applied = engine.faster_pyinfra()

    assert cut.name in applied and cut.name in engine.cuts_in_place()
    assert _held(cut) == [cut.replacement] * len(cut.places)
    assert engine.GC_FREEZE in applied and exit_handlers.functions == [gc.freeze]
    engine.stock_pyinfra()
    assert _held(cut) == before == [cut.stock] * len(cut.places)
    assert engine.cuts_in_place() == () and exit_handlers.functions == []


@pytest.mark.parametrize("cut", engine.CUTS, ids=lambda cut: cut.name)
def test_another_pyinfra_runs_as_it_ships_and_says_so_once(monkeypatch, caplog, cut):
    monkeypatch.setattr(pyinfra, "__version__", "3.10.1")

    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        first, second = engine.faster_pyinfra(), engine.faster_pyinfra()  # once a process, however often called

    assert first == second == (engine.GC_FREEZE,)  # Python's, for any pyinfra
    assert _held(cut) == [cut.stock] * len(cut.places) and engine.cuts_in_place() == ()
    assert [record.getMessage() for record in caplog.records] == [
        "pyinfra 3.10.1: sglfleet runs it unpatched (its cuts are written for 3.10.0)"]


@pytest.mark.parametrize("cut", engine.CUTS, ids=lambda cut: cut.name)
def test_a_cut_left_out_on_purpose_is_pyinfras_own(monkeypatch, caplog, cut):
    monkeypatch.setattr(pyinfra, "__version__", engine.PYINFRA)
    engine.faster_pyinfra()  # every cut in first: leaving one out puts pyinfra's own back
    monkeypatch.setenv(engine.SWITCH, f"stock:{cut.name}")

    applied = engine.faster_pyinfra()

    assert _held(cut) == [cut.stock] * len(cut.places)
    others = [other.name for other in engine.CUTS if other is not cut]
    assert applied == (*others, engine.GC_FREEZE) and engine.cuts_in_place() == tuple(others)
    assert caplog.records == []  # the same pyinfra: nothing to say


def test_stock_leaves_every_cut_out_and_a_misspelt_name_stops_the_run(monkeypatch):
    monkeypatch.setattr(pyinfra, "__version__", engine.PYINFRA)
    monkeypatch.setenv(engine.SWITCH, "stock")
    assert engine.faster_pyinfra() == () and engine.cuts_in_place() == ()
    assert engine.left_out("") == frozenset() and engine.left_out("stock") == frozenset(engine.NAMES)
    assert engine.left_out("stock:gc_freeze,imported_names") == {"gc_freeze", "imported_names"}
    for wrong in ("stock:imported_name", "patched", "stock:"):
        with pytest.raises(ValueError, match=f"SGLFLEET_PYINFRA={wrong}: no cut named"):
            engine.left_out(wrong)
