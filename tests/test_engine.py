"""sglfleet.hooks.engine's replacements return what pyinfra's own return, on the same stacks and files."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pyinfra
import pytest
from pyinfra.api import util
from pyinfra_cli import inventory

from sglfleet import PROJECT_ROOT
from sglfleet.hooks import engine

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


def test_faster_pyinfra_puts_them_where_pyinfra_calls_its_own(monkeypatch):
    from pyinfra.api import arguments, facts

    operations = sys.modules["pyinfra.api.operation"]
    for module, name in ((operations, "get_operation_order_from_stack"), (arguments, "all_global_arguments"),
                         (facts, "all_global_arguments"), (inventory, "_get_imported_names")):
        monkeypatch.setattr(module, name, getattr(module, name))  # put back after the test

    engine.faster_pyinfra()

    assert operations.get_operation_order_from_stack is engine.operation_order
    assert arguments.all_global_arguments is facts.all_global_arguments is engine.all_global_arguments
    assert inventory._get_imported_names is engine.imported_names
