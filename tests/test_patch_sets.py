"""Patch sets: every shipped set against the real wheel of every sglang version it names."""

import dataclasses
import json
import os
import logging
import types

import pytest

from sglfleet.artifacts import patchsets
from sglfleet.artifacts.patcher import PatchRefused, load_patch
from sglfleet.artifacts.patchsets import (APPLIES, NOT_FOR, UPSTREAM, PatchSetError, apply_sets, digest,
                                          for_file, for_version, load_set, load_sets, status, strip)
from sglfleet.shipped.stub_import import load_with_stubs
from sglfleet.artifacts.upstream import CACHE, sglang_file

SETS = load_sets()
BY_NAME = {s.name: s for s in SETS}
# What each shipped set is, per version, read from the real wheels.
EXPECTED = {
    "kimi_k25_eagle3": {"0.5.9": APPLIES, "0.5.10": UPSTREAM, "0.5.14": UPSTREAM, "0.5.15": UPSTREAM,
                        "0.5.23": UPSTREAM},
    "sm120_symm_mem": {"0.5.9": APPLIES, "0.5.10": APPLIES, **dict.fromkeys(
        ["0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1"], APPLIES),
        "0.5.14": UPSTREAM, "0.5.23": UPSTREAM},
    "api_key_not_logged": {"0.5.9": APPLIES, "0.5.10": APPLIES},
    "api_key_not_logged_annotated": {"0.5.14": APPLIES, "0.5.15": APPLIES, "0.5.15.post1": APPLIES, "0.5.16": APPLIES},
    "server_info_keys_redacted": dict.fromkeys(
        ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1"], APPLIES),
    "server_info_keys_redacted_kv_events": dict.fromkeys(["0.5.13", "0.5.13.post1", "0.5.14"], APPLIES),
    "launch_command_keys_redacted": {"0.5.22": APPLIES, "0.5.23": APPLIES},
    "rerank_template_sandboxed": {"0.5.9": APPLIES, "0.5.10": APPLIES, "0.5.10.post1": APPLIES,
                                  "0.5.11": UPSTREAM, "0.5.14": UPSTREAM, "0.5.23": UPSTREAM},
    "server_info_keys_redacted_msgspec": dict.fromkeys(["0.5.15", "0.5.15.post1", "0.5.16"], APPLIES),
    "server_info_keys_redacted_watermark": {"0.5.23": APPLIES},
    "server_info_keys_redacted_watermark_0522": {"0.5.22": APPLIES},
}
API_KEY = [("api_key_not_logged", "0.5.9"), ("api_key_not_logged", "0.5.10"),
           ("api_key_not_logged_annotated", "0.5.14"), ("api_key_not_logged_annotated", "0.5.15")]
CASES = [(s.name, version) for s in SETS for version in s.versions]
SYMM = "sglang/srt/distributed/device_communicators/torch_symm_mem.py"


def test_the_shipped_sets_and_the_versions_they_name():
    assert {s.name: dict.fromkeys(s.versions) for s in SETS} == {
        name: dict.fromkeys(versions) for name, versions in EXPECTED.items()}
    assert [s.name for s in SETS] == sorted(EXPECTED)  # applied in file-name order
    for s in SETS:
        assert s.summary and s.upstream and s.file.startswith("sglang/")


def test_the_kimi_set_keeps_the_digest_of_the_patch_file():
    # Release ids of stacks with only the KimiK25 set stay as they were before patch sets.
    kimi = BY_NAME["kimi_k25_eagle3"]
    assert kimi.digest == load_patch().digest
    assert digest([kimi]) == kimi.digest and digest([]) == ""
    assert digest(SETS) not in {s.digest for s in SETS}


@pytest.mark.parametrize("name, version", CASES)
def test_every_set_on_every_version_it_names(name, version):
    patch_set = BY_NAME[name]
    original = sglang_file(version, patch_set.file).read_bytes()

    assert status(original, patch_set, version) == EXPECTED[name][version]
    result, outcomes = apply_sets(original, [patch_set])
    assert outcomes == [(patch_set, EXPECTED[name][version])]
    if EXPECTED[name][version] == UPSTREAM:
        assert result == original  # byte-identical: upstream's own fix is left alone
        return
    assert result != original
    compile(result, patch_set.file, "exec", dont_inherit=True)
    assert not patch_set.verify.failures(result, patch_set.target, patch_set.function)
    assert apply_sets(result, [patch_set])[0] == result  # a second apply changes nothing
    assert strip(result) == original == patch_set.revert(result)  # one block per change, all else kept
    assert status(result, patch_set, version) == APPLIES


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10", "0.5.14", "0.5.15", "0.5.22", "0.5.23"])
def test_all_sets_of_a_version_on_one_file_each(version):
    for file in patchsets.files(for_version(SETS, version)):
        original = sglang_file(version, file).read_bytes()
        sets = for_file(SETS, version, file)
        result, _ = apply_sets(original, sets)
        assert apply_sets(result, sets)[0] == result


def test_a_version_no_set_names_is_not_for_it():
    source = sglang_file("0.5.9", SYMM).read_bytes()
    assert status(source, BY_NAME["sm120_symm_mem"], "0.5.8") == NOT_FOR
    assert status(source, BY_NAME["api_key_not_logged"], "0.5.23") == NOT_FOR


def test_removing_a_set_gives_back_the_file_without_it():
    original = sglang_file("0.5.9", "sglang/srt/server_args.py").read_bytes()
    patched, _ = apply_sets(original, [BY_NAME["api_key_not_logged"]])
    assert apply_sets(patched, [])[0] == original


# --- drift and refusals ------------------------------------------------------------


@pytest.mark.parametrize("name, drift", [
    ("sm120_symm_mem", (b"if self.device_capability < 9:", b"if self.device_capability < 8:")),
    ("api_key_not_logged", (b"    admin_api_key: Optional[str] = None", b"    admin_api_key: str = None")),
    ("kimi_k25_eagle3", (b"class KimiK25ForConditionalGeneration(", b"class KimiK25Model(")),
    ("server_info_keys_redacted", (b"async def server_info():", b"async def server_information():")),
    ("server_info_keys_redacted", (b'        "version": __version__,\n    }', b'        "v": __version__,\n    }')),
])
def test_a_drifted_anchor_is_refused_and_leaves_the_file(name, drift):
    patch_set = BY_NAME[name]
    drifted = sglang_file("0.5.9", patch_set.file).read_bytes().replace(*drift)
    before = bytes(drifted)
    with pytest.raises(PatchRefused) as refusal:
        apply_sets(drifted, [patch_set])
    message = str(refusal.value)
    assert message.startswith(f"patch set {name}: ") and "\n" not in message
    assert "missing" in message or "no class" in message
    assert drifted == before


def test_a_function_anchor_is_one_top_level_function():
    patch_set = BY_NAME["server_info_keys_redacted"]
    source = sglang_file("0.5.9", HTTP_SERVER).read_bytes()
    assert patch_set.anchor == "function server_info"
    for drift, reason in [(b"server_info = None\n", "rebinds server_info at the top level"),
                          (b"async def server_info():\n    pass\n", "anchor ambiguous: 2 top-level functions")]:
        with pytest.raises(PatchRefused, match=f"^patch set server_info_keys_redacted: (line \\d+ )?{reason}"):
            apply_sets(source + b"\n\n" + drift, [patch_set])
    with pytest.raises(PatchRefused, match="anchor missing: no top-level function server_info"):
        apply_sets(source.replace(b"async def server_info():", b"async def _server_info():"), [patch_set])


def test_an_ambiguous_anchor_is_refused():
    patch_set = BY_NAME["api_key_not_logged"]
    source = sglang_file("0.5.9", patch_set.file).read_bytes()
    twice = source.replace(b"    api_key: Optional[str] = None\n",
                           b"    api_key: Optional[str] = None\n    api_key: Optional[str] = None\n", 1)
    with pytest.raises(PatchRefused, match=r"^patch set api_key_not_logged: anchor ambiguous: 2 statements "
                                           r"`api_key: Optional\[str\] = None` in class ServerArgs \(lines 404, 405\)$"):
        apply_sets(twice, [patch_set])


def test_the_replaced_statement_is_found_by_its_syntax_not_its_text():
    patch_set = BY_NAME["sm120_symm_mem"]
    source = sglang_file("0.5.9", SYMM).read_bytes()
    reformatted = source.replace(b"if self.device_capability < 9:", b"if (self.device_capability<9):  # why")
    result, _ = apply_sets(reformatted, [patch_set])
    assert b"        # |         if (self.device_capability<9):  # why\n" in result
    assert strip(result) == reformatted


def test_crlf_file_round_trips():
    patch_set = BY_NAME["sm120_symm_mem"]
    source = sglang_file("0.5.9", SYMM).read_bytes().replace(b"\n", b"\r\n")
    result, _ = apply_sets(source, [patch_set])
    assert result.count(b"\n") == result.count(b"\r\n") and strip(result) == source


# --- what the backports do, run on the patched files ----------------------------------


def _symm_mem_module(source: bytes, tmp_path, capability: int):
    path = tmp_path / "torch_symm_mem.py"
    path.write_bytes(source)
    module = load_with_stubs(path, "sglang.srt.distributed.device_communicators.torch_symm_mem")
    sizes = {}
    exec(sglang_file("0.5.9", "sglang/srt/distributed/device_communicators/all_reduce_utils.py").read_text(), sizes)
    module.TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = sizes["TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"]
    module.torch_symm_mem_available = True
    module.torch = types.SimpleNamespace(
        device=lambda name: name, bfloat16="bf16",
        cuda=types.SimpleNamespace(set_device=lambda device: None,
                                   get_device_capability=lambda device: (capability, 0)))
    module.dist = types.SimpleNamespace(get_world_size=lambda group: 8)
    module.logger = logging.getLogger("symm-mem-test")
    return module


def test_sm120_symm_mem_unpatched_raises_key_error_and_patched_disables(tmp_path, caplog):
    source = sglang_file("0.5.9", SYMM).read_bytes()
    unpatched = _symm_mem_module(source, tmp_path, 12)
    with pytest.raises(KeyError, match="12"):
        unpatched.TorchSymmMemCommunicator(group=None, device=0)

    patched = _symm_mem_module(apply_sets(source, [BY_NAME["sm120_symm_mem"]])[0], tmp_path, 12)
    with caplog.at_level(logging.WARNING, logger="symm-mem-test"):
        communicator = patched.TorchSymmMemCommunicator(group=None, device=0)
    assert communicator.disabled is True
    assert "Device capability 12 not supported" in caplog.text
    # Below SM90, as before: disabled with the same warning.
    assert _symm_mem_module(apply_sets(source, [BY_NAME["sm120_symm_mem"]])[0], tmp_path, 8) \
        .TorchSymmMemCommunicator(group=None, device=0).disabled is True


@pytest.mark.parametrize("name, version", API_KEY)
def test_api_key_left_out_of_the_logged_server_args(name, version):
    import ast
    from typing import Annotated

    patch_set = BY_NAME[name]
    result, _ = apply_sets(sglang_file(version, patch_set.file).read_bytes(), [patch_set])
    # The two fields, as the patched class body has them, in a dataclass of their own:
    # the file's dataclass needs all of sglang to import.
    text = result.decode()
    [cls] = [n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"]
    fields = [ast.get_source_segment(text, n) for n in cls.body
              if isinstance(n, ast.AnnAssign) and n.target.id in ("api_key", "admin_api_key")]
    assert len(fields) == 2
    namespace: dict = {"dataclasses": dataclasses, "A": Annotated}
    exec("from typing import Optional\n@dataclasses.dataclass\nclass Args:\n    model: str = 'm'\n"
         + "".join(f"    {field}\n" for field in fields), namespace)
    args = namespace["Args"](api_key="sk-secret-1", admin_api_key="sk-secret-2")
    assert "sk-secret" not in repr(args) and f"{args=}" == "args=Args(model='m')"
    assert dataclasses.asdict(args)["api_key"] == "sk-secret-1"  # /server_info and the CLI unchanged
    assert namespace["Args"]().api_key is None


# --- the declaration ------------------------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ("summary = 'x'\n", "`upstream` must be a non-empty string"),
    ("this is not toml", "does not parse"),
    ('summary="s"\nupstream="local"\nfile="a.py"\nversions=[]\n', "`versions` must list"),
    ('summary="s"\nupstream="local"\nfile="a.py"\nversions=["0.5.9"]\n[anchor]\nclass="A"\n'
     '[[change]]\nreplace="x = (1"\nwith="x = 2"\n[verify]\ncontains=["x"]\n[upstream_has]\ncontains=["y"]\n',
     "does not parse"),
    ('summary="s"\nupstream="local"\nfile="a.py"\nversions=["0.5.9"]\ncolour="red"\n', "unknown key colour"),
    ('summary="s"\nupstream="local"\nfile="a.py"\nversions=["0.5.9"]\n[anchor]\nclass="A"\n'
     '[[change]]\nreplace="x = 1"\nwith="x = 2"\n[verify]\ncontains=["x"]\n', "[upstream_has] needs"),
    ('summary="s"\nupstream="local"\nfile="a.py"\nversions=["0.5.9"]\n[anchor]\nmodule="m"\n', "`function` alone"),
    ('summary="s"\nupstream="local"\nfile="a.py"\nversions=["0.5.9"]\n[anchor]\nfunction="f"\n'
     '[[change]]\nmethods="m.py"\n', "`methods` go into a class"),
])
def test_a_set_that_does_not_parse_is_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "mine.toml"
    path.write_text(text)
    with pytest.raises(PatchSetError) as error:
        load_set(path)
    assert str(error.value).startswith(f"patch set {path}: ")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_operator_sets_come_after_the_shipped_ones_and_may_not_take_their_names(tmp_path):
    (tmp_path / "00_mine.toml").write_text(BY_NAME["sm120_symm_mem"].path.read_text())
    assert [s.name for s in load_sets(tmp_path)] == [s.name for s in SETS] + ["00_mine"]
    (tmp_path / "sm120_symm_mem.toml").write_text(BY_NAME["sm120_symm_mem"].path.read_text())
    with pytest.raises(PatchSetError, match="a shipped set has that name"):
        load_sets(tmp_path)


