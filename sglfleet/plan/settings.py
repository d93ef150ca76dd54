"""The typed settings of sglfleet's inventory data: one host's ``HostConfig``, its launch and its services.

The models and their coercions only; ``sglfleet.plan.schema`` reads a host's data
into them and says what is wrong, one line a problem.

**Example:**

.. code:: python

    LaunchSettings.flag("tp_size")       # "--tp-size"
    field_of("gate_warmup_s").description  # "seconds > 0, e.g. 1800"
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from sglfleet.events import REASONS

# --- coercion of --data strings, before the strict checks ---------------------

def _to_int(value: Any) -> Any:
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _to_float(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _to_bool(value: Any) -> Any:
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "yes", "on", "1"):
            return True
        if lowered in ("false", "no", "off", "0"):
            return False
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    return value


def _to_names(value: Any) -> Any:
    # --data rollout_waves=canary,wave1 arrives as one string
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, tuple):
        return list(value)
    return value


def _to_argv(value: Any) -> Any:
    # --data 'extra_flags=--max-running-requests 64' arrives as one string
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _to_prompts(value: Any) -> Any:
    # --data gate_prompts="One prompt" arrives as one string
    if isinstance(value, str):
        return [value]
    if isinstance(value, tuple):
        return list(value)
    return value


PERCENT = re.compile(r"^(100|[1-9]\d?)(\.\d+)?%$")


def _to_serial(value: Any) -> Any:
    # --data rollout_serial=1,25%,100% arrives as one string; JSON as a list
    sizes = _to_names(value) if isinstance(value, str) else value
    if not isinstance(sizes, (list, tuple)):
        return sizes
    checked = []
    for size in sizes:
        size = _to_int(size)
        if isinstance(size, int) and not isinstance(size, bool) and size >= 1:
            checked.append(size)
        elif isinstance(size, str) and PERCENT.match(size.strip()):
            checked.append(size.strip())
        else:
            raise ValueError(f"{size!r} is neither a number of hosts >= 1 nor a percentage such as '25%'")
    return checked


def _network(value: Any) -> Any:
    # "10.0.0.0/24", "10.0.0.7" (one address) or "fd00::/64", as nftables takes them
    if isinstance(value, str):
        try:
            return str(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address or network") from None
    return value


def _address(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return str(ipaddress.ip_address(value.strip()))
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address") from None
    return value


def _to_cap(value: Any) -> Any:
    # --data gpu_compute_cap=12.0 arrives as a float
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{float(value):.1f}"
    return value


Int = Annotated[int, BeforeValidator(_to_int)]
Float = Annotated[float, BeforeValidator(_to_float)]
Bool = Annotated[bool, BeforeValidator(_to_bool)]
Names = Annotated[list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]], BeforeValidator(_to_names)]
HostNames = Annotated[list[Annotated[str, Field(min_length=1)]], BeforeValidator(_to_names)]  # inventory names
SetNames = Annotated[list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]], BeforeValidator(_to_names)]
Argv = Annotated[list[Annotated[str, Field(min_length=1, pattern=r"^[^\x00-\x1f\x7f]+$")]], BeforeValidator(_to_argv)]
Cap = Annotated[str, BeforeValidator(_to_cap), Field(pattern=r"^\d+\.\d+$")]
Text = Annotated[str, Field(min_length=1, pattern=r"^[^\x00-\x1f\x7f]+$")]
Url = Annotated[str, Field(pattern=r"^https?://[^\s/:]+(:\d+)?/?$")]
Prompts = Annotated[list[Text], BeforeValidator(_to_prompts)]
Networks = Annotated[list[Annotated[str, BeforeValidator(_network)]], BeforeValidator(_to_names)]
Address = Annotated[str, BeforeValidator(_address)]
# One nftables rule, a line of sglfleet's input chain: no newline, no ``;`` (one rule a line).
Rule = Annotated[str, Field(min_length=1, pattern=r"^[^\x00-\x1f\x7f;]+$")]
Serial = Annotated[list[Union[int, str]], BeforeValidator(_to_serial)]


class NotifyWebhook(BaseModel):
    """One webhook: where the events it subscribes to are POSTed (``sglfleet.hooks.webhooks``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    url: Annotated[str, Field(pattern=r"^https?://[^\s]+$")] = Field(
        description='an http(s) URL, "{token}" where SGLFLEET_WEBHOOK_TOKEN goes, e.g. '
                    '"https://hooks.example.internal/sglfleet/{token}"')
    reasons: list[Literal[REASONS]] = Field(min_length=1, description='event reasons, e.g. ["RunFinished", '
                                                                      '"GateFailed"] (sglfleet.events.REASONS)')


class OperatorTls(BaseModel):
    """The operator's own certificate for a gateway's client port: two PEM files on the controller."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    cert: Text = Field(description="the certificate's PEM file on the controller, its chain after it")
    key: Text = Field(description="its private key's PEM file on the controller (no passphrase, mode 0600)")


def _to_tls(value: Any) -> Any:
    # One line for any wrong form, not one for each member of the union.
    if value is False:
        return "off"
    if value in ("off", "fleet_ca") or isinstance(value, OperatorTls):
        return value
    if isinstance(value, dict) and set(value) == {"cert", "key"} and all(isinstance(v, str) and v for v in value.values()):
        return OperatorTls(**value)
    raise ValueError('expected "off", "fleet_ca" or {"cert": PATH, "key": PATH}')


# "off", "fleet_ca" (a certificate from the fleet CA the controller makes), or the operator's own pair.
GatewayTls = Annotated[Union[Literal["off", "fleet_ca"], OperatorTls], BeforeValidator(_to_tls)]


class LaunchSettings(BaseModel):
    """
    How sglang is launched: each key is one of sglang's flags (``tp_size`` ->
    ``--tp-size``), but for ``listen_host`` and ``listen_port`` (``--host``,
    ``--port``), named so they do not read as pyinfra's host.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    model_path: Text = Field(description='a model path or hub id, e.g. "moonshotai/Kimi-K2.5"')
    served_model_name: Optional[Text] = Field(description="a name, or None for a pinned model's hub id (else the model path)")
    trust_remote_code: Bool = Field(description="true or false")
    tp_size: Int = Field(ge=1, description="a whole number >= 1, e.g. 8")
    mem_fraction_static: Optional[Float] = Field(gt=0, lt=1, description="a fraction between 0 and 1, e.g. 0.85")
    cuda_graph_max_bs: Optional[Int] = Field(ge=1, description="a whole number >= 1, e.g. 64")
    speculative_algorithm: Optional[Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]] = Field(
        description='"EAGLE3" (or EAGLE, NEXTN, STANDALONE, NGRAM), or None')
    speculative_draft_model_path: Optional[Text] = Field(description="the draft model's path or hub id")
    speculative_num_steps: Optional[Int] = Field(ge=1, description="a whole number >= 1, e.g. 3")
    speculative_eagle_topk: Optional[Int] = Field(ge=1, description="a whole number >= 1, e.g. 1")
    speculative_num_draft_tokens: Optional[Int] = Field(ge=1, description="a whole number >= 1, e.g. 4")
    enable_flashinfer_allreduce_fusion: Bool = Field(description="true or false")
    enable_torch_symm_mem: Bool = Field(description="true or false")
    enable_metrics: Bool = Field(description="true or false")
    # The lint checks both against the choices of the stack's own sglang (sglfleet.plan.lint).
    reasoning_parser: Optional[Text] = Field(description='a reasoning parser of the stack\'s sglang, e.g. '
                                                         '"kimi_k2", or None')
    tool_call_parser: Optional[Text] = Field(description='a tool-call parser of the stack\'s sglang, e.g. '
                                                         '"kimi_k2", or None')
    # None: the host's fleet address where anything outside the host needs the server (gateways, a
    # router, a PD peer), else loopback (sglfleet.plan.network.listen_addresses); never 0.0.0.0 by default.
    listen_host: Optional[Text] = Field(description='a listen address, e.g. "10.0.0.11" or "127.0.0.1", or None '
                                                    'for the host\'s fleet address where the fleet needs it',
                                        json_schema_extra={"flag": "--host"})
    listen_port: Int = Field(ge=1, le=65535, description="a TCP port between 1 and 65535, e.g. 30000",
                             json_schema_extra={"flag": "--port"})
    extra_flags: Argv = Field(description='a list of sglang flags, e.g. ["--max-running-requests", "64"]',
                              json_schema_extra={"flag": None})
    # Prefill and decode on separate servers (docs/pd.md). sglang 0.5.9 server_args.py:654-661 (defaults),
    # 4841-4886 (the flags); the lint checks the backend against the stack's own sglang's choices.
    disaggregation_mode: Optional[Literal["prefill", "decode"]] = Field(
        description='"prefill" or "decode" (a server of one role behind a PD gateway), or None for a whole server')
    disaggregation_transfer_backend: Text = Field(description='a KV transfer backend of the stack\'s sglang, '
                                                              'e.g. "mooncake" (0.5.9\'s default) or "nixl"')
    disaggregation_bootstrap_port: Int = Field(ge=1, le=65535, description="a TCP port between 1 and 65535, "
                                                                           "e.g. 8998 (sglang's default)")
    disaggregation_ib_device: Optional[Text] = Field(description='RDMA devices, e.g. "mlx5_0,mlx5_1", or None '
                                                                 '(mooncake detects them)')
    # One server over several hosts (docs/topologies.md): set by sglfleet from ``nodes``
    # (sglfleet.plan.multinode.with_groups), never by hand; sglang 0.5.9 server_args.py:3732-3742.
    nnodes: Int = Field(ge=1, description="set by sglfleet from nodes: list the group's hosts in nodes")
    node_rank: Int = Field(ge=0, description="set by sglfleet from nodes: list the group's hosts in nodes")
    dist_init_addr: Optional[Text] = Field(description="set by sglfleet from nodes: list the group's hosts in nodes")

    @staticmethod
    def flag(key: str) -> str | None:
        """The sglang flag of a key: ``"tp_size"`` -> ``"--tp-size"``; None for ``extra_flags``."""
        extra = LaunchSettings.model_fields[key].json_schema_extra or {}
        return extra["flag"] if "flag" in extra else "--" + key.replace("_", "-")


