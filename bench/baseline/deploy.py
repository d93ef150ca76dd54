"""
The deploy a pyinfra user would write with stock operations, for bench/run.py.

Same hosts, same stack wheels, same patch text, same stand-in as sglfleet, in its
own tree (/opt/bench-baseline, sglang-baseline.service on port 30001) so the two
never fight over a file. No waves, no gate, no release ids: what a user gets
from pip.packages, files.block, files.put, files.template and systemd.service.

**Example:**

.. code:: shell

    cd bench/baseline && ../../.venv/bin/pyinfra ../../inventory/dev.py deploy.py -y
"""

import zipfile
from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.operations import files, pip, server, systemd

from sglfleet import FILES
from sglfleet.artifacts import wheelhouse
from sglfleet.artifacts.stacks import load_stack
from sglfleet.devfleet.rootfs import PYTHONS, SUITE  # the benchmarks' hosts run the default OS
from sglfleet.plan.host_files import STANDIN_FILES

HERE = Path(__file__).parent
ROOT = "/opt/bench-baseline"
VENV = f"{ROOT}/venv"
KIMI = f"{VENV}/lib/python3.11/site-packages/sglang/srt/models/kimi_k25.py"
# The wheels sglfleet already synced to every host: the same warm wheelhouse, offline.
WHEELHOUSE = "/opt/sglfleet/wheelhouse"

# Pinned from the dev stack's lock, as a user would copy them into a requirements
# list: by the names the wheels' metadata gives (pip.packages compares names as pip
# freeze prints them, and a wheel's file name spells both "huggingface_hub" and
# "charset-normalizer" with "_").
stack = load_stack("dev").for_python(PYTHONS[SUITE])


def _metadata_name(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        return next(line.split(":", 1)[1].strip() for line in archive.read(metadata).decode().splitlines()
                    if line.startswith("Name:"))


local = wheelhouse.ensure(stack)
pins = sorted(f"{_metadata_name(local[f.filename].path)}=={f.filename.split('-')[1]}"
              for f in stack.files if f.filename != stack.uv.filename)
# The methods of files/patches/kimi_k25_eagle3.py, as the text of the block.
patch_lines = (FILES / "patches" / "kimi_k25_eagle3.py").read_text().splitlines()
methods = "\n".join(patch_lines[patch_lines.index("class KimiK25ForConditionalGeneration:") + 1:]).rstrip()

pip.venv(name="Stack venv", path=VENV, python="python3.11")
pip.packages(
    name="Stack packages",
    packages=pins,
    virtualenv=VENV,
    # sglang without its CUDA dependencies, as the dev stack installs it.
    extra_install_args=f"--no-index --find-links {WHEELHOUSE} --no-deps",
)

# The best a stock operation can do: the block right after the class line, so
# the methods land at the top of the class body (see BENCHMARKS.md for what it
# gets wrong).
files.block(
    name="KimiK25 EAGLE-3 methods",
    path=KIMI,
    content=methods,
    line="^class KimiK25ForConditionalGeneration\\(",
    after=True,
    marker="# {mark} EAGLE-3 METHODS",
)

server.user(
    name="System user sglang",
    user="sglang", system=True, home="/var/lib/sglang", shell="/usr/sbin/nologin", create_home=False,
)
for name, source in STANDIN_FILES.items():
    files.put(name=f"Stand-in {name}", src=str(source), dest=f"{ROOT}/standin/{name}", mode="644")

files.put(
    name="Secrets",
    src=StringIO("HF_TOKEN=%s\n" % host.data.get("baseline_hf_token", "hf_bench")),
    dest="/etc/bench-baseline/sglang.env",
    mode="600",
)
unit = files.template(
    name="sglang-baseline.service",
    src=str(HERE / "templates" / "sglang-baseline.service.j2"),
    dest="/etc/systemd/system/sglang-baseline.service",
    mode="644",
    venv=VENV,
    root=ROOT,
)
systemd.daemon_reload(name="Reload units", _if=unit.did_change)
systemd.service(name="sglang-baseline running", service="sglang-baseline.service", running=True, enabled=True)
systemd.service(name="Restart on a unit change", service="sglang-baseline.service", restarted=True,
                _if=unit.did_change)
