"""server_flags against the real sglang server_args.py of 0.5.9 and of a later release."""

import argparse
import zipfile
from pathlib import Path

import pytest

from sglfleet import PROJECT_ROOT
from sglfleet.shipped.stub_import import load_with_stubs
from sglfleet.artifacts.upstream import sglang_file, sglang_wheel
from sglfleet.shipped.server_flags import build_parser, extract_flags, load_flags


def python_tree(version: str) -> Path:
    """The .py files of the real sglang wheel, extracted once under .cache/."""
    root = PROJECT_ROOT / ".cache" / "standin" / f"sglang-{version}-py"
    if not (root / "sglang" / "srt" / "server_args.py").is_file():
        partial = root.with_name(root.name + ".part")
        with zipfile.ZipFile(sglang_wheel(version)) as wheel:
            wheel.extractall(partial, [n for n in wheel.namelist() if n.endswith(".py")])
        partial.rename(root)
    return root


@pytest.fixture(scope="module")
def flags_059(tmp_path_factory):
    return load_flags(sglang_file("0.5.9", "sglang/srt/server_args.py"),
                      cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def flags_0523(tmp_path_factory):
    return load_flags(python_tree("0.5.23") / "sglang/srt/server_args.py",
                      cache_dir=tmp_path_factory.mktemp("cache"))


def test_059_flags_the_deploy_uses(flags_059):
    spec = flags_059.spec("--speculative-algorithm")
    assert spec.choices == ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
    draft = flags_059.spec("--speculative-draft-model")
    assert draft.options == ["--speculative-draft-model-path", "--speculative-draft-model"]
    assert flags_059.aliases["--speculative-draft-model"] == "--speculative-draft-model-path"
    # 0.5.9 declares --tensor-parallel-size first; from_cli_args copies it to tp_size.
    tp = flags_059.spec("--tp-size")
    assert (tp.dest, tp.field, tp.type, tp.effective_default) == (
        "tensor_parallel_size", "tp_size", "int", 1)
    for flag in ("--enable-torch-symm-mem", "--enable-flashinfer-allreduce-fusion",
                 "--enable-metrics", "--trust-remote-code"):
        assert flags_059.spec(flag).action == "store_true"
        assert flags_059.spec(flag).effective_default is False
    assert flags_059.spec("--api-key").effective_default is None
    assert flags_059.spec("--host").effective_default == "127.0.0.1"
    assert flags_059.spec("--port").effective_default == 30000
    assert flags_059.spec("--model").required
    assert flags_059.spec("--mem-fraction-static").type == "float"
    assert flags_059.spec("--cuda-graph-max-bs").type == "int"
    assert len(flags_059.flags) == 331


def test_059_parser_matches_sglangs_own(flags_059):
    """Our parser against the one sglang 0.5.9 builds itself (run with stubbed imports)."""
    module = load_with_stubs(sglang_file("0.5.9", "sglang/srt/server_args.py"),
                             "sglang.srt.server_args")
    real = argparse.ArgumentParser()
    module.ServerArgs.add_cli_args(real)
    ours = build_parser(flags_059)

    def table(parser):
        return {tuple(a.option_strings): a for a in parser._actions}

    theirs, mine = table(real), table(ours)
    assert theirs.keys() == mine.keys()
    for options, action in theirs.items():
        other = mine[options]
        assert type(action).__name__ == type(other).__name__, options
        for attr in ("dest", "nargs", "required", "const"):
            assert getattr(action, attr) == getattr(other, attr), (options, attr)
        if "stub" not in repr(action.default):
            assert action.default == other.default, options
        if action.type is not None and "stub" not in repr(action.type):
            assert action.type.__name__ == other.type.__name__, options
        if action.choices and "stub" not in repr(action.choices):
            if isinstance(action.choices, set):  # a set literal: its order is the hash seed's
                assert action.choices == set(other.choices), options
            else:
                assert list(action.choices) == list(other.choices), options


def test_parser_rejects_what_sglang_rejects(flags_059, capsys):
    parser = build_parser(flags_059, prog="launch_server.py")
    args = parser.parse_args(["--model", "m", "--tp-size", "8", "--speculative-draft-model", "d",
                              "--speculative-algorithm", "EAGLE3", "--enable-metrics"])
    assert (args.model_path, args.tensor_parallel_size, args.speculative_draft_model_path,
            args.enable_metrics, args.port) == ("m", 8, "d", True, 30000)
    for argv, message in (
            (["--model", "m", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
            (["--model", "m", "--speculative-algorithm", "EAGLE4"], "argument --speculative-algorithm: invalid choice: 'EAGLE4'"),
            (["--model", "m", "--port", "x"], "argument --port: invalid int value: 'x'"),
            ([], "the following arguments are required: --model-path/--model")):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(argv)
        assert exit_.value.code == 2
        assert f"launch_server.py: error: {message}" in capsys.readouterr().err


def test_0523_fields_declared_in_arg_groups(flags_0523):
    # 0.5.23 declares flags as Annotated fields in sglang/srt/arg_groups/fields/*.py.
    assert flags_0523.prog == "sglang serve"
    assert len(flags_0523.flags) > 500
    tp = flags_0523.spec("--tensor-parallel-size")
    assert (tp.options[0], tp.dest, tp.field, tp.effective_default) == (
        "--tp-size", "tp_size", "tp_size", 1)
    assert flags_0523.aliases["--speculative-draft-model"] == "--speculative-draft-model-path"
    assert flags_0523.spec("--enable-torch-symm-mem").action == "store_true"
    assert flags_0523.spec("--enable-flashinfer-allreduce-fusion").action == "store_true"
    assert flags_0523.spec("--host").effective_default == "127.0.0.1"
    assert flags_0523.spec("--port").effective_default == 30000
    assert flags_0523.spec("--api-key").type == "str"
    # Choices imported from another module's class body resolve.
    assert flags_0523.spec("--cuda-graph-backend-decode").choices == [
        "full", "breakable", "disabled"]
    # argparse.BooleanOptionalAction adds --no- forms.
    assert flags_0523.spec("--no-dllm-fdfo").dest == "dllm_fdfo"
    args = build_parser(flags_0523).parse_args(
        ["--model", "m", "--tensor-parallel-size", "4", "--no-dllm-fdfo"])
    assert (args.tp_size, args.dllm_fdfo) == (4, False)


def test_flags_only_in_one_release_are_told_apart(flags_059, flags_0523):
    only_new = set(flags_0523.options) - set(flags_059.options)
    assert "--attn-dp-size" in only_new
    with pytest.raises(SystemExit):
        build_parser(flags_059).parse_args(["--model", "m", "--attn-dp-size", "2"])


def test_load_flags_caches_by_sha256(tmp_path, monkeypatch):
    source = sglang_file("0.5.9", "sglang/srt/server_args.py")
    site = tmp_path / "site" / "sglang" / "srt"
    site.mkdir(parents=True)
    (site / "server_args.py").write_bytes(source.read_bytes())
    monkeypatch.setenv("SGLFLEET_CACHE", str(tmp_path / "cache"))
    first = load_flags(site / "server_args.py")
    entries = list((tmp_path / "cache" / "flags").glob(f"{first.source_sha256}-*.json"))
    assert len(entries) == 1
    # A second load reads the cache entry, not the source.
    entries[0].write_text(entries[0].read_text().replace('"prog": null', '"prog": "cached"'))
    assert load_flags(site / "server_args.py").prog == "cached"
    # Another file content is another key.
    (site / "server_args.py").write_bytes(source.read_bytes() + b"\n# changed\n")
    assert load_flags(site / "server_args.py").prog is None
    assert len(list((tmp_path / "cache" / "flags").glob("*.json"))) == 2


def test_unwritable_cache_is_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    flags = load_flags(sglang_file("0.5.9", "sglang/srt/server_args.py"), cache_dir=blocker)
    assert "--api-key" in flags.options


def test_extract_from_text_alone():
    text = sglang_file("0.5.9", "sglang/srt/server_args.py").read_text()
    flags = extract_flags(text)
    assert flags.spec("--speculative-num-steps").type == "int"
    # Choices imported from other modules stay unresolved without them: any value passes.
    assert flags.spec("--reasoning-parser").choices is None
    assert flags.spec("--reasoning-parser").choices_expr
