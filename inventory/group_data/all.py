# Defaults for every host: the one place they live. sglfleet.plan.schema reads this
# file as the schema's defaults, so an inventory elsewhere gets the same values.
# Override per group (group_data/<group>.py), per host, or with --data key=value.
# Secrets never go here: see secrets_file.

# --- what runs ---
server = "sglang"                 # "sglang", or "standin" on GPU-less local-fleet hosts
gpu_less = False                  # True only for local-fleet hosts without GPUs
gpu_compute_cap = None            # e.g. "12.0" (RTX PRO 6000), "10.0" (B200): enables SM rules in lint
gpu_count = None                  # GPUs per host, e.g. 8: lint checks tp_size against it
services = None                   # several sglang services on a host, e.g. [{"name": "big", "gpus": [0, 1, 2, 3],
                                  # "port": 30000, "tp_size": 4}, ...]; None: one service, sglang.service

# --- SGLang launch flags (named after sglang's own flags) ---
speculative_algorithm = "EAGLE3"          # the fleet's purpose; None turns speculative decoding off
speculative_draft_model_path = None       # EAGLE-3 draft model; required for Kimi K2.5
speculative_num_steps = None              # give all three numbers or none (sglang then picks 3, 1, 4)
speculative_eagle_topk = None             # with topk 1, draft tokens must be steps + 1
speculative_num_draft_tokens = None       # the tree size verified per step
tp_size = 1                               # tensor parallel size; 8 on an 8-GPU host
mem_fraction_static = None                # None: sglang sizes the KV cache itself
cuda_graph_max_bs = None                  # None: sglang's default capture sizes
enable_flashinfer_allreduce_fusion = False  # applied on SM90/SM100 only (ignored on SM120)
enable_torch_symm_mem = False             # breaks sglang < 0.5.14 on SM120 at start-up
trust_remote_code = False                 # Kimi K2.5 needs True (custom tokenizer code)
served_model_name = None                  # None: a pinned model's hub id (never its staged, per-revision folder), else the model path
listen_host = None                        # --host; None: the host's fleet address where the fleet needs it, else 127.0.0.1
listen_port = 30000                       # --port: sglang's default port
enable_metrics = True                     # /metrics feeds the bake and status
reasoning_parser = None                   # splits a model's reasoning into reasoning_content, e.g. "kimi_k2"
tool_call_parser = None                   # splits tool calls into tool_calls, e.g. "kimi_k2"
extra_flags = []                          # more sglang flags, e.g. ["--max-running-requests", "64"]
# --- prefill and decode on separate servers (docs/pd.md); the rest apply only with a mode ---
disaggregation_mode = None                # "prefill" or "decode" behind a PD gateway; None: a whole server
disaggregation_transfer_backend = "mooncake"  # how the KV cache moves: "mooncake" (sglang's default) or "nixl"
disaggregation_bootstrap_port = 8998      # the prefill's bootstrap server (sglang's default)
disaggregation_ib_device = None           # RDMA devices, e.g. "mlx5_0,mlx5_1"; None: mooncake detects them
disaggregation_allow_tcp = False          # True: a PD host without RDMA devices moves its KV cache over TCP, as intended
# --- one server over several hosts, rolled out as one unit (docs/topologies.md) ---
nodes = None                              # the group's hosts in rank order, the head first, e.g. ["gpu1", "gpu2"]
                                          # (on each of them); tp_size counts all their GPUs; None: one host
dist_init_port = 20000                    # the head's torch.distributed rendezvous (--dist-init-addr HEAD:PORT)
nnodes = 1                                # set by sglfleet from nodes, never by hand
node_rank = 0                             # set by sglfleet from nodes, never by hand
dist_init_addr = None                     # set by sglfleet from nodes, never by hand