# --- the venv's drift check leaves the patched files out -------------------------------


def test_snapshot_check_leaves_out_the_patched_files_only(tmp_path):
    import subprocess

    from sglfleet.host.stacks import PATCHED, snapshot_check_command, snapshot_command

    venv = tmp_path / "venv"
    site = venv / "lib/python3.11/site-packages"
    for member in (PATCHED, "sglang/srt/server_args.py", "sglang/srt/other.py"):
        (site / member).parent.mkdir(parents=True, exist_ok=True)
        (site / member).write_text("x = 1\n")
    recorded = tmp_path / "venv.snapshot"
    subprocess.run(f"{snapshot_command(str(venv), '3.11')} > {recorded}", shell=True, check=True)
    for member in ("sglang/srt/server_args.py", "sglang/srt/other.py"):
        (site / member).write_text("x = 2  # patched\n")

    def check(members):
        command = snapshot_check_command(str(venv), "3.11", str(recorded), members)
        return subprocess.run(command, shell=True, capture_output=True, text=True).stdout.splitlines()

    found = check((PATCHED, "sglang/srt/server_args.py"))
    assert [line.split("\t")[0] for line in found] == ["< lib/python3.11/site-packages/sglang/srt/other.py",
                                                       "> lib/python3.11/site-packages/sglang/srt/other.py"]
    # A file no set changes any more is drift again: the stack is built again without the patch.
    assert len(check((PATCHED,))) == 4 and len(check(())) == 4


