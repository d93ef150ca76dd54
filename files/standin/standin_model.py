"""
The target model as the stand-in sees it: its config, its weights, and the EAGLE-3 check.

A model path that is a folder (a staged model) is loaded as 0.5.9's
``DefaultModelLoader`` finds it (``model_loader/loader.py:381-473``): its
``config.json`` (transformers' ``AutoConfig``, which raises ``OSError: ... does
not appear to have a file named config.json``), then the ``*.safetensors``
files that ``model.safetensors.index.json`` lists
(``filter_duplicate_safetensors_files``, ``weight_utils.py:578-606``), none at
all being ``RuntimeError: Cannot find any model weights with `<path>```
(``loader.py:468``). Each shard is opened as ``safetensors.safe_open`` does
(``weight_utils.py:734``; safetensors 0.8.0, the cu130 stacks' version), so a
truncated one fails with its ``SafetensorError: Error while deserializing
header: ...``, and every tensor's bytes are read: the load takes as long as
the bytes take. Stricter than 0.5.9 in one way: a shard the index lists but
the folder lacks is a ``FileNotFoundError``, where 0.5.9 skips it and serves a
model with those weights missing. A model path that is no folder (a hub id on
a host with no weights) loads nothing, and the fleet serves Kimi K2.5 by name;
nor does a folder with a ``config.json`` and neither an index nor a shard
(how tests name an architecture without weights).

A Kimi K2.5 target whose ``kimi_k25.py`` does not parse (a fix appended after
``EntryClass`` with its indentation) is not a model sglang knows:
``model_class_check`` logs the import errors sglang ignores and raises the
ValueError its tokenizer manager dies of, before any scheduler starts, as
0.5.14 did on an H200 (``tests/data/gpu/kimi-k25-h200-sglang-0.5.14.json``,
start ``appended``: ``srt/models/registry.py:109``, then
``srt/model_loader/utils.py:152`` from ``managers/multimodal_processor.py:58``).

With ``--speculative-algorithm EAGLE3`` and a Kimi K2.5 target, ``eagle3_check``
loads the installed ``kimi_k25.py`` with its heavy imports stubbed
(``stub_import``) and calls the target's delegation methods in the order the
installed release does (``EAGLE3_CALLS``). 0.5.9's model runner calls
``set_eagle3_layers_to_capture`` first (``model_executor/model_runner.py:622``),
then its EAGLE worker ``get_embed_and_head`` (``speculative/eagle_worker.py:157``);
0.5.14 on an H200 called ``get_embed_and_head`` first, while the scheduler
allocates its memory pools (``speculative/eagle_worker_v2.py:319``, from
``managers/scheduler.py:841``), and ``set_eagle3_layers_to_capture`` only
before the CUDA graphs (``model_executor/model_runner.py:1009``); neither
calls ``set_embed_and_head`` on the target (traced, same transcript). A class
without the delegation methods raises the AttributeError the real scheduler
dies of, for the method the release calls first.

**Example:**

.. code:: python

    config = model_config("/models/kimi")
    eagle3_check(find_sglang(), args, config.get("architectures"))
    loaded = load_weights("/opt/sglfleet/models/org/m/4d01...")  # bytes read
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import struct
import sys
from pathlib import Path

try:  # on a host: shipped beside this file
    import stub_import
except ImportError:  # in the repository: files/standin/ -> files/shipped/
    sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "shipped"))
    import stub_import

KIMI_K25 = "KimiK25ForConditionalGeneration"
logger = logging.getLogger("sglang.standin")


def model_config(model_path: str | None) -> dict:
    """``config.json`` of the model, or Kimi K2.5's architecture when there is none."""
    try:
        return json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        return {"architectures": [KIMI_K25], "model_type": "kimi_k25"}


class SafetensorError(Exception):
    """safetensors' own exception (``safetensors_rust.SafetensorError``), with its messages."""


SafetensorError.__module__ = "safetensors_rust"
MAX_HEADER = 100_000_000  # safetensors' N_MAX: a longer header is refused


def read_shard(path: Path, chunk: int = 8 << 20, tensors: dict | None = None) -> int:
    """
    Open a shard as ``safe_open`` does, then read every tensor's bytes; the bytes read.

    + tensors: filled with ``{name: (shape, sha256 of its bytes)}``, what the stand-in's
      outputs derive from (``standin_weights``); None reads without hashing
    """
    size = path.stat().st_size  # FileNotFoundError, as open() raises it
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise SafetensorError("Error while deserializing header: header too small")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER:
            raise SafetensorError("Error while deserializing header: header too large")
        if 8 + length > size:
            raise SafetensorError("Error while deserializing header: invalid header length")
        try:
            header = json.loads(handle.read(length))
        except ValueError as error:
            raise SafetensorError(f"Error while deserializing header: invalid JSON in header: {error}") from None
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        if 8 + length + end != size:
            raise SafetensorError("Error while deserializing header: incomplete metadata, file not fully covered")
        done = 8 + length
        if tensors is not None:  # each tensor's bytes, in file order
            at = 0
            for name, info in sorted(((k, t) for k, t in header.items() if k != "__metadata__"),
                                     key=lambda item: item[1]["data_offsets"][0]):
                start, stop = info["data_offsets"]
                handle.read(max(start - at, 0))
                digest = hashlib.sha256()
                left = stop - start
                while left > 0:
                    data = handle.read(min(chunk, left))
                    digest.update(data)
                    left -= len(data)
                tensors[name] = (tuple(info["shape"]), digest.hexdigest())
                at = max(at, stop)
        while handle.read(chunk):
            pass
        return size - done


