"""The fleet's gateway: which hosts run it, which workers it routes to, how it is launched. Pure.

Hosts in the inventory group ``gateways`` run SGLang's gateway (smg) and nothing
else: no GPU preflight, no sglang stack, no release, no wave. Every other host
is a worker of every gateway, under the URL the rollout drains and rejoins it by
(``http://<fleet_address, ssh_hostname or name>:<listen_port>``), and each of a host's ``services``
under its own port. Bad input is one line per
problem before anything connects: a gateway that is also in a wave, gateways
without workers, a worker the gateways cannot reach, a port that two things want.

**Example:**

.. code:: python

    serving = serving_groups(groups)                 # the wave plan's input, without the gateways
    args = gateway_args(config, worker_urls(hosts, configs))
    # ["--host", "0.0.0.0", "--port", "30080", ..., "--worker-urls", "http://node1:30000", ...]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sglfleet.plan.pd import PREFILL, Worker

GATEWAYS = "gateways"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_gateway(groups: Iterable[str]) -> bool:
    """Whether a host with these inventory groups is a gateway host."""
    return GATEWAYS in set(groups)


def serving_groups(hosts_with_groups: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """
    Every host but the gateways, with its groups: what the wave plan orders.

    + hosts_with_groups: every inventory host (in inventory order) -> its group names
    """
    return {host: list(groups) for host, groups in hosts_with_groups.items() if not is_gateway(groups)}


def address(name: str, data: Mapping) -> str:
    """Where the fleet reaches a host: its ``fleet_address``, else its ``ssh_hostname``, else its inventory name."""
    return data.get("fleet_address") or data.get("ssh_hostname") or name


def worker_url(name: str, data: Mapping, listen_port: int, tls: bool = False) -> str:
    """A serving host's URL as its gateways (and an external router) know it: https where it serves TLS."""
    return f"{'https' if tls else 'http'}://{address(name, data)}:{listen_port}"


def gateway_url(name: str, data: Mapping, gateway_port: int, tls: bool = False) -> str:
    """A gateway's base URL, where clients and its admin API reach it: https where its client port serves TLS."""
    return f"{'https' if tls else 'http'}://{address(name, data)}:{gateway_port}"


def worker_args(workers: Iterable) -> list[str]:
    """
    The workers on smg's command line: ``--worker-urls URL ...``; where they have roles, PD mode,
    ``--pd-disaggregation`` with ``--prefill URL BOOTSTRAP_PORT`` a prefill and ``--decode URL`` a
    decode (smg 1.13.0 ``router_args.py:1137-1183``, parsed by ``_parse_prefill_urls`` 2591-2625).

    + workers: URLs, or ``sglfleet.plan.pd.Worker``s
    """
    workers = [one if not isinstance(one, str) else Worker(one) for one in workers]
    if not any(one.role for one in workers):
        return ["--worker-urls", *(one.url for one in workers)]
    args = ["--pd-disaggregation"]
    for one in workers:
        args += ["--prefill", one.url, str(one.bootstrap_port)] if one.role == PREFILL else ["--decode", one.url]
    return args


def gateway_args(config, workers: Iterable, tls: Iterable[str] = ()) -> list[str]:
    """
    The ``smg launch`` arguments of one gateway host (no secrets: the key travels in its env file).

    + config: the gateway host's ``HostConfig``
    + workers: every worker's URL (or ``Worker``, with its role), in inventory order
    + tls: its TLS flags (``sglfleet.plan.tls.gateway_tls_args``): paths, never key material

    Each flag as smg 1.13.0's ``smg/router_args.py`` declares it: ``--host``/``--port``
    (:507-521), ``--worker-urls`` (:523), ``--policy`` (:570), ``--prometheus-host``/
    ``--prometheus-port`` (:1532-1545), the health checks (:1840-1878), ``--log-level`` (:1383).

    **Example:**

    .. code:: python

        gateway_args(config, ["http://node1:30000"])[:4]   # ["--host", "0.0.0.0", "--port", "30080"]
    """
    return [
        "--host", "0.0.0.0", "--port", str(config.gateway_port),
        "--policy", config.gateway_policy,
        "--prometheus-host", "0.0.0.0", "--prometheus-port", str(config.gateway_metrics_port),
        "--health-check-interval-secs", str(config.gateway_health_check_interval_s),
        "--health-check-timeout-secs", str(config.gateway_health_check_timeout_s),
        "--health-failure-threshold", str(config.gateway_health_failure_threshold),
        "--health-success-threshold", str(config.gateway_health_success_threshold),
        "--health-check-endpoint", config.gateway_health_check_endpoint,
        "--log-level", "warn",
        *tls,
        *worker_args(workers),
    ]