@pytest.mark.parametrize("name, version", API_KEY)
def test_api_key_patch_leaves_the_flags_and_their_defaults_as_they_were(name, version, tmp_path):
    # The lint and the stand-in read server_args.py on the host: the patched file gives the same flags.
    import shutil

    from sglfleet.plan.flagsets import flagset_for
    from sglfleet.shipped.server_flags import load_flags

    before = flagset_for(version)
    tree = tmp_path / "tree"  # from 0.5.14 the flags come from dataclasses all over sglang/srt
    shutil.copytree(CACHE / "tree" / version, tree)
    patched = tree / "sglang/srt/server_args.py"
    patched.write_bytes(apply_sets(patched.read_bytes(), [BY_NAME[name]])[0])
    after = load_flags(patched, cache_dir=tmp_path / "cache")
    assert after.flags == before.flags
    assert after.fields == before.fields


def test_a_check_matches_whole_names_not_the_end_of_a_longer_one():
    # `api_key: ...` must not be found in `admin_api_key: ...`: verify and upstream_has would pass wrongly.
    patch_set = BY_NAME["api_key_not_logged"]
    source = sglang_file("0.5.9", patch_set.file).read_bytes()
    only_admin = source.replace(b"    admin_api_key: Optional[str] = None",
                                b"    admin_api_key: Optional[str] = dataclasses.field(default=None, repr=False)")
    assert not patch_set.has_upstream(only_admin)
    assert patch_set.verify.failures(only_admin, "ServerArgs", None) == [
        "lacks `api_key: Optional[str] = dataclasses.field(default=None, repr=False)`"]


