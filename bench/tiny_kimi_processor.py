"""
The tiny Kimi K2.5's processor: sglfleet's own, copied into the model folder as
``processing_tiny_kimi.py`` and named by ``processor_config.json``'s ``auto_map``.

sglang cannot turn multimodal off for ``KimiK25ForConditionalGeneration``: its
tokenizer manager asks ``AutoProcessor.from_pretrained(model, trust_remote_code=True)``
(``srt/utils/hf_transformers/processor.py``), and its Kimi K2.5 processor
(``srt/multimodal/processors/kimi_k25.py``, 0.5.14) wraps the answer in
``KimiGPUProcessorWrapper``, which reads ``tokenizer``, ``image_processor``,
``media_processor.media_proc_cfg`` and, to count an image's tokens,
``media_processor.media_tokens_calculator``. On a GPU the wrapper resizes and
patchifies images itself and only tokenizes through this processor. Moonshot's
own processor is remote code of the real model, which a random-weight model
has no copy of; this one gives sglang those attributes and nothing more.
Transformers alone: it runs in sglang's tokenizer process, offline.

**Example:**

.. code:: python

    processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
    processor.media_processor.media_proc_cfg["patch_size"]  # 14
"""

import json
import math
import os

from transformers import AutoTokenizer


class TinyKimiMediaProcessor:
    """``media_proc_cfg`` and the image token count of Kimi's NaViT resize (as sglang's ``navit_resize_config``)."""

    def __init__(self, media_proc_cfg):
        self.media_proc_cfg = media_proc_cfg

    def media_tokens_calculator(self, media):
        image = media["image"]
        width, height = (image.shape[2], image.shape[1]) if hasattr(image, "shape") else image.size
        cfg = self.media_proc_cfg
        patch, merge = cfg["patch_size"], cfg["merge_kernel_size"]
        if cfg.get("fixed_output_tokens"):
            return cfg["fixed_output_tokens"]
        limit, side = cfg["in_patch_limit"], cfg["patch_limit_on_one_side"]
        scale = min(1.0, math.sqrt(limit / (max(1.0, width // patch) * max(1.0, height // patch))),
                    side * patch / width, side * patch / height)
        new_w = min(max(1, int(width * scale)), side * patch)
        new_h = min(max(1, int(height * scale)), side * patch)
        factor = merge * patch
        return ((new_h + (factor - new_h % factor) % factor) // factor) * \
            ((new_w + (factor - new_w % factor) % factor) // factor)


class TinyKimiProcessor:
    """The attributes sglang's Kimi K2.5 processor reads: a tokenizer, no image processor, a media processor."""

    attributes = ["tokenizer"]

    def __init__(self, tokenizer, media_proc_cfg):
        self.tokenizer = tokenizer
        self.image_processor = None  # not a BaseImageProcessor: sglang passes no device
        self.media_processor = TinyKimiMediaProcessor(media_proc_cfg)
        self.chat_template = getattr(tokenizer, "chat_template", None)

    @classmethod
    def register_for_auto_class(cls, auto_class="AutoProcessor"):
        """AutoProcessor calls it on remote code; nothing to register."""

    @classmethod
    def from_pretrained(cls, path, trust_remote_code=False, **kwargs):
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        with open(os.path.join(path, "processor_config.json")) as handle:
            cfg = json.load(handle)["media_proc_cfg"]
        return cls(tokenizer, cfg)

    def __call__(self, text=None, medias=None, **kwargs):
        """The CPU path (no GPU): text only; images are the GPU wrapper's."""
        if medias:
            raise NotImplementedError("the tiny Kimi's processor handles images only on a GPU")
        return dict(self.tokenizer(text, return_tensors=kwargs.get("return_tensors")))
