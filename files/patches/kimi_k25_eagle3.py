"""EAGLE-3 delegation methods for KimiK25ForConditionalGeneration in sglang 0.5.9.

sglfleet's patch engine (sglfleet/artifacts/patcher.py) reads this file as data: the one
class below names the target class in sglang/srt/models/kimi_k25.py, and its
methods are copied into the body of that class, between marker comments.
Methods the target already defines are skipped, so on sglang 0.5.10 and later,
which ship these three methods, the file is left alone.

EAGLE-3 calls two of them on the target model in 0.5.9: the model runner calls
set_eagle3_layers_to_capture at start-up (model_runner.py:622, 1906), the eagle
worker get_embed_and_head (eagle_worker.py:157); set_embed_and_head (or
set_embed) it calls on the draft model, not the target (eagle_worker.py:159-168).
The third is the pair of the second, as upstream's 0.5.10 wrapper has it. The
wrapper keeps the text model (a DeepseekV3ForCausalLM, which has all three) as
self.language_model. The bodies and messages follow upstream's own (0.5.10).
No annotations: they would be evaluated in kimi_k25.py's namespace.
"""


class KimiK25ForConditionalGeneration:
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        """Set the layers to capture for EAGLE3 speculative decoding."""
        if not hasattr(self.language_model, "set_eagle3_layers_to_capture"):
            raise AttributeError(
                "language_model does not support EAGLE3 speculative decoding."
            )

        self.language_model.set_eagle3_layers_to_capture(layer_ids)

    def get_embed_and_head(self):
        """Get embedding and LM head weights for speculative decoding."""
        if not hasattr(self.language_model, "get_embed_and_head"):
            raise AttributeError(
                "language_model does not support get_embed_and_head()."
            )

        return self.language_model.get_embed_and_head()

    def set_embed_and_head(self, embed, head):
        """Set embedding and LM head weights for speculative decoding."""
        if not hasattr(self.language_model, "set_embed_and_head"):
            raise AttributeError(
                "language_model does not support set_embed_and_head()."
            )

        self.language_model.set_embed_and_head(embed, head)