# --- /server_info without the API keys' values: the patched code run --------------------------

HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"
WATERMARK = "sglang/srt/sampling/watermarking/core.py"
SERVER_INFO = {"server_info_keys_redacted": ["0.5.9", "0.5.12.post1"],
               "server_info_keys_redacted_kv_events": ["0.5.13", "0.5.14"],
               "server_info_keys_redacted_msgspec": ["0.5.15", "0.5.16"]}
SECRETS = ("api_key", "admin_api_key", "ssl_keyfile_password")
# (api_key, admin_api_key, ssl_keyfile_password) as launched -> as /server_info answers them, patched.
KEY_CASES = [(("sk-client", "sk-admin", "sk-ssl"), ("<redacted>",) * 3),
             ((None, "sk-admin", None), (None, "<redacted>", None)),
             ((None, None, None), (None, None, None))]


def _top_level(text: str, name: str):
    import ast

    [node] = [n for n in ast.parse(text).body if getattr(n, "name", None) == name]
    return node


def _route(source: bytes, version: str, keys: tuple):
    """The file's own ``server_info`` route run once, on a stand-in ``_global_state``: its answer and
    the internal states it was handed (a scheduler's are ``vars()`` of its ServerArgs)."""
    import ast
    import asyncio
    from typing import Any, Dict, List

    text = source.decode()
    node = _top_level(text, "server_info")
    node.decorator_list = []  # @app.get(...): the route as a plain coroutine

    @dataclasses.dataclass
    class ServerArgs:
        model_path: str = "/models/tiny"
        api_key: str | None = None
        admin_api_key: str | None = None
        ssl_keyfile_password: str | None = None

        def describe_kv_events_publisher(self):
            return None

    server_args = ServerArgs("/models/tiny", *keys)
    states = [{**vars(server_args), "last_gen_throughput": 0.0}, {**vars(server_args), "dp_rank": 1}]

    async def get_internal_state():
        return states

    namespace = {"dataclasses": dataclasses, "List": List, "Dict": Dict, "Any": Any, "__version__": version,
                 "_global_state": types.SimpleNamespace(
                     tokenizer_manager=types.SimpleNamespace(server_args=server_args,
                                                             get_internal_state=get_internal_state),
                     scheduler_info={"max_total_num_tokens": 4096})}
    if "msgspec_to_builtins" in text:  # 0.5.15 on: the wheel's own, its Struct branch unreachable here
        utils = {"msgspec": types.SimpleNamespace(Struct=type("Struct", (), {})), "dataclasses": dataclasses, "Any": Any}
        convert = _top_level(sglang_file(version, "sglang/srt/utils/msgspec_utils.py").read_text(), "msgspec_to_builtins")
        exec(compile(ast.Module([convert], []), "msgspec_utils.py", "exec"), utils)
        namespace["msgspec_to_builtins"] = utils["msgspec_to_builtins"]
    exec(compile(ast.Module([node], []), HTTP_SERVER, "exec"), namespace)
    return asyncio.run(namespace["server_info"]()), states


