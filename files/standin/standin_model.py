"""
The target model as the stand-in sees it: its config, and the EAGLE-3 check.

There are no weights on a GPU-less host: ``<model-path>/config.json`` names the
architecture when it exists, and the fleet serves Kimi K2.5 when it does not.

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
"""

from __future__ import annotations

import json
from pathlib import Path

try:  # on a host: shipped beside this file
    import stub_import
except ImportError:  # in the repository: files/standin/ -> the root holding sglfleet/
    from sglfleet import stub_import

KIMI_K25 = "KimiK25ForConditionalGeneration"


def model_config(model_path: str | None) -> dict:
    """``config.json`` of the model, or Kimi K2.5's architecture when there is none."""
    try:
        return json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        return {"architectures": [KIMI_K25], "model_type": "kimi_k25"}


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
