"""
The stand-in's compile step: kernels compiled on first use and kept in the
compile caches, as real sglang's JITs keep theirs, so the local fleet can test
how caches survive restarts and travel between hosts. It claims no speed-up:
only the GPU acceptance run measures one.

Real sglang compiles while it starts (triton and torch inductor kernels, and
the CUDA graphs it captures for each batch size, before the port opens; 54.6 s
of capture cold against 1.7 s warm on an H200 with 0.5.14, BENCHMARKS.md) and
again on the first sampled request (flashinfer's sampling module: 77 s, the
scheduler serving nothing meanwhile). The stand-in does the same in time:

- ``startup``: the kernels of this configuration (one for decode, and with
  speculative decoding one each for target verify and draft extend; their names
  hash the sglang version, the model and the flags that shape them) are looked
  up under ``TRITON_CACHE_DIR``, as triton keys its cache
  (``<hash>/<kernel>.json`` beside ``<kernel>.cubin``). Missing ones are compiled:
  ``SGLFLEET_STANDIN_COMPILE_S`` times the share missing, then written.
- ``sampled``: the first request that samples (sglang's default temperature is
  1.0, ``srt/sampling/sampling_params.py:46, 98-101``: only 0 is greedy) looks
  for the sampling module under ``FLASHINFER_WORKSPACE_BASE`` and compiles it in
  ``SGLFLEET_STANDIN_SAMPLING_JIT_S`` when missing.
- A cached kernel whose bytes are not what its name says is loaded all the same
  and fails as a corrupt cubin does on a GPU (``CUDA error: device kernel image is
  invalid``): the scheduler raises, the server exits 1. The fault
  ``corrupt-cache`` writes such kernels (the process itself runs the good ones).

**Example:**

.. code:: python

    compiler = Compiler(args, "0.5.9", corrupt=False)
    compiler.startup()   # "3 kernels: 0 from the compile cache, 3 compiled in 6.00 s"
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from pathlib import Path

logger = logging.getLogger("sglang.standin")

# The flags that change what sglang compiles for its CUDA graphs.
SHAPING_FLAGS = ("model_path", "dtype", "tp_size", "cuda_graph_max_bs", "speculative_algorithm",
                 "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
MAGIC = b"sglfleet stand-in kernel\n"


class KernelImageInvalid(RuntimeError):
    """A cached kernel that does not load: what CUDA says of a corrupt cubin."""


def kernel_bytes(name: str) -> bytes:
    """What a kernel compiles to: its name and a digest of it, so a changed byte shows."""
    return MAGIC + name.encode() + b"\n" + hashlib.sha256(name.encode()).hexdigest().encode() + b"\n"


class Compiler:
    """
    The kernels of one server configuration, and the two moments it compiles them.

    + args: the resolved ServerArgs
    + version: the installed sglang's version
    + corrupt: write corrupt kernels (the ``corrupt-cache`` fault)
    """

    def __init__(self, args: dict, version: str, corrupt: bool = False):
        shaping = json.dumps([version, *(args.get(flag) for flag in SHAPING_FLAGS)], default=str)
        self.digest = hashlib.sha256(shaping.encode()).hexdigest()[:16]
        phases = ["decode"] + (["target_verify", "draft_extend"] if args.get("speculative_algorithm") else [])
        self.kernels = [f"{phase}_{self.digest}" for phase in phases]
        self.version, self.corrupt = version, corrupt
        self.compile_s = float(os.environ.get("SGLFLEET_STANDIN_COMPILE_S", "0"))
        self.sampling_jit_s = float(os.environ.get("SGLFLEET_STANDIN_SAMPLING_JIT_S", "0"))
        self.sampling_ready = threading.Event()
        self.sampling_lock = threading.Lock()

    @staticmethod
    def triton_dir() -> Path:
        return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")

    def kernel_path(self, name: str) -> Path:
        # triton names a kernel's folder by a hash of its source and target; so does this
        folder = hashlib.sha256(f"{self.version}/{name}".encode()).hexdigest()[:52].upper()
        return self.triton_dir() / folder / f"{name}.cubin"

    def sampling_path(self) -> Path:
        # flashinfer 0.6 jit/env.py: <FLASHINFER_WORKSPACE_BASE>/.cache/flashinfer/<version>/<arch>/cached_ops/
        base = Path(os.environ.get("FLASHINFER_WORKSPACE_BASE") or Path.home())
        return base / ".cache" / "flashinfer" / "standin" / "cpu" / "cached_ops" / "sampling" / "sampling.so"

    def load(self, path: Path, name: str) -> bool:
        """Whether ``path`` holds the kernel (False: missing); raises KernelImageInvalid for other bytes."""
        try:
            found = path.read_bytes()
        except FileNotFoundError:
            return False
        if found != kernel_bytes(name):
            raise KernelImageInvalid(f"CUDA error: device kernel image is invalid ({path})")
        return True

    def write(self, path: Path, name: str) -> None:
        """Write a compiled kernel as triton does: beside its place, then renamed."""
        path.parent.mkdir(parents=True, exist_ok=True)
        data = kernel_bytes(name)
        if self.corrupt:
            data = data[:len(MAGIC)] + bytes(255 - b for b in data[len(MAGIC):])
        temporary = path.with_name(f"{path.name}.tmp.pid_{os.getpid()}")
        temporary.write_bytes(data)
        os.replace(temporary, path)
        if path.suffix == ".cubin":
            path.with_suffix(".json").write_text(json.dumps({"name": name, "version": self.version}))

    def startup(self) -> str:
        """Look up this configuration's kernels, compile the missing ones; what happened, in a line."""
        missing = [name for name in self.kernels if not self.load(self.kernel_path(name), name)]
        took = self.compile_s * len(missing) / len(self.kernels)
        time.sleep(took)
        for name in missing:
            self.write(self.kernel_path(name), name)
        return (f"{len(self.kernels)} kernels: {len(self.kernels) - len(missing)} from the compile cache, "
                f"{len(missing)} compiled in {took:.2f} s")

    def sampled(self) -> float:
        """Before the first sampled forward pass: load or compile the sampling module; the seconds it took."""
        if self.sampling_ready.is_set():
            return 0.0
        with self.sampling_lock:
            if self.sampling_ready.is_set():
                return 0.0
            path, took = self.sampling_path(), 0.0
            if not self.load(path, "sampling"):
                took = self.sampling_jit_s
                time.sleep(took)
                self.write(path, "sampling")
                logger.info(f"flashinfer JIT: sampling module compiled in {took:.2f} s (stand-in)")
            self.sampling_ready.set()
            return took