@pytest.mark.parametrize("name, version", [(n, v) for n, vs in SERVER_INFO.items() for v in vs])
@pytest.mark.parametrize("keys, shown", KEY_CASES)
def test_server_info_answers_the_keys_redacted_and_all_else_as_before(name, version, keys, shown):
    original = sglang_file(version, HTTP_SERVER).read_bytes()
    before, _ = _route(original, version, keys)
    after, handed = _route(apply_sets(original, [BY_NAME[name]])[0], version, keys)

    assert _secrets(before) == [keys] * 3  # unpatched: in plain text, the internal states too
    assert _secrets(after) == [shown] * 3 and "sk-" not in json.dumps(after)
    assert _without_secrets(after) == _without_secrets(before)  # the keys stay present; nothing else changes
    assert [tuple(s[k] for k in SECRETS) for s in handed] == [keys, keys]  # the schedulers' own left alone


def _secrets(answer: dict) -> list[tuple]:
    """The three fields, at the top of an answer and in each of its internal states."""
    return [tuple(state[k] for k in SECRETS) for state in [answer, *answer["internal_states"]]]


def _without_secrets(answer: dict) -> dict:
    def drop(state: dict) -> dict:
        return {k: v for k, v in state.items() if k not in SECRETS}
    return {**drop(answer), "internal_states": [drop(s) for s in answer["internal_states"]]}


