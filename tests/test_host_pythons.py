"""The host tool and the stand-in on every Python a host may have: 3.10 to 3.13, standard library only.

Hosts run them on their own ``python3``: Ubuntu 22.04's 3.10, Debian 12's 3.11,
Ubuntu 24.04's 3.12, Debian 13's 3.13. Each interpreter found on this machine
(``python3.X`` on PATH, or pyenv's) compiles every module shipped to hosts and
runs the host tool from its real entry script; one not found is skipped, named.
"""

import glob
import json
import shutil
import subprocess

import pytest

from sglfleet import FILES, PROJECT_ROOT
from sglfleet.host.layout import Layout
from sglfleet.plan.templates import render
from sglfleet.plan.host_files import HOST_PACKAGE, STANDIN_FILES

PYTHONS = ["3.10", "3.11", "3.12", "3.13"]


def interpreter(version: str) -> str | None:
    """A CPython ``version`` on this machine: on PATH, else pyenv's newest of it."""
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "-V"], capture_output=True).returncode == 0:
        return found
    built = sorted(glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python{version}"))
    return built[-1] if built else None


def _python(version: str) -> str:
    found = interpreter(version)
    if not found:
        pytest.skip(f"no python{version} on this machine (uv cannot download one offline)")
    return found


@pytest.mark.parametrize("version", PYTHONS)
def test_every_module_shipped_to_hosts_compiles_and_imports(version, tmp_path):
    python = _python(version)
    lib = tmp_path / "lib" / "sglfleet_host"
    lib.mkdir(parents=True)
    for path in HOST_PACKAGE.glob("*.py"):
        shutil.copy(path, lib)
    standin = tmp_path / "standin"
    standin.mkdir()
    for name, source in STANDIN_FILES.items():
        shutil.copy(source, standin / name)
    shutil.copy(FILES / "probe" / "verify_stack.py", standin)
    modules = sorted(str(p) for p in tmp_path.rglob("*.py"))
    compiled = subprocess.run([python, "-m", "py_compile", *modules], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    # Imported, not only parsed: a 3.11+ name used at import time (tomllib, datetime.UTC) fails here.
    names = [f"sglfleet_host.{p.stem}" for p in lib.glob("*.py")] + [p.stem for p in standin.glob("*.py")]
    code = "import importlib, sys; [importlib.import_module(n) for n in sys.argv[1:]]"
    imported = subprocess.run([python, "-c", code, *names], capture_output=True, text=True,
                              env={"PYTHONPATH": f"{tmp_path / 'lib'}:{standin}"})
    assert imported.returncode == 0, imported.stderr


@pytest.mark.parametrize("version", PYTHONS)
def test_the_host_tool_answers_from_its_entry_script(version, tmp_path):
    python = _python(version)
    layout = Layout(root=str(tmp_path / "opt"), etc=str(tmp_path / "etc"))
    shutil.copytree(HOST_PACKAGE, f"{layout.lib}/sglfleet_host", ignore=shutil.ignore_patterns("__pycache__"))
    entry = tmp_path / "sglfleet-release"
    entry.write_text(render("sglfleet-release.j2", FILES / "host", layout=layout))
    done = subprocess.run([python, str(entry), "state"], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["current"] is None and json.loads(done.stdout)["releases"] == []
