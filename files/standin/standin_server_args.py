"""
The stand-in's ServerArgs: the installed sglang's flags, resolved as 0.5.9 resolves them.

- ``find_sglang``/``sglang_version``: the installed package, never imported.
- ``merge_config``: ``--config FILE`` as 0.5.9's ``ConfigArgumentMerger``.
- ``resolve``: the parts of ``ServerArgs.__post_init__`` (``srt/server_args.py:703-797``)
  that decide speculative decoding and parallelism, with 0.5.9's defaults,
  warnings and refusals (same exception types and messages):

  - ``_handle_missing_default_values`` (846-857): tokenizer path and served
    model name default to the model path;
  - ``_handle_page_size`` (2055-2057): page size 1;
  - ``_handle_data_parallelism`` (2109-2125), ``_handle_context_parallelism``
    (2083-2107): DP attention off with one DP rank, the bare ``assert``s on
    ``tp_size``;
  - ``_handle_speculative_decoding`` (2330-2500): NEXTN is EAGLE; 48 running
    requests unless given; overlap schedule off (on with
    ``SGLANG_ENABLE_SPEC_V2``); the draft defaults to the model for DeepSeek
    MTP architectures; steps/topk/draft tokens chosen by
    ``auto_choose_speculative_params`` (5741-5775: (3, 1, 4) for
    ``DeepseekV3ForCausalLM`` and for every architecture not listed, which
    includes ``KimiK25ForConditionalGeneration``) when none is given, a bare
    ``AssertionError`` when steps are missing but topk or draft tokens are
    given (2422-2426), a ``TypeError`` when steps are given without topk
    (``None > 1`` at 2452-2453); with topk 1, draft tokens forced to
    steps + 1 with a warning (2443-2450), never an error.

- ``check_server_args`` (5130-5175): the asserts ``_launch_subprocesses``
  runs before any scheduler starts (``srt/entrypoints/engine.py:1026``).

Both run before anything listens, as in 0.5.9, where
``prepare_server_args`` runs outside ``launch_server.py``'s ``try``
(``sglang/launch_server.py:32``): an exception is an uncaught traceback and
exit status 1.

**Example:**

.. code:: python

    args = resolve(flagset, parser.parse_args(argv), ["KimiK25ForConditionalGeneration"])
    args["speculative_num_draft_tokens"]  # 4 with EAGLE3 and nothing else given
"""

from __future__ import annotations

import ast
import importlib.util
import logging
import os
import sys
from pathlib import Path

logger = logging.getLogger("sglang.standin")

