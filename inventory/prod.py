"""
An example production fleet: 8-GPU Blackwell hosts serving Kimi K2.5 with EAGLE-3.

The hostnames are examples (``*.example.internal``): copy this file and put in
your own. Waves: ``canary`` (one RTX PRO 6000 host), then ``wave1`` (the other
RTX PRO 6000 hosts), then ``wave2`` (the B200 hosts). The launch values every
host shares live in ``group_data/prod.py`` (this file's group); hardware groups
carry the GPU architecture the lint checks flags against.

**Example:**

.. code:: shell

    sglfleet lint inventory/prod.py
    pyinfra inventory/prod.py deploy.py --dry --diff
    pyinfra inventory/prod.py deploy.py
"""

_domain = "example.internal"

# Rollout waves, in the default order (canary, wave1, wave2).
canary = [f"gpu-canary-01.{_domain}"]
wave1 = [f"gpu-rtx-{n:02d}.{_domain}" for n in (2, 3, 4)]
wave2 = [f"gpu-b200-{n:02d}.{_domain}" for n in (1, 2, 3, 4)]

# Hardware groups: what preflight expects and the lint's architecture rules read.
rtx_pro_6000 = (canary + wave1, {
    "gpu_compute_cap": "12.0",   # RTX PRO 6000 Blackwell Server Edition, SM120, 96 GB
    "gpu_count": 8,
    # 8 x 96 GB holds the INT4 weights with little to spare for the KV cache.
    "mem_fraction_static": 0.92,
    # SM120 in sglang 0.5.9: torch symm-mem breaks start-up, FlashInfer
    # all-reduce fusion is ignored. Leave both off (the defaults).
})
b200 = (wave2, {
    "gpu_compute_cap": "10.0",   # B200, SM100, 180 GB
    "gpu_count": 8,
    "mem_fraction_static": 0.85,
    # SM100: FlashInfer all-reduce fusion is applied (sglang turns it on for
    # KimiK25 on one node anyway); saying so keeps the release explicit.
    "enable_flashinfer_allreduce_fusion": True,
})
