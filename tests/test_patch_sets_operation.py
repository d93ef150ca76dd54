"""The patch_sets operation's decisions, as data: the host's bytes in, the commands (or the no-op) out.

Run without a host: pyinfra's context holds a stand-in host and state that record
what the operation says. What the commands do on a real host is the fleet test's
(``tests/test_patch_operation.py``).
"""

from types import SimpleNamespace

import pytest
from pyinfra.api import FileUploadCommand, FunctionCommand
from pyinfra.context import ctx_host, ctx_state

from paths import LAYOUT
from sglfleet.artifacts.patchsets import apply_sets, load_sets
from sglfleet.artifacts.upstream import sglang_file
from sglfleet.operations import patch
from sglfleet.controller.outcomes import fail

SETS = {s.name: s for s in load_sets()}
SERVER_ARGS = sglang_file("0.5.9", "sglang/srt/server_args.py").read_bytes()
API = [SETS["api_key_not_logged"]]
PATCHED = apply_sets(SERVER_ARGS, API)[0]
PATH = f"{LAYOUT.stacks}/dev-1/venv/lib/python3.11/site-packages/sglang/srt/server_args.py"


class Host:
    name = "node1"

    def __init__(self):
        self.noops, self.logs = [], []

    def noop(self, message):
        self.noops.append(message)

    def log_styled(self, message, **kwargs):
        self.logs.append(message)


def run(sets, source):
    """(commands, noops, logs) of one call of the operation's body."""
    host = Host()
    state = SimpleNamespace(is_executing=False, config=SimpleNamespace(DIFF=False),
                            should_check_for_changes=lambda: True)
    with ctx_host.use(host), ctx_state.use(state):
        commands = list(patch.patch_sets._inner(path=PATH, sets=sets, source=source))
    return commands, host.noops, host.logs


def uploaded(commands) -> bytes:
    upload = commands[0]
    assert isinstance(upload, FileUploadCommand)
    return upload.src.getvalue()


CASES = {
    "applies": dict(sets=API, source=SERVER_ARGS, writes=PATCHED),
    "already applied": dict(sets=API, source=PATCHED,
                            noop=f"{PATH} has its patch sets: api_key_not_logged (applies)"),
    "removed set: its block goes": dict(sets=[], source=PATCHED, writes=SERVER_ARGS),
    "no set, no block": dict(sets=[], source=SERVER_ARGS, noop=f"{PATH} has its patch sets: none"),
    "known digest: not read": dict(sets=API, source="ab" * 32,
                                   noop=f"{PATH} has its patch sets (api_key_not_logged; sha256 abababababab)"),
    "no file, no set": dict(sets=[], source=None, noop=f"{PATH} does not exist and no patch set is for it"),
    "upstream has it": dict(sets=[SETS["sm120_symm_mem"]],
                            source=sglang_file("0.5.14", SETS["sm120_symm_mem"].file).read_bytes(),
                            noop=f"{PATH} has its patch sets: sm120_symm_mem (upstream)"),
    "anchor drifted": dict(sets=API, source=SERVER_ARGS.replace(b"    api_key: Optional[str] = None",
                                                                b"    api_key: str = ''"),
                           fails="cannot patch " + PATH + ": patch set api_key_not_logged: anchor missing: "
                                 "no statement `api_key: Optional[str] = None` directly in class ServerArgs"),
    "no file": dict(sets=API, source=None, fails=f"cannot patch {PATH}: the file does not exist; "
                                                 "is the stack's sglang installed?"),
}


@pytest.mark.parametrize("case", CASES)
def test_patch_sets_operation(case):
    spec = CASES[case]
    commands, noops, logs = run(spec["sets"], spec["source"])
    if "writes" in spec:
        assert noops == [] and len(commands) == 2
        assert uploaded(commands) == spec["writes"]
        assert "sha256sum --check" in commands[1] and "mv -f" in commands[1]  # renamed over the bytes read only
    elif "noop" in spec:
        assert (commands, noops) == ([], [spec["noop"]])
    else:
        (command,) = commands
        assert isinstance(command, FunctionCommand) and command.args == (spec["fails"],)
        assert command.function is fail  # fails this host alone, recorded for the run's summary
        assert logs == [f"will fail: {spec['fails']}"] and "\n" not in spec["fails"]


def test_the_one_read_brings_every_patched_file(tmp_path):
    """The host read (run here, in a shell) has each file the patch sets change: a no-op converge stays one command."""
    import hashlib
    import subprocess

    from sglfleet.facts.host import HostRead

    done, other = tmp_path / "server_args.py", tmp_path / "torch_symm_mem.py"
    done.write_bytes(PATCHED)
    other.write_bytes(b"x = 1\n")
    command = HostRead().command(
        stack_id="dev-0123456789ab", python="3.11", uv_version="0.9.2", user="nobody", paths=[],
        patch_path="/nonexistent/kimi_k25.py", patch_known=[], release_id="3f2a9c1d0b7e6a55",
        patch_more={str(done): [hashlib.sha256(PATCHED).hexdigest()], str(other): ["0" * 64],
                    "/nonexistent/x.py": []})
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60).stdout.splitlines()
    found = HostRead().process(output)
    assert found.patches == {str(done): hashlib.sha256(PATCHED).hexdigest(), str(other): b"x = 1\n",
                             "/nonexistent/x.py": None}