# --- models: a hub id in model_path / speculative_draft_model_path is pinned to a commit ---
model_revision = None             # 40-hex commit of model_path; staged and verified before any restart
speculative_draft_model_revision = None  # the same for the draft
allow_unpinned_models = False     # development only: a branch or no revision is fetched by the server itself
models_dir = None                 # the hosts' model store, e.g. "/nvme/models"; None: /opt/sglfleet/models
model_source = "hub"              # "hub": each host fetches from the Hub or hf_endpoint; "controller": sent over SSH
hf_endpoint = None                # an HF-compatible mirror, e.g. "http://hf-mirror.internal:8090"
models_controller_dir = None      # model_source "controller": the controller's <org>/<name>/<revision>/ copies

# --- rollout ---
rollout_waves = None              # group names in order; None: canary, wave1, wave2, ..., then the rest
rollout_serial = None             # batches within waves, as Ansible's serial: e.g. [1, "10%", "50%"]; None: whole waves
max_fail_percentage = 0           # a batch with more failed hosts (in %) stops the run; at or below, it goes on
rollout_until = None              # e.g. "canary": stop after that wave; the next run goes on from there
router_url = None                 # sglang-router to drain hosts through, e.g. "http://router:30080"; None: the fleet's gateways
weights_update = "auto"           # a new model revision alone: "auto" updates the running server's weights in place
                                  # where its sglang can (docs/rollouts.md), else restarts; "in_place" or "restart" forces it

# --- the fleet's gateway: the hosts of the group `gateways` run SGLang's gateway (smg) and nothing else ---
gateway_stack = "gateway-smg-1.13.0"  # files/stacks/<name>.toml: the gateway's locked venv
gateway_port = 30080              # where clients (and the rollout, through its admin API) reach each gateway
gateway_metrics_port = 29000      # the gateway's Prometheus /metrics (smg's --prometheus-port default)
gateway_policy = "cache_aware"    # smg's routing policy: cache_aware (its default), round_robin, power_of_two, ...
gateway_health_check_interval_s = 60  # seconds between its checks of each worker (smg's default)
gateway_health_check_timeout_s = 5    # a check that takes longer fails (smg's default)
gateway_health_failure_threshold = 3  # failed checks in a row before a worker takes no traffic (smg's default)
gateway_health_success_threshold = 2  # passed checks in a row before it takes traffic again (smg's default)
gateway_health_check_endpoint = "/health"  # what it asks each worker (sglang's /health runs a one-token generation)
gateway_drain_timeout_s = 300     # how long the rollout waits for a gateway to let a worker go (its requests finish)
gateway_start_timeout_s = 120     # how long a restarted gateway may take to route again before its host fails

# --- TLS where the stack allows it (docs/tls.md) ---
gateway_tls = "off"               # the gateway's client port: "off", "fleet_ca" (a certificate from the fleet CA
                                  # the controller makes beside secrets_file), or {"cert": PATH, "key": PATH}, yours
worker_tls = False                # True: each service serves TLS (sglang's --ssl-* flags, 0.5.14 and later) with a
                                  # certificate from the fleet CA, and the gateways verify it (smg --ca-cert-paths)

# --- the start-up gate, after each restart (thresholds travel in releases/<id>/gate.json) ---
gate_warmup_s = 1800              # /health budget after a restart: model load + CUDA graphs take minutes
gate_poll_s = 1.0                 # seconds between the gate's looks at the unit and /health while it waits
gate_prompts = [                  # the gate's real generations, greedy, max_new_tokens each
    "The capital of France is",
    "Write a Python function that reverses a string.",
    "Explain in two sentences why the sky is blue.",
    "List the first ten prime numbers:",
]
gate_max_new_tokens = 64          # tokens per gate prompt (ignore_eos): 4 x 64 = 256 tokens measured
gate_sampled_tokens = 16          # then one sampled generation: the sampled path's JIT (77 s cold on an H200) runs here
gate_min_spec_accept_length = None  # e.g. 2.0: fail below this accept length (from the generations' meta_info)
gate_answer_timeout_s = None      # controller's wait for a host's switch; None: 4 warm-ups + bake + 600 s

