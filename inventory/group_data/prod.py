# Production values for inventory/prod.py (its hosts form the group "prod").
# Defaults for everything else: group_data/all.py.

# --- connection ---
ssh_user = "deploy"               # a user with passwordless sudo on every GPU host
_sudo = True

# --- stack ---
stack = "cu130-sglang-0.5.9"      # files/stacks/cu130-sglang-0.5.9.toml: torch 2.9.1+cu130

# --- SGLang launch: Kimi K2.5 with EAGLE-3 on one 8-GPU host ---
model_path = "moonshotai/Kimi-K2.5"
# main from at least May to September 2026: pinned by public tokenizer registries,
# model catalogues and artifact scripts (64 shards, 554.30 GiB); see the notes
# on models. Its manifest needs `sglfleet model lock moonshotai/Kimi-K2.5@4d01dfe0...`
# run where huggingface.co can be reached (not from the development machine).
model_revision = "4d01dfe0332d63057c186e0b262165819efb6611"
served_model_name = "kimi-k2.5"
trust_remote_code = True          # Kimi K2.5 ships its tokenizer as remote code
tp_size = 8
speculative_algorithm = "EAGLE3"
speculative_draft_model_path = "lightseekorg/kimi-k2.5-eagle3"
# Not pinned: no public source gives this repository's commit, and huggingface.co
# could not be reached to read it. The lint refuses the inventory until it is
# pinned: `hf api` or HfApi().model_info("lightseekorg/kimi-k2.5-eagle3").sha, then
# `sglfleet model lock lightseekorg/kimi-k2.5-eagle3@<sha>`.
speculative_draft_model_revision = None
speculative_num_steps = 3         # topk 1: draft tokens = steps + 1
speculative_eagle_topk = 1
speculative_num_draft_tokens = 4
cuda_graph_max_bs = 64            # matches --max-running-requests below
extra_flags = ["--max-running-requests", "64"]  # sglang forces 48 with speculative decoding otherwise
listen_port = 30000
enable_metrics = True
# Kimi K2.5's SGLang recipe: its reasoning and tool calls reach OpenAI clients as
# reasoning_content and tool_calls (0.5.9 srt/parser/reasoning_parser.py:381,
# srt/function_call/function_call_parser.py:56).
reasoning_parser = "kimi_k2"
tool_call_parser = "kimi_k2"

# --- models: staged into the big NVMe before any restart ---
models_dir = "/nvme/sglfleet/models"

# --- rollout ---
router_url = "http://router.example.internal:30080"  # an example sglang-router
gate_warmup_s = 1800              # loading ~600 GB of weights and capturing CUDA graphs
gate_min_spec_accept_length = 2.0  # EAGLE-3 that accepts under 2 tokens a step is not worth serving
gate_bake_s = 900                 # each wave serves 15 minutes of real traffic before the next starts
gate_interval_s = 30
gate_max_ttft_p99_s = 10.0        # Kimi K2.5 prefill of long prompts on 8 GPUs; tune to your traffic
gate_max_itl_p99_s = 0.2