def _watermark_module(source: bytes, tmp_path):
    # The file imports torch and msgspec; only the two redaction functions run, on plain data.
    path = tmp_path / "core.py"
    path.write_bytes(source)
    module = load_with_stubs(path, "sglang.srt.sampling.watermarking.core")
    module.msgspec = types.SimpleNamespace(Struct=type("Struct", (), {}))
    module.WatermarkRequestConfig = type("WatermarkRequestConfig", (), {})
    module.WatermarkServerConfig = type("WatermarkServerConfig", (), {})
    return module


@pytest.mark.parametrize("version, name", [("0.5.22", "server_info_keys_redacted_watermark_0522"),
                                           ("0.5.23", "server_info_keys_redacted_watermark")])
@pytest.mark.parametrize("keys, shown", KEY_CASES)
def test_resolved_server_args_are_redacted_wherever_sglang_redacts_the_watermark(version, name, keys, shown,
                                                                                tmp_path):
    # /server_info (its internal states included), gRPC, the start-up log and the dumps all pass
    # resolved_dict() through redact_watermark_secrets (0.5.23 http_server.py:883, engine.py:174).
    original = sglang_file(version, WATERMARK).read_bytes()
    resolved = {"model_path": "/models/tiny", **dict(zip(SECRETS, keys)), "watermark_key": None, "tp_size": 1}
    info = {**resolved, "launch_command": "sglang serve", "internal_states": [dict(resolved), dict(resolved)]}
    before = _watermark_module(original, tmp_path).redact_watermark_secrets(info)
    after = _watermark_module(apply_sets(original, [BY_NAME[name]])[0], tmp_path).redact_watermark_secrets(info)

    assert _secrets(before) == [keys] * 3
    assert _secrets(after) == [shown] * 3 and "sk-" not in json.dumps(after)
    assert after["watermark_key"] == before["watermark_key"] == "<redacted>"  # upstream's own, unchanged
    assert _secrets(info) == [keys] * 3  # a copy, as upstream's
    assert _without_secrets(after) == _without_secrets(before)