# The launch keys rendered as sglang flags, in the order the schema declares them.
LAUNCH_KEYS = tuple(key for key in LaunchSettings.model_fields if LaunchSettings.flag(key))
# Keys that mean something only to a server of one role: not rendered for a whole server, whose
# release id (and so every existing fleet's) stays what it was.
PD_ONLY_KEYS = ("disaggregation_transfer_backend", "disaggregation_bootstrap_port", "disaggregation_ib_device")
# Keys of a server over several hosts alone: likewise not rendered for a server on one host.
GROUP_ONLY_KEYS = ("nnodes", "node_rank", "dist_init_addr")


def unrendered_keys(launch: LaunchSettings) -> tuple[str, ...]:
    """The launch keys not rendered for ``launch``: the PD keys without a role, the group's on one host."""
    return (() if launch.disaggregation_mode else PD_ONLY_KEYS) + (() if launch.nnodes > 1 else GROUP_ONLY_KEYS)


def rendered_keys(launch: LaunchSettings) -> tuple[str, ...]:
    """The launch keys rendered as flags for ``launch``: the PD keys only where it has a role, the group's
    only where it spans hosts."""
    return tuple(key for key in LAUNCH_KEYS if key not in unrendered_keys(launch))


class ServiceSettings(BaseModel):
    """
    One of a host's ``services``: its name, the GPUs it owns, its port, and its
    whole launch (the host's launch keys with the service's own on top).
    Checked by ``sglfleet.plan.services.parse_services``, which says what is wrong.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str
    gpus: list[int]
    port: int
    launch: LaunchSettings
    # The service's own pins, where it loads another model than the host's (None: the host's, for the host's model).
    model_revision: Optional[str] = None
    speculative_draft_model_revision: Optional[str] = None


class HostConfig(BaseModel):
    """One host's validated sglfleet data: what runs, how it is launched, how it rolls out."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    # what runs
    stack: Text = Field(description="the name of a stack file files/stacks/<name>.toml")
    server: Literal["sglang", "standin"] = Field(description='"sglang" (GPU hosts) or "standin" (GPU-less local fleet)')
    gpu_less: Bool = Field(description="true or false")
    gpu_compute_cap: Optional[Cap] = Field(description='the GPUs\' compute capability, e.g. "12.0" or "10.0"')
    gpu_count: Optional[Int] = Field(ge=1, description="the number of GPUs, e.g. 8")
    # A PD service's transfer backend (mooncake, nixl) without an RDMA device falls back to TCP: preflight
    # refuses that unless this says it is intended (sglfleet.plan.preflight.rdma_problems).
    disaggregation_allow_tcp: Bool = Field(description="true or false")
    # one server over several hosts, rolled out as one unit (sglfleet.plan.multinode, docs/topologies.md)
    nodes: Optional[HostNames] = Field(min_length=2, description='the group\'s hosts in rank order, the head first, '
                                                            'e.g. ["gpu1", "gpu2"], or None (one host)')
    dist_init_port: Int = Field(ge=1, le=65535, description="a TCP port between 1 and 65535, e.g. 20000")

    # sglang launch flags, given flat in inventory data
    launch: LaunchSettings
    # several sglang services on the host, each its own unit, GPUs, port and releases (sglfleet.plan.services)
    services: Optional[list[ServiceSettings]] = Field(
        description='a list of services, e.g. [{"name": "big", "gpus": [0, 1, 2, 3], "port": 30000, "tp_size": 4}]')

    # models: pinned to a commit, staged and verified in phase A (sglfleet.artifacts.models)
    model_revision: Optional[Text] = Field(description='the model\'s 40-hex commit, e.g. "4d01dfe0332d63057c186e0b262165819efb6611"')
    speculative_draft_model_revision: Optional[Text] = Field(description="the draft model's 40-hex commit")
    allow_unpinned_models: Bool = Field(description="true or false")
    models_dir: Optional[Annotated[str, Field(pattern=r"^/[^\x00-\x1f\x7f]*$")]] = Field(
        description='an absolute path on the host, e.g. "/nvme/models", or None for /opt/sglfleet/models')
    model_source: Literal["hub", "controller"] = Field(description='"hub" (the Hub, or hf_endpoint\'s mirror) or "controller"')
    hf_endpoint: Optional[Url] = Field(description='an HF-compatible mirror, e.g. "http://hf-mirror.internal:8090", or None')
    models_controller_dir: Optional[Text] = Field(description="a folder on the controller holding <org>/<name>/<revision>/")

    # rollout
    rollout_waves: Optional[Names] = Field(min_length=1, description='a list of group names, e.g. ["canary", "wave1"]')
    rollout_serial: Optional[Serial] = Field(min_length=1, description='batch sizes, numbers or percentages of '
                                             'the targeted hosts, the last repeating, e.g. [1, "10%", "50%"]')
    max_fail_percentage: Float = Field(ge=0, le=100, description="a percentage of a batch, e.g. 0 or 25")
    rollout_until: Optional[Text] = Field(description="a wave name, e.g. \"canary\" (stop after it)")
    router_url: Optional[Url] = Field(description='an http URL, e.g. "http://router.example.internal:30080"')
    # A new revision of the model alone: loaded by the running server (sglfleet.plan.weights), or a restart.
    weights_update: Literal["auto", "in_place", "restart"] = Field(
        description='"auto" (in place where only the weights change and the sglang can), "in_place" or "restart"')

    # the fleet's gateway (hosts of the group gateways; sglfleet.plan.gateway)
    gateway_stack: Text = Field(description="the name of a stack file files/stacks/<name>.toml, e.g. "
                                            "\"gateway-smg-1.13.0\"")
    gateway_port: Int = Field(ge=1, le=65535, description="a TCP port between 1 and 65535, e.g. 30080")
    gateway_metrics_port: Int = Field(ge=1, le=65535, description="a TCP port between 1 and 65535, e.g. 29000")
    # smg 1.13.0 smg/router_args.py:27-37 (COMMON_POLICY_CHOICES), the choices of its --policy
    gateway_policy: Literal["random", "round_robin", "passthrough", "cache_aware", "power_of_two", "least_load",
                            "manual", "consistent_hashing", "prefix_hash"] = Field(
        description='a policy of smg 1.13.0\'s --policy, e.g. "round_robin"')
    # smg requires at least 1 for the interval and the timeout (router_args.py:1858-1871)
    gateway_health_check_interval_s: Int = Field(ge=1, description="whole seconds >= 1, e.g. 60")
    gateway_health_check_timeout_s: Int = Field(ge=1, description="whole seconds >= 1, e.g. 5")
    gateway_health_failure_threshold: Int = Field(ge=1, description="a whole number >= 1, e.g. 3")
    gateway_health_success_threshold: Int = Field(ge=1, description="a whole number >= 1, e.g. 2")
    gateway_health_check_endpoint: Annotated[str, Field(pattern=r"^/[A-Za-z0-9_./-]*$")] = Field(
        description='a path on the workers, e.g. "/health"')
    gateway_drain_timeout_s: Float = Field(gt=0, description="seconds > 0, e.g. 300")
    gateway_start_timeout_s: Float = Field(gt=0, description="seconds > 0, e.g. 120")
    # TLS (docs/tls.md): the gateway's client port, and the gateways' connections to this host's services
    gateway_tls: GatewayTls = Field(description='"off", "fleet_ca" (a certificate from the fleet CA), or the '
                                                'operator\'s {"cert": "~/tls/gw.crt", "key": "~/tls/gw.key"}')
    worker_tls: Bool = Field(description="true or false (true: the services serve TLS with a certificate from the "
                                         "fleet CA, through sglang's --ssl-* flags, 0.5.14 and later)")

    # the start-up gate
    gate_warmup_s: Float = Field(gt=0, description="seconds > 0, e.g. 1800")
    gate_prompts: Prompts = Field(min_length=1, description='a list of prompts, e.g. ["The capital of France is"]')
    gate_max_new_tokens: Int = Field(ge=1, le=4096, description="tokens per gate prompt, e.g. 64")
    gate_sampled_tokens: Int = Field(ge=0, le=4096, description="tokens of the gate's sampled generation, e.g. 16 (0: none)")
    gate_min_spec_accept_length: Optional[Float] = Field(gt=0, description="a number > 0, e.g. 2.0, or None")
    gate_poll_s: Float = Field(gt=0, le=60, description="seconds > 0, e.g. 1")
    gate_answer_timeout_s: Optional[Float] = Field(gt=0, description="seconds > 0, e.g. 7800, or None")
    # the bake
    gate_bake_s: Float = Field(ge=0, description="seconds >= 0, e.g. 600 (0: no bake)")
    gate_interval_s: Float = Field(gt=0, description="seconds > 0, e.g. 30")
    gate_max_regression: Float = Field(ge=0, description="a fraction >= 0, e.g. 0.10")
    gate_on_inconclusive: Literal["fail", "pass"] = Field(description='"fail" or "pass"')
    gate_max_ttft_p99_s: Optional[Float] = Field(gt=0, description="seconds > 0, e.g. 2.0, or None")
    gate_max_itl_p99_s: Optional[Float] = Field(gt=0, description="seconds > 0, e.g. 0.1, or None")
    gate_max_error_rate: Optional[Float] = Field(ge=0, le=1, description="a fraction, e.g. 0.01, or None")

    # the local fleet's stand-in
    standin_warmup_s: Float = Field(ge=0, description="seconds >= 0, e.g. 10")
    standin_spec_accept_length: Optional[Float] = Field(ge=1, description="a number >= 1, e.g. 2.8, or None")
    standin_compile_s: Float = Field(ge=0, description="seconds >= 0, e.g. 55")
    standin_sampling_jit_s: Float = Field(ge=0, description="seconds >= 0, e.g. 77")
    standin_time_scale: Float = Field(gt=0, le=1, description="a number > 0 and <= 1, e.g. 1 (sglang's timing) or 0.1")

    # the unit
    service_restart_s: Float = Field(ge=0, le=3600, description="seconds >= 0, e.g. 5")
    stop_timeout_s: Int = Field(ge=1, le=86400, description="whole seconds >= 1, e.g. 120")

    # how files reach hosts
    distribution: Literal["peers", "controller"] = Field(description='"peers" (fan out through the hosts) or '
                                                         '"controller" (to every host from the controller)')
    share_port: Int = Field(ge=1, le=65535, description="a TCP port between 1 and 65535, e.g. 30089")
    model_share_port: Int = Field(ge=1, le=65535, description="a TCP port between 1 and 65535, e.g. 30090")
    share_compile_caches: Bool = Field(description="true or false")
    compile_share_port: Int = Field(ge=1, le=65535, description="a TCP port between 1 and 65535, e.g. 30091")

    # who may reach what: each host's nftables policy, table inet sglfleet (sglfleet.plan.network, docs/network.md)
    fleet_address: Optional[Address] = Field(description='the IP address the fleet reaches this host at, e.g. '
                                                         '"10.0.0.11", or None for its ssh_hostname')
    firewall: Bool = Field(description="true or false (false: the operator keeps the host's firewall)")
    ssh_networks: Optional[Networks] = Field(description='networks SSH is open to, e.g. ["10.0.0.0/24"], '
                                                         'or None for anywhere')
    client_networks: Optional[Networks] = Field(description='networks the clients\' ports are open to, e.g. '
                                                            '["10.1.0.0/16"], or None for anywhere')
    monitoring_networks: Networks = Field(description='the monitoring hosts\' addresses or networks, e.g. '
                                                      '["10.0.0.5"], or []')
    node_exporter_port: Int = Field(ge=1, le=65535, description="a TCP port between 1 and 65535, e.g. 9100")
    firewall_extra_rules: list[Rule] = Field(description='nft rule lines for sglfleet\'s input chain, e.g. '
                                                         '["tcp dport 8443 accept"], or []')
    firewall_confirm_s: Int = Field(ge=10, le=600, description="whole seconds between 10 and 600, e.g. 30")

    # housekeeping and safety
    verify_stacks: Literal["quick", "full"] = Field(description='"quick" (the venv against its snapshot) or '
                                                    '"full" (every file against its RECORD hash)')
    releases_keep: Int = Field(ge=0, description="a whole number >= 0, e.g. 3")
    stacks_keep: Int = Field(ge=0, description="a whole number >= 0, e.g. 1")
    allow_unhashed_lock: Bool = Field(description="true or false")
    secrets_file: Text = Field(description="a path outside the repository, e.g. ~/.config/sglfleet/secrets.env")
    # operators' own patch sets, after the shipped ones (sglfleet.artifacts.patchsets, docs/patches.md)
    patch_sets_dir: Optional[Text] = Field(description='a folder of patch set files on the controller, e.g. '
                                                       '"inventory/patches" (from the project\'s root), or None')
    patch_sets_skip: SetNames = Field(description='names of patch sets this host does not apply, e.g. '
                                                  '["api_key_not_logged"], or []')

    # what happened stays visible
    events_file: Optional[Text] = Field(description='a path on the controller, e.g. "~/sglfleet-events.jsonl", '
                                                    'or None for $XDG_STATE_HOME/sglfleet/events.jsonl')
    notify_webhooks: list[NotifyWebhook] = Field(description='a list of {"url": ..., "reasons": [...]}')
    textfile_dir: Annotated[str, Field(pattern=r"^/[^\x00-\x1f\x7f]*$")] = Field(
        description='an absolute path on the host, e.g. "/var/lib/prometheus/node-exporter"')


# Every key inventory data may hold, flat: the launch keys sit beside the others.
SCHEMA_KEYS = tuple(key for key in HostConfig.model_fields if key != "launch") + tuple(LaunchSettings.model_fields)


def field_of(key: str):
    """The pydantic field of a flat key, launch keys included (None when unknown)."""
    if key in LaunchSettings.model_fields:
        return LaunchSettings.model_fields[key]
    return HostConfig.model_fields.get(key) if key != "launch" else None


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def pydantic_problems(name: str, error: ValidationError) -> list[str]:
    """One line for each of pydantic's errors, naming the host, the key as the inventory writes it, and the fix."""
    problems = []
    for item in error.errors():
        # A launch key's error is at ("launch", key): name the key as the inventory writes it.
        key = str(item["loc"][1] if item["loc"][:1] == ("launch",) and len(item["loc"]) > 1
                  else item["loc"][0]) if item["loc"] else "?"
        field = field_of(key)
        hint = field.description if field else ""
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "string_pattern_mismatch":
            message = "has the wrong form"
        if item["type"] == "missing":
            problems.append(f"{name}: {key}: missing; set it to {hint}")
            continue
        problems.append(f"{name}: {key} = {show(item['input'])}: {message}; set it to {hint}")
    return problems