# --- the bake: the wave's hosts judged on their traffic before the next wave starts ---
gate_bake_s = 0                   # seconds of /metrics sampling after the gate; 0: no bake (prod: 900)
gate_interval_s = 30              # seconds between samples
gate_max_regression = 0.10        # a figure may be 10 % worse than under the release served before
gate_on_inconclusive = "fail"     # no traffic during the bake: "fail" (roll back) or "pass"
gate_max_ttft_p99_s = None        # e.g. 2.0: absolute limit on time-to-first-token p99
gate_max_itl_p99_s = None         # e.g. 0.1: absolute limit on inter-token latency p99
gate_max_error_rate = 0.01        # share of 5xx answers and aborted requests that fails the bake

# --- the local fleet's SGLang stand-in (server = "standin") ---
standin_warmup_s = 10.0           # seconds the stand-in "loads the model" before it listens
standin_spec_accept_length = None  # e.g. 1.2: the accept length it produces; None: its default (2.8)
standin_compile_s = 55.0          # seconds it compiles kernels and CUDA graphs with an empty compile cache (H200: 54.6)
standin_sampling_jit_s = 77.0     # seconds its first sampled request compiles the sampling module (H200: 77.0)
standin_time_scale = 1.0          # multiplies sglang's own fixed waits (5 s SIGTERM watchdog, 1 s health looks); 1: sglang's

# --- how files reach hosts ---
distribution = "peers"            # wheels and model files cross the uplink once, then hosts fetch them from each other
share_port = 30089                # where a host serves files to its peers during a run (the fleet network only)
model_share_port = 30090          # where a host serves its model store to its peers during a run (the same)
share_compile_caches = True       # later hosts of a stack, GPU and driver start with the first one's compile caches
compile_share_port = 30091        # where a host serves its compile caches to later hosts during a rollout

# --- who may reach what: each host's nftables policy, table inet sglfleet (docs/network.md) ---
fleet_address = None              # the IP the fleet reaches the host at; None: its ssh_hostname (an IP, then)
firewall = True                   # False: the operator keeps the host's firewall, and sglfleet's table is removed
ssh_networks = None               # where SSH is open from, e.g. ["10.0.0.0/24"]; None: anywhere
client_networks = None            # where a gateway's clients (or, with no gateway, an engine's) come from; None: anywhere
monitoring_networks = []          # the monitoring hosts: node_exporter, engines' and gateways' metrics, e.g. ["10.0.0.5"]
node_exporter_port = 9100         # node_exporter's port, open to monitoring_networks
firewall_extra_rules = []         # your own nft rule lines for sglfleet's input chain, e.g. ["tcp dport 8443 accept"]
firewall_confirm_s = 30           # a new policy must be confirmed over a new SSH connection within this, or it undoes itself

# --- the unit ---
service_restart_s = 5             # RestartSec: how long systemd waits before it starts a crashed server again
stop_timeout_s = 120              # TimeoutStopSec: how long sglang drains requests in flight on a stop; those
                                  # still running then are killed, counted (RequestsCut) and shown by status

# --- housekeeping and safety ---
verify_stacks = "quick"           # every converge: the venv against its snapshot; "full": every file's RECORD hash
releases_keep = 3                 # old releases kept besides current and previous
stacks_keep = 1                   # old stacks kept besides those of current and previous
allow_unhashed_lock = False       # never in production: a stack lock without hashes is refused
secrets_file = "~/.config/sglfleet/secrets.env"  # on the controller, outside the repo, mode 0600
patch_sets_dir = None             # a controller folder of your own patch sets (docs/patches.md), after the shipped ones
patch_sets_skip = []              # names of patch sets (shipped or your own) this host does not apply

# --- what happened stays visible (sglfleet events) ---
events_file = None                # the controller's event log; None: $XDG_STATE_HOME/sglfleet/events.jsonl
textfile_dir = "/var/lib/prometheus/node-exporter"  # hosts: node_exporter's textfile folder, for sglfleet.prom
notify_webhooks = []              # e.g. [{"url": "https://hooks.internal/x/{token}", "reasons": ["RunFinished"]}]