@pytest.mark.parametrize("version", ["0.5.22", "0.5.23"])
@pytest.mark.parametrize("argv, shown", [
    # sglfleet's launch script: the key in a --config file, which 0.5.23 merges into argv first.
    (["--api-key", "sk-client", "--model-path", "/models/tiny"], "--api-key <redacted> --model-path /models/tiny"),
    (["--model-path", "m", "--admin-api-key=sk-admin", "--api-key=sk-client"],
     "--model-path m --admin-api-key=<redacted> --api-key=<redacted>"),
    (["--watermark-config", "w.json", "--admin-api-key", "sk-admin", "--ssl-keyfile-password", "sk-ssl"],
     "--watermark-config <redacted> --admin-api-key <redacted> --ssl-keyfile-password <redacted>"),
    (["--model-path", "api-key"], "--model-path api-key"),
])
def test_launch_command_without_the_keys(version, argv, shown, tmp_path):
    original = sglang_file(version, WATERMARK).read_bytes()
    unpatched = _watermark_module(original, tmp_path).redact_watermark_command_line(argv)
    patched = _watermark_module(apply_sets(original, [BY_NAME["launch_command_keys_redacted"]])[0],
                                tmp_path).redact_watermark_command_line(argv)
    assert ("sk-" in unpatched) == ("sk-" in " ".join(argv))  # upstream redacts the watermark's config alone
    assert patched == shown and "sk-" not in patched


# --- /v1/rerank's templates in a sandbox ---------------------------------------------------------

RERANK = "sglang/srt/entrypoints/openai/serving_rerank.py"
# CVE-2026-5760's shape (sgl-project/sglang#23660), harmless: a template that reaches the os module.
HOSTILE = '{{ lipsum.__globals__["os"].getpid() }}{% for m in messages %}{{ m["content"] }}{% endfor %}'


def _rerank_render(source: bytes, template: str) -> str:
    """The file's own ``_render_jinja_chat_template`` (and its ``_get_jinja_env``), run once."""
    import ast

    text = source.decode()
    nodes = [n for n in ast.parse(text).body if getattr(n, "name", None) in
             ("_get_jinja_env", "_render_jinja_chat_template", "_extract_text_from_content")]
    from typing import Optional

    namespace: dict = {"Optional": Optional, "RerankContent": object, "ChatCompletionMessageContentTextPart": str}
    exec(compile(ast.Module(nodes, []), RERANK, "exec"), namespace)
    return namespace["_render_jinja_chat_template"](template, query="q", document="d", instruct=None)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10.post1"])
def test_rerank_renders_a_hostile_template_in_a_sandbox_once_patched(version):
    import jinja2.exceptions

    original = sglang_file(version, RERANK).read_bytes()
    assert _rerank_render(original, HOSTILE) == f"{os.getpid()}qd"  # unpatched: the template reached os
    patched = apply_sets(original, [BY_NAME["rerank_template_sandboxed"]])[0]
    with pytest.raises(jinja2.exceptions.SecurityError):
        _rerank_render(patched, HOSTILE)
    reranker = '{% for m in messages %}<{{ m["role"] }}>{{ m["content"] }}{% endfor %}{{ instruct | default("x") }}'
    assert _rerank_render(patched, reranker) == _rerank_render(original, reranker) == "<user>q<user>dx"
