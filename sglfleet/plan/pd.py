"""
Prefill and decode on separate servers: each worker's role, what a PD fleet must hold, and a release's
fingerprint. Pure. The rollout unit is ``sglfleet.plan.pd_units``; docs/pd.md says why.

A service with ``disaggregation_mode`` "prefill" or "decode" is a worker of one role; its gateway
then runs smg in PD mode (``sglfleet.plan.gateway``). What must match between a decode and the
prefills it pulls KV from, read in sglang 0.5.9:

- the model: the KV cache's layers and heads are the model's; and smg pairs a prefill and a decode
  by model id (smg ``pd_router.rs:820-848``, ``get_by_model``), so a served name that differs
  never pairs;
- ``--page-size``: the decode refuses a prefill of another page size
  (``srt/disaggregation/common/conn.py:275-284``: "Page size mismatch ... must use the same --page-size");
- ``--kv-cache-dtype``: the transfer copies bytes per token slot (``mooncake/conn.py:419-467``),
  so another dtype reads garbage rather than failing;
- ``tp_size``: may differ only where one divides the other (``server_args.py:5427-5433``), and a
  prefill learns the decode's only from ``--disaggregation-decode-tp`` (else its own, 2559-2560);
- the transfer backend: each side loads its own (``disaggregation/utils.py:247-252``);
- the stack: sglang's KV layout and transfer protocol are those of its release.

**Example:**

.. code:: python

    role_of(config)                                   # "prefill", "decode" or None
    pd_problems(groups, configs)                      # one line a problem, before any connection
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sglfleet.host.layout import LAYOUT

PREFILL, DECODE = "prefill", "decode"
ROLES = (PREFILL, DECODE)
# sglang 0.5.9 server_args.py: --page-size, --kv-cache-dtype, --disaggregation-decode-tp (flags in extra_flags).
PAGE_SIZE, KV_CACHE_DTYPE, DECODE_TP = ("--page-size",), ("--kv-cache-dtype",), ("--disaggregation-decode-tp",)
# A server's own launch flags: the rest a prefill and a decode of one release share (the stand-in's
# files/standin/standin_disagg.py ROLE_FLAGS, held equal by test_pd_plan).
ROLE_FLAGS = ("--disaggregation-mode", "--disaggregation-bootstrap-port", "--disaggregation-ib-device",
              "--host", "--port", "--tp-size", "--tp", "--mem-fraction-static", "--cuda-graph-max-bs",
              "--disaggregation-decode-tp", "--config")
# The wheel each backend imports on a real server (sglang 0.5.9 srt/disaggregation/mooncake/conn.py,
# nixl/conn.py), as PyPI names it; the lock of a stack that serves with it must carry one of them.
# Mooncake publishes its CUDA 13 build under its own name (the -cuda13 wheel, same ``mooncake`` package);
# nixl's ``nixl`` shim loads nixl_cu13 or nixl_cu12, whichever the CUDA major asks for.
BACKEND_WHEELS = {"mooncake": ("mooncake-transfer-engine", "mooncake-transfer-engine-cuda13"), "nixl": ("nixl",)}
# The module each backend's wheel gives, as sglang imports it (0.5.23 srt/distributed/device_communicators/
# mooncake_transfer_engine.py:120 ``from mooncake.engine import TransferEngine``; srt/disaggregation/nixl/
# conn.py:543 ``from nixl._api import nixl_agent``): what the probe imports.
BACKEND_MODULES = {"mooncake": "mooncake.engine", "nixl": "nixl._api"}


@dataclass(frozen=True)
class Worker:
    """
    One worker of the gateways: its URL, its role (None: a whole server), for a prefill its
    bootstrap port, and its release's pairing generation, as smg takes them (``--prefill URL PORT``,
    ``--decode URL``; ``POST /workers`` with ``worker_type``, ``bootstrap_port`` and
    ``pairing_protocol``, smg 1.13.0 ``crates/protocols/src/worker.rs:751-761`` ``WorkerSpec``).
    """

    url: str
    role: str | None = None
    bootstrap_port: int | None = None
    pairing: str | None = None

    def spec(self) -> dict:
        """The ``POST /workers`` body's role fields (empty for a whole server)."""
        if self.role is None:
            return {}
        return {"worker_type": self.role, **({"bootstrap_port": self.bootstrap_port} if self.role == PREFILL else {}),
                **({"pairing_protocol": self.pairing} if self.pairing else {})}