# server_args.py:2398-2409: the draft model defaults to the target (DeepSeek MTP).
MTP_ARCHITECTURES = (
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration")
# server_args.py:5752-5775, auto_choose_speculative_params.
WIDE_DRAFT_ARCHITECTURES = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")


def find_sglang() -> Path:
    """The installed ``sglang`` package directory (nothing of it is imported)."""
    spec = importlib.util.find_spec("sglang")  # locates the top-level package only
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if (Path(location) / "srt" / "server_args.py").is_file():
                return Path(location)
    for entry in sys.path:
        candidate = Path(entry or ".") / "sglang"
        if (candidate / "srt" / "server_args.py").is_file():
            return candidate
    raise FileNotFoundError("sglang is not installed in this Python environment "
                            f"({sys.executable}); install the stack's sglang wheel")


def sglang_version(package: Path) -> str:
    """The installed version, from its dist-info or ``_version.py``, never by import."""
    for meta in sorted(package.parent.glob("sglang-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    for name in ("_version.py", "version.py"):
        path = package / name
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and any(
                    isinstance(t, ast.Name) and t.id in ("__version__", "version")
                    for t in node.targets):
                return str(node.value.value)
    return "0.0.0.dev0"


def merge_config(argv: list[str], flagset) -> list[str]:
    """
    ``--config FILE`` as sglang 0.5.9's ConfigArgumentMerger reads it: the
    file's keys become flags placed before the command line (CLI > config).
    Only the flat ``key: value`` YAML sglfleet writes is understood (no PyYAML).
    """
    if "--config" not in argv:
        return argv
    at = argv.index("--config")
    path = Path(argv[at + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise SystemExit(f"ValueError: Config file must be YAML format, got: {path.suffix}")
    config_args = []
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if not sep or line.lstrip().startswith("#"):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1].replace("''", "'")
        option = "--" + key.strip().replace("_", "-")
        spec = flagset.spec(option) if option in flagset.options else None
        if spec is not None and spec.action == "store_true":
            config_args += [option] if value.lower() == "true" else []
        else:
            config_args += [option, value]
    return config_args + argv[:at] + argv[at + 2:]


def env_bool(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "y", "on")


def resolve(flagset, parsed, architectures: list | None) -> dict:
    """ServerArgs after ``__post_init__``: the flags' values, then 0.5.9's handlers in order."""
    values = dict(flagset.fields)
    namespace = vars(parsed)
    for spec in flagset.flags:  # spec.field: 0.5.9's tensor_parallel_size feeds tp_size
        if spec.field is not None and spec.dest in namespace:
            values[spec.field] = namespace[spec.dest]
    if values.get("tokenizer_path") is None:  # _handle_missing_default_values
        values["tokenizer_path"] = values.get("model_path")
    if values.get("served_model_name") is None:
        values["served_model_name"] = values.get("model_path")
    if values.get("page_size") is None:  # _handle_page_size
        values["page_size"] = 1
    _handle_data_parallelism(values)
    _handle_context_parallelism(values)
    _handle_speculative_decoding(values, (architectures or ["unknown"])[0])
    return values


def _handle_data_parallelism(v: dict) -> None:
    """server_args.py:2109-2125."""
    if v.get("dp_size", 1) == 1:
        v["enable_dp_attention"] = False
        v["enable_dp_lm_head"] = False
    if v.get("enable_dp_attention"):
        assert v["tp_size"] % v["dp_size"] == 0
    if v.get("enable_dp_lm_head"):
        assert v.get("enable_dp_attention"), "Please enable dp attention when setting enable_dp_lm_head. "


def _handle_context_parallelism(v: dict) -> None:
    """server_args.py:2083-2107."""
    tp, dp = v.get("tp_size", 1), v.get("dp_size", 1)
    if v.get("attn_cp_size", 1) > 1:
        assert tp % v["attn_cp_size"] == 0, "tp_size must be divisible by attn_cp_size"
        assert tp % (dp * v["attn_cp_size"]) == 0, "tp_size must be divisible by dp_size * attn_cp_size"
        assert v.get("pp_size", 1) == 1, "PP is not supported with context parallelism"
    if v.get("moe_dp_size", 1) > 1:
        assert tp % v["moe_dp_size"] == 0, "tp_size must be divisible by moe_dp_size"
        assert v.get("ep_size", 1) * v["moe_dp_size"] <= tp, \
            "ep_size * moe_dp_size must be less than or equal to tp_size"
        assert v.get("pp_size", 1) == 1, "PP is not supported with context parallelism"
        if v.get("ep_size", 1) > 1:
            assert v["ep_size"] * v["moe_dp_size"] == tp, "ep_size * moe_dp_size must be equal to tp_size"


def auto_choose_speculative_params(v: dict, arch: str) -> tuple[int, int, int]:
    """server_args.py:5741-5775."""
    if v.get("speculative_algorithm") == "STANDALONE":
        return (3, 1, 4)
    if arch in WIDE_DRAFT_ARCHITECTURES:
        return (5, 4, 8)
    return (3, 1, 4)  # DeepSeek V2/V3, GLM, ... and the default for all other models


def _handle_speculative_decoding(v: dict, arch: str) -> None:
    """server_args.py:2330-2500, the EAGLE family and NGRAM."""
    if v.get("speculative_draft_model_path") is not None and v.get(
            "speculative_draft_model_revision") is None:
        v["speculative_draft_model_revision"] = "main"
    if v.get("speculative_algorithm") == "NEXTN":
        v["speculative_algorithm"] = "EAGLE"
    algorithm = v.get("speculative_algorithm")
    if algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
        if algorithm == "STANDALONE" and v.get("enable_dp_attention"):
            raise ValueError(
                "Currently standalone speculative decoding does not support dp attention.")
        if v.get("max_running_requests") is None:
            v["max_running_requests"] = 48
            logger.warning("Max running requests is reset to 48 for speculative decoding. You "
                           "can override this by explicitly setting --max-running-requests.")
        if env_bool("SGLANG_ENABLE_SPEC_V2"):
            v["disable_overlap_schedule"] = False
            if v.get("speculative_eagle_topk") is not None and v["speculative_eagle_topk"] > 1:
                raise ValueError(
                    "Spec v2 currently only supports topk = 1 for speculative decoding.")
        else:
            v["disable_overlap_schedule"] = True
            logger.warning(
                "Overlap scheduler is disabled when spec v2 is off or using unsupported "
                "speculative algorithm. You can set env SGLANG_ENABLE_SPEC_V2=True to enable "
                "the experimental overlap scheduler. ")
        if v.get("enable_mixed_chunk"):
            v["enable_mixed_chunk"] = False
        if arch in MTP_ARCHITECTURES and v.get("speculative_draft_model_path") is None:
            v["speculative_draft_model_path"] = v.get("model_path")
            v["speculative_draft_model_revision"] = v.get("revision")
        if v.get("speculative_num_steps") is None:
            assert (v.get("speculative_eagle_topk") is None
                    and v.get("speculative_num_draft_tokens") is None)
            (v["speculative_num_steps"], v["speculative_eagle_topk"],
             v["speculative_num_draft_tokens"]) = auto_choose_speculative_params(v, arch)
        if "trtllm_mha" in (v.get("attention_backend"), v.get("decode_attention_backend"),
                            v.get("prefill_attention_backend")):
            if v["speculative_eagle_topk"] > 1:
                raise ValueError(
                    "trtllm_mha backend only supports topk = 1 for speculative decoding.")
        if (v.get("speculative_eagle_topk") == 1
                and v.get("speculative_num_draft_tokens") != v["speculative_num_steps"] + 1):
            logger.warning("speculative_num_draft_tokens is adjusted to speculative_num_steps "
                           "+ 1 when speculative_eagle_topk == 1")
            v["speculative_num_draft_tokens"] = v["speculative_num_steps"] + 1
        # 0.5.9 compares before it checks for None: no topk is a TypeError here.
        if (v.get("speculative_eagle_topk") > 1 and v["page_size"] > 1
                and v.get("attention_backend") not in ("flashinfer", "fa3")):
            raise ValueError(
                "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces "
                "incorrect results for paged attention backends. This combination is only "
                "supported for the 'flashinfer' backend.")
    if algorithm == "NGRAM":
        if v.get("max_running_requests") is None:
            v["max_running_requests"] = 48
        v["disable_overlap_schedule"] = True
        v["enable_mixed_chunk"] = False
        v["speculative_eagle_topk"] = v.get("speculative_ngram_max_bfs_breadth")
        if v.get("speculative_num_draft_tokens") is None:
            v["speculative_num_draft_tokens"] = v.get("speculative_ngram_max_match_window_size")
        if v.get("enable_dp_attention"):
            raise ValueError(
                "Currently ngram speculative decoding does not support dp attention.")


def check_server_args(v: dict) -> None:
    """server_args.py:5130-5175, run by ``_launch_subprocesses`` before the schedulers."""
    assert (v.get("tp_size", 1) * v.get("pp_size", 1)) % v.get("nnodes", 1) == 0, \
        "tp_size must be divisible by number of nodes"
    if v.get("pp_size", 1) > 1:
        assert (v.get("disable_overlap_schedule") and v.get("speculative_algorithm") is None
                and not v.get("enable_mixed_chunk")), (
            "Pipeline parallelism is not compatible with overlap schedule, speculative "
            "decoding, mixed chunked prefill.")
    assert not (v.get("dp_size", 1) > 1 and v.get("nnodes", 1) != 1
                and not v.get("enable_dp_attention")), \
        "multi-node data parallel is not supported unless dp attention!"
    assert v.get("base_gpu_id", 0) >= 0, "base_gpu_id must be non-negative"
    assert v.get("gpu_id_step", 1) >= 1, "gpu_id_step must be positive"
    assert v.get("moe_dense_tp_size") in {1, None}, \
        "moe_dense_tp_size only support 1 and None currently"
    name = str(v.get("served_model_name"))
    assert ":" not in name, (
        "served_model_name cannot contain a colon (':') character. The colon is reserved for "
        "the 'model:adapter' syntax used in LoRA adapter specification. "
        f"Invalid value: '{name}'")
    if v.get("speculative_algorithm") is not None:
        assert not v.get("enable_mixed_chunk"), \
            "enable_mixed_chunk is required for speculative decoding"


def server_args_repr(args: dict, hidden: set[str] = frozenset()) -> str:
    """The ServerArgs dataclass's repr, as 0.5.9 logs it (``logger.info(f"{server_args=}")``,
    entrypoints/engine.py:1031): every field, the API keys too (they are plain fields, server_args.py:404),
    but those ``hidden`` (declared ``repr=False``, as sglfleet's api_key_not_logged sets declare the keys)."""
    return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items() if k not in hidden) + ")"
