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

With ``--speculative-algorithm EAGLE3`` and a Kimi K2.5 target, ``eagle3_check``
loads the installed ``kimi_k25.py`` with its heavy imports stubbed
(``stub_import``) and calls the target's ``set_eagle3_layers_to_capture`` then
``get_embed_and_head`` as 0.5.9's model runner
(``model_executor/model_runner.py:622``) and EAGLE worker
(``speculative/eagle_worker.py:157``) do. A class without the delegation
methods raises the AttributeError the real scheduler dies of.

**Example:**

.. code:: python

    config = model_config("/models/kimi")
    eagle3_check(find_sglang(), args, config.get("architectures"))
    loaded = load_weights("/opt/sglfleet/models/org/m/4d01...")  # bytes read
"""

from __future__ import annotations

import errno
import json
import struct
import sys
from pathlib import Path

try:  # on a host: shipped beside this file
    import stub_import
except ImportError:  # in the repository: files/standin/ -> files/shipped/
    sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "shipped"))
    import stub_import

KIMI_K25 = "KimiK25ForConditionalGeneration"


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


def read_shard(path: Path, chunk: int = 8 << 20) -> int:
    """Open a shard as ``safe_open`` does, then read every tensor's bytes; the bytes read."""
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
        while handle.read(chunk):
            pass
        return size - done


def load_weights(model_path: str | None, index_file: str = "model.safetensors.index.json") -> int:
    """Load a staged model's config and weights as 0.5.9 does; the bytes read (0: no folder, nothing to load)."""
    folder = Path(model_path) if model_path else None
    if folder is None or not folder.is_dir():
        return 0
    if not (folder / "config.json").is_file():
        raise OSError(f"{folder} does not appear to have a file named config.json. Checkout "
                      f"'https://huggingface.co/{folder}/tree/None' for available files.")
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
            return 0  # config.json alone: a model the stand-in's tests name by architecture, no weights
    if not shards:
        raise RuntimeError(f"Cannot find any model weights with `{model_path}`")
    return sum(read_shard(shard) for shard in shards)


class _LanguageModel:
    """The target's text model (DeepseekV3ForCausalLM), which has the EAGLE-3 methods."""

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.layers_to_capture = layer_ids

    def get_embed_and_head(self):
        return object(), object()

    def set_embed_and_head(self, embed, head):
        pass


def eagle3_check(package: Path, args: dict, architectures: list | None) -> None:
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
    model.set_eagle3_layers_to_capture(draft.get("eagle_aux_hidden_state_layer_ids"))
    model.get_embed_and_head()