def worker_of(url: str, config) -> Worker:
    """A service's ``Worker``: its URL, its role, its bootstrap port where it is a prefill, and its generation."""
    role = role_of(config)
    return Worker(url, role, config.launch.disaggregation_bootstrap_port if role == PREFILL else None,
                  pairing_generation(config) if role else None)


def pairing_generation(config) -> str:
    """
    The release a prefill and a decode share, as smg's ``pairing_protocol``: smg pairs two workers that
    both carry one only where the values are equal (smg 1.13.0 ``worker/pd_pairing.rs:262-273``), so the
    old and the new release can both be listed at a flip and never be paired together.

    + config: a PD service's ``HostConfig``
    """
    shared = {"kv_shape": kv_shape(config), "args": shared_args(config)}
    return "sglfleet-" + hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:12]


def role_of(config) -> str | None:
    """A service's role: ``"prefill"``, ``"decode"``, or None for a whole server."""
    return config.launch.disaggregation_mode


def flag_value(extra_flags: list[str], flags: tuple[str, ...]) -> str | None:
    """The value one of ``flags`` has in ``extra_flags`` (``--flag V`` or ``--flag=V``), else None."""
    for i, token in enumerate(extra_flags):
        key, sep, value = token.partition("=")
        if key in flags:
            return value if sep else (extra_flags[i + 1] if i + 1 < len(extra_flags) else None)
    return None


def kv_shape(config, stack: str | None = None) -> dict:
    """
    What a prefill and a decode must agree on to hand a KV cache over (this module's list).

    + config: a service's ``HostConfig``
    + stack: its stack's name (default: the config's)
    """
    launch = config.launch
    return {
        "model_path": launch.model_path,
        "model_revision": config.model_revision,
        "served_model_name": launch.served_model_name,
        "stack": stack or config.stack,
        "transfer_backend": launch.disaggregation_transfer_backend,
        "page_size": flag_value(launch.extra_flags, PAGE_SIZE) or "1",      # 0.5.9's default (_handle_page_size)
        "kv_cache_dtype": flag_value(launch.extra_flags, KV_CACHE_DTYPE) or "auto",
    }


def shared_args(config) -> list[str]:
    """The launch flags a prefill and a decode of one release share: all but ``ROLE_FLAGS``."""
    from sglfleet.plan.release import launch_args

    kept, skip = [], False
    for token in launch_args(config.launch):
        if skip:
            skip = False
            continue
        name, sep, _ = token.partition("=")
        if name in ROLE_FLAGS:
            skip = not sep
            continue
        kept.append(token)
    return kept


def fingerprint(shape: Mapping) -> str:
    """A short digest of ``kv_shape``: what the stand-in carries as its release's identity in a pair."""
    return hashlib.sha256(json.dumps(dict(shape), sort_keys=True).encode()).hexdigest()[:12]


def _workers(hosts_with_groups: Mapping[str, Iterable[str]], configs: Mapping, gateways: set[str]):
    """``(host, service name, role, config)`` of every serving service, in inventory order."""
    from sglfleet.plan.services import host_services

    for host in hosts_with_groups:
        if host in gateways or host not in configs:
            continue
        for service in host_services(configs[host]):
            yield host, service.name, role_of(service.config), service.config