def _listeners(config) -> list[tuple[int, str, str]]:
    """``(port, listen_host, the port's name, the address's name)`` of each sglang service of a serving host."""
    if not config.services:
        return [(config.launch.listen_port, config.launch.listen_host, "listen_port", "listen_host")]
    return [(one.port, one.launch.listen_host, f"service {one.name}'s port", f"service {one.name}'s listen_host")
            for one in config.services]


def gateway_problems(hosts_with_groups: Mapping[str, Iterable[str]], data: Mapping[str, Mapping],
                     configs: Mapping, wave_names: Iterable[str]) -> list[str]:
    """
    What is wrong with the inventory's gateways, one line each (empty: nothing, or no gateway).

    + hosts_with_groups: every inventory host -> its group names
    + data: every host's data (``ssh_hostname`` gives its address)
    + configs: every host's validated ``HostConfig``
    + wave_names: the waves the rollout orders (``rollout_waves``, or the default ones)

    **Example:**

    .. code:: python

        gateway_problems({"node1": ["canary"], "node2": ["gateways", "wave1"]}, data, configs, ["canary", "wave1"])
        # ["node2: in group gateways and in wave wave1; a gateway serves no release: take it out of wave1"]
    """
    gateways = [host for host, groups in hosts_with_groups.items() if is_gateway(groups)]
    if not gateways:
        return []
    waves = list(wave_names)
    problems = []
    if GATEWAYS in waves:
        problems.append(f"rollout_waves: {GATEWAYS!r} is the gateways' group, not a wave; take it out of rollout_waves")
    for host in gateways:
        for wave in (name for name in waves if name != GATEWAYS and name in set(hosts_with_groups[host])):
            problems.append(f"{host}: in group {GATEWAYS} and in wave {wave}; a gateway serves no release: "
                            f"take it out of {wave}")
    workers = [host for host in hosts_with_groups if host not in gateways]
    if not workers:
        problems.append(f"{', '.join(gateways)}: gateways without workers: every host is in group {GATEWAYS}; "
                        f"add serving hosts to the inventory")
    for host in gateways:
        # smg 1.13.0's Router.start() refuses it at start-up ("Configuration error: Incompatible
        # configuration: Power-of-two policy requires at least 2 workers"), seen on the local fleet.
        if configs[host].gateway_policy == "power_of_two" and len(workers) < 2:
            problems.append(f"{host}: gateway_policy = 'power_of_two' needs two workers or more, and the inventory "
                            f"has {len(workers)}; choose another policy (round_robin, cache_aware, ...)")
    # Who listens where: (address, port) -> what. A gateway host also serves its wheels to peers during a run.
    wanted: dict[tuple[str, int], list[str]] = {}
    for host in gateways:
        config, where = configs[host], address(host, data[host])
        for port, what in ((config.gateway_port, "gateway_port"), (config.gateway_metrics_port, "gateway_metrics_port"),
                           (config.share_port, "share_port")):
            wanted.setdefault((where, port), []).append(f"{host}'s {what}")
    for host in workers:
        config = configs[host]
        # Each of a host's services is its own worker, on its own port.
        for port, listen_host, port_key, host_key in _listeners(config):
            wanted.setdefault((address(host, data[host]), port), []).append(f"{host}'s {port_key}")
            if listen_host in LOOPBACK:
                problems.append(f"{host}: {host_key} = {listen_host!r}: the gateways "
                                f"({', '.join(gateways)}) cannot reach it; leave listen_host unset (None: the "
                                f"host's fleet address) or set the address they reach")
    for (where, port), users in wanted.items():
        if len(users) > 1 and any("gateway" in user for user in users):
            problems.append(f"{where}:{port}: port collision between {' and '.join(users)}; give each its own port")
    return problems