def load_weights(model_path: str | None, index_file: str = "model.safetensors.index.json",
                 tensors: dict | None = None) -> int:
    """
    Load a staged model's config and weights as 0.5.9 does; the bytes read (0: no folder, nothing to load).

    + tensors: filled with every tensor's shape and digest (``read_shard``), or None
    """
    folder = Path(model_path) if model_path else None
    if folder is None or not folder.is_dir():
        return 0
    if not (folder / "config.json").is_file():
        raise OSError(f"{folder} does not appear to have a file named config.json. Checkout "
                      f"'https://huggingface.co/{folder}/tree/None' for available files.")
    shards = weight_files(folder, index_file)
    return sum(read_shard(shard, tensors=tensors) for shard in shards)


def weight_files(folder: Path, index_file: str = "model.safetensors.index.json") -> list[Path]:
    """The shards a folder's weights are read from, as 0.5.9's ``_prepare_weights`` finds them."""
    index = folder / index_file
    if index.is_file():
        shards = sorted({folder / name for name in json.loads(index.read_text())["weight_map"].values()})
        missing = [shard for shard in shards if not shard.is_file()]
        if missing and len(missing) < len(shards):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(missing[0]))
        shards = [shard for shard in shards if shard.is_file()]
    else:
        shards = sorted(folder.glob("*.safetensors"))
        if not shards:
            return []  # config.json alone: a model the stand-in's tests name by architecture, no weights
    if not shards:
        raise RuntimeError(f"Cannot find any model weights with `{folder}`")
    return shards


class _LanguageModel:
    """The target's text model (DeepseekV3ForCausalLM), which has the EAGLE-3 methods."""

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.layers_to_capture = layer_ids

    def get_embed_and_head(self):
        return object(), object()

    def set_embed_and_head(self, embed, head):
        pass


# The order a release calls the target's delegation methods in, from its version on.
EAGLE3_CALLS = (
    ((0, 5, 14), ("get_embed_and_head", "set_eagle3_layers_to_capture")),  # traced on an H200
    ((0, 0, 0), ("set_eagle3_layers_to_capture", "get_embed_and_head")),  # 0.5.9, read from its source
)


def release_tuple(version: str) -> tuple:
    """``"0.5.14"`` -> ``(0, 5, 14)``; a part that is no number ends it."""
    parts = []
    for part in version.split(".")[:3]:
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def model_class_check(package: Path, architectures: list | None) -> None:
    """Log and raise what the real server does when the Kimi K2.5 model file does not import."""
    path = package / "srt" / "models" / "kimi_k25.py"
    if KIMI_K25 not in (architectures or []) or not path.is_file():
        return
    try:
        compile(path.read_bytes(), path.name, "exec")
    except SyntaxError as error:
        # registry.py:109 and the multimodal processors' registry log it and go on without the model
        for module in ("sglang.srt.multimodal.processors.kimi_k25", "sglang.srt.models.kimi_k25"):
            logger.warning(f"Ignore import error when loading {module}: {error}")
        raise ValueError(
            f"Cannot find model module. '{KIMI_K25}' is not a registered model in the Transformers library "
            "(only relevant if the model is meant to be in Transformers) and 'AutoModel' is not present in "
            "the model config's 'auto_map' (relevant if the model is custom).") from None


def eagle3_check(package: Path, args: dict, architectures: list | None, version: str = "0.5.9") -> None:
    """Raise what the real server raises when the target model cannot run EAGLE-3."""
    if args.get("speculative_algorithm") != "EAGLE3" or KIMI_K25 not in (architectures or []):
        return
    path = package / "srt" / "models" / "kimi_k25.py"
    if not path.is_file():
        raise ValueError(f"Model architectures {architectures} are not supported for now.")
    module = stub_import.load_with_stubs(path, "sglang.srt.models.kimi_k25")
    cls = getattr(module, KIMI_K25)
    model = cls.__new__(cls)
    object.__setattr__(model, "language_model", _LanguageModel())
    draft = model_config(args.get("speculative_draft_model_path")).get("eagle_config") or {}
    calls = next(calls for since, calls in EAGLE3_CALLS if release_tuple(version) >= since)
    for name in calls:
        if name == "set_eagle3_layers_to_capture":
            model.set_eagle3_layers_to_capture(draft.get("eagle_aux_hidden_state_layer_ids"))
        else:
            model.get_embed_and_head()