def pd_problems(hosts_with_groups: Mapping[str, Iterable[str]], configs: Mapping, gateways: Iterable[str]) -> list[str]:
    """
    What stops the fleet's prefills and decodes from pairing, one line each (empty where no service has a role).

    + hosts_with_groups: every inventory host -> its groups
    + configs: every host's validated ``HostConfig``
    + gateways: the hosts of the group ``gateways``

    **Example:**

    .. code:: python

        pd_problems({"node1": [], "node2": [], "gw": ["gateways"]}, configs, ["gw"])
        # ["node1, node2: a PD fleet needs a decode behind its gateway, and has none; ..."]
    """
    gateways = set(gateways)
    workers = list(_workers(hosts_with_groups, configs, gateways))
    roles = [role for _, _, role, _ in workers]
    if not any(roles):
        return []
    where = lambda items: ", ".join(dict.fromkeys(f"{h}" if LAYOUT.for_service(s).legacy else f"{h} ({s})"
                                                  for h, s, *_ in items))
    problems = []
    whole = [w for w in workers if w[2] is None]
    if whole:
        problems.append(f"{where(whole)}: a whole server in a PD fleet: smg in PD mode routes only to prefills "
                        f"and decodes; set disaggregation_mode = \"prefill\" or \"decode\" on every serving host")
    if not gateways:
        problems.append(f"{where(workers)}: disaggregation_mode without a gateway: a prefill and a decode serve only "
                        f"as a pair, which the gateway makes; add a host to the group gateways")
    for role in ROLES:
        if role not in roles:
            problems.append(f"{where(workers)}: a PD fleet needs a {role} behind its gateway, and has none; "
                            f"set disaggregation_mode = \"{role}\" on one serving host")
    prefills = [w for w in workers if w[2] == PREFILL]
    decodes = [w for w in workers if w[2] == DECODE]
    if prefills:
        first_host, first_service, _, first = prefills[0]
        reference = kv_shape(first)
        for host, service, _, config in prefills[1:] + decodes:
            shape = kv_shape(config)
            for key, value in shape.items():
                if value != reference[key]:
                    problems.append(f"{host}: {key} = {value!r}, but the prefill {first_host} has {reference[key]!r}: "
                                    f"every prefill and decode of a PD fleet must share it (a decode cannot take the "
                                    f"KV cache otherwise; docs/pd.md); make them equal")
        shared = shared_args(first)
        for host, service, _, config in prefills[1:] + decodes:
            own = shared_args(config)
            if own != shared and not any(line.startswith(f"{host}: ") for line in problems):
                extra = sorted(set(own) ^ set(shared)) or own
                problems.append(f"{host}: its launch flags differ from the prefill {first_host}'s beyond a server's "
                                f"own (around {' '.join(extra[:4])}): a prefill and a decode of one release share "
                                f"every flag but {', '.join(ROLE_FLAGS[:6])}, ...; make them equal")
        for host, service, _, config in decodes:
            decode_tp = config.launch.tp_size
            for p_host, _, _, prefill in prefills:
                prefill_tp = prefill.launch.tp_size
                if max(prefill_tp, decode_tp) % min(prefill_tp, decode_tp):
                    problems.append(f"{host}: tp_size = {decode_tp} and the prefill {p_host}'s {prefill_tp}: sglang "
                                    f"pairs them only where one divides the other; change one of them")
                elif prefill_tp != decode_tp and flag_value(prefill.launch.extra_flags, DECODE_TP) != str(decode_tp):
                    problems.append(f"{p_host}: its decodes run tp_size {decode_tp} and it {prefill_tp}: pass "
                                    f"[\"--disaggregation-decode-tp\", \"{decode_tp}\"] in its extra_flags "
                                    f"(sglang assumes its own tp_size otherwise)")
    return problems


def backend_wheel_problem(host: str, config, stack) -> str | None:
    """
    The line that says the stack's lock lacks the wheel of the host's transfer backend, else None.

    Only for ``server = "sglang"``: the stand-in moves the KV cache over HTTP and loads no backend.

    + host: its name
    + config: a service's ``HostConfig``
    + stack: its loaded ``Stack``
    """
    backend = config.launch.disaggregation_transfer_backend
    wheels = BACKEND_WHEELS.get(backend)
    if role_of(config) is None or config.server != "sglang" or wheels is None:
        return None
    names = {f.name.lower().replace("_", "-") for f in stack.every_file or stack.files}
    if names & set(wheels):
        return None
    wheel = wheels[-1]
    return (f"{backend!r} needs the {wheel} wheel, and the lock of stack {stack.name} has none: "
            f"add {wheel} to files/stacks/{stack.name}.toml and run `sglfleet lock {stack.name}`")
