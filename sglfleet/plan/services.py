"""
Several sglang services on one host: their inventory, checked, and each one's own view of the host. Pure.

A host's ``services`` is a list of ``{"name", "gpus", "port", <launch keys>}``:
each service takes the host's launch keys and its own on top, owns the GPUs it
names (``CUDA_VISIBLE_DEVICES``) and listens on its port, under its own unit
``sglang-<name>.service`` and releases (``Layout.for_service``). A host without
``services`` is one service, ``sglang``, at the paths it always had. Stacks and
the model store stay the host's: one copy whatever the number of services.

**Example:**

.. code:: python

    problems, typed = parse_services("node1", [{"name": "big", "gpus": [0, 1], "port": 30000, "tp_size": 2},
                                               {"name": "small", "gpus": [2], "port": 30001}], launch, 4)
    [service.unit for service in host_services(config)]  # ["sglang-big.service", "sglang-small.service"]
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from sglfleet.host.layout import GATEWAY, LAYOUT, Layout
from sglfleet.plan.settings import LaunchSettings, ServiceSettings, pydantic_problems

# A unit's name part: lower case, digits and inner dashes; short enough for a user name (32 chars with "sglang-").
NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,22}[a-z0-9])?$")
OWN_KEYS = ("name", "gpus", "port")
# A service that loads another model than the host's pins it itself.
REVISION_KEYS = {"model_revision": "model_path", "speculative_draft_model_revision": "speculative_draft_model_path"}
# Keys a service does not set: its port is ``port``, and the host's models and rollout are the host's.
NOT_PER_SERVICE = {"listen_port": "port"}
# sglang 0.5.9 server_args.py:3705-3706 (--data-parallel-size, alias --dp-size; argparse's abbreviation
# --dp too), 3323-3324 (--pipeline-parallel-size, --pp-size), 4570 (--enable-dp-attention).
DP_FLAGS = ("--data-parallel-size", "--dp-size", "--dp")
PP_FLAGS = ("--pipeline-parallel-size", "--pp-size")
DP_ATTENTION = "--enable-dp-attention"


def flag_size(extra_flags: list[str], flags: tuple[str, ...] = DP_FLAGS) -> int:
    """
    The size one of ``flags`` sets in ``extra_flags``, else 1.

    + extra_flags: a launch's ``extra_flags``, e.g. ``["--dp-size", "2"]``
    + flags: the flag's spellings (``DP_FLAGS``, ``PP_FLAGS``)
    """
    for i, flag in enumerate(extra_flags):
        key, sep, value = flag.partition("=")
        if key in flags:
            value = value if sep else (extra_flags[i + 1] if i + 1 < len(extra_flags) else "")
            return int(value) if value.isdigit() and int(value) > 0 else 1
    return 1


def gpus_needed(launch: LaunchSettings) -> tuple[int, str]:
    """
    How many GPUs a launch places its schedulers on, and how that count is made.

    As 0.5.9 places them (``srt/managers/data_parallel_controller.py``): each dp rank
    takes ``tp_size * pp_size`` GPUs after the one before (246-247), but with dp
    attention the dp ranks share one tensor-parallel group (164, 384-386).

    + launch: a service's launch settings
    """
    dp, pp = flag_size(launch.extra_flags, DP_FLAGS), flag_size(launch.extra_flags, PP_FLAGS)
    shared = DP_ATTENTION in launch.extra_flags
    needed = launch.tp_size * pp * (1 if shared else dp)
    how = f"tp_size {launch.tp_size}" + (f" times pp_size {pp}" if pp > 1 else "") \
        + (f" times dp_size {dp}" if dp > 1 and not shared else "")
    return needed, how


def _gpus_problems(where: str, gpus: Any, gpu_count: int | None) -> list[str]:
    if not isinstance(gpus, list) or not gpus or not all(isinstance(g, int) and not isinstance(g, bool)
                                                          and g >= 0 for g in gpus):
        return [f"{where}: gpus = {gpus!r}: must be a non-empty list of GPU indices; set it to e.g. [0, 1, 2, 3]"]
    if len(set(gpus)) != len(gpus):
        return [f"{where}: gpus = {gpus!r} names a GPU twice; list each GPU once"]
    if gpu_count is not None and max(gpus) >= gpu_count:
        return [f"{where}: gpus = {gpus!r}: GPU {max(gpus)} does not exist on a host of gpu_count {gpu_count} "
                f"(indices 0 to {gpu_count - 1}); fix gpus or gpu_count"]
    return []


def _one(host: str, index: int, raw: Any, launch: dict, gpu_count: int | None):
    """One service's problems and its typed settings (None when it has problems)."""
    label = raw.get("name") if isinstance(raw, dict) and isinstance(raw.get("name"), str) else None
    where = f"{host}: services[{index}]" + (f" ({label})" if label else "")
    if not isinstance(raw, dict):
        return [f"{where} = {raw!r}: must be a mapping; set it to e.g. "
                '{"name": "big", "gpus": [0, 1], "port": 30000}'], None
    problems = [f"{where}: {key}: missing; set it to e.g. "
                + {"name": '"big"', "gpus": "[0, 1]", "port": "30001"}[key]
                for key in OWN_KEYS if key not in raw]
    for key in raw:
        if key in OWN_KEYS:
            continue
        if key in REVISION_KEYS:
            if not (raw[key] is None or isinstance(raw[key], str) and re.fullmatch(r"[0-9a-f]{40}", raw[key])):
                problems.append(f"{where}: {key} = {raw[key]!r}: must be a 40-hex commit; set it to the commit "
                                f"of the service's {REVISION_KEYS[key]}")
            continue
        if key in NOT_PER_SERVICE:
            problems.append(f"{where}: {key}: a service's port is its {NOT_PER_SERVICE[key]!r}; use that")
        elif key not in LaunchSettings.model_fields:
            close = difflib.get_close_matches(key, [*OWN_KEYS, *LaunchSettings.model_fields], n=1, cutoff=0.6)
            problems.append(f"{where}: {key}: not a service key; "
                            + (f"did you mean {close[0]!r}?" if close else
                               "a service takes name, gpus, port and sglang's launch keys (e.g. tp_size)"))
    if "name" in raw and (not isinstance(raw["name"], str) or not NAME.match(raw["name"])
                          or f"{LAYOUT.service}-{raw['name']}" == GATEWAY.service):
        problems.append(f"{where}: name = {raw['name']!r}: must be lower case letters, digits and inner dashes "
                        f"(at most 24), and not \"gateway\"; set it to e.g. \"big\"")
    if "gpus" in raw:
        problems += _gpus_problems(where, raw["gpus"], gpu_count)
    port = raw.get("port")
    if "port" in raw and (not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535):
        problems.append(f"{where}: port = {port!r}: must be a TCP port between 1 and 65535; set it to e.g. 30001")
    if problems:
        return problems, None
    own = {key: value for key, value in raw.items() if key not in OWN_KEYS and key not in REVISION_KEYS}
    try:
        typed = LaunchSettings.model_validate({**launch, **own, "listen_port": port})
    except ValidationError as error:
        # A key the service takes from the host is the host's problem, said once, for the host.
        own_errors = [item for item in error.errors() if item["loc"] and item["loc"][0] in own]
        if not own_errors:
            return [], None
        return pydantic_problems(where, ValidationError.from_exception_data(error.title, own_errors)), None
    needed, how = gpus_needed(typed)
    if needed != len(raw["gpus"]):
        problems.append(f"{where}: {how} needs {needed} GPUs, but gpus "
                        f"{raw['gpus']!r} holds {len(raw['gpus'])}: give it {needed} GPUs or set tp_size to fit")
        return problems, None
    return [], ServiceSettings(name=raw["name"], gpus=list(raw["gpus"]), port=port, launch=typed,
                               **{key: raw[key] for key in REVISION_KEYS if key in raw})


def parse_services(host: str, raw: Any, launch: dict, gpu_count: int | None = None):
    """
    Check a host's ``services`` and type them: ``(problems, typed)``, one line per problem.

    + host: the host's name, first word of each message
    + raw: the inventory's ``services``
    + launch: the host's launch keys (the services' defaults)
    + gpu_count: the inventory's ``gpu_count``; the GPUs a service names must be below it

    **Example:**

    .. code:: python

        parse_services("node1", [{"name": "a", "gpus": [0], "port": 30000},
                                 {"name": "b", "gpus": [0], "port": 30001}], launch)
        # (["node1: services[1] (b): GPU 0 is already services[0] (a)'s; give each service its own GPUs"], ...)
    """
    if not isinstance(raw, list) or not raw:
        return [f"{host}: services = {raw!r}: must be a non-empty list of services; set it to e.g. "
                '[{"name": "big", "gpus": [0, 1, 2, 3], "port": 30000, "tp_size": 4}], or None for one'], raw
    problems, typed = [], []
    names, gpus, ports = {}, {}, {}
    for index, one in enumerate(raw):
        found, service = _one(host, index, one, launch, gpu_count)
        problems += found
        if service is None:
            continue
        where = f"services[{index}] ({service.name})"
        if service.name in names:
            problems.append(f"{host}: {where}: the name {service.name!r} is already {names[service.name]}'s; "
                            "give each service its own name")
        for gpu in service.gpus:
            if gpu in gpus:
                problems.append(f"{host}: {where}: GPU {gpu} is already {gpus[gpu]}'s; "
                                "give each service its own GPUs")
        if service.port in ports:
            problems.append(f"{host}: {where}: port {service.port} is already {ports[service.port]}'s; "
                            "give each service its own port")
        names.setdefault(service.name, where)
        gpus.update({gpu: gpus.get(gpu, where) for gpu in service.gpus})
        ports.setdefault(service.port, where)
        typed.append(service)
    return problems, typed if not problems else raw


@dataclass(frozen=True)
class Service:
    """
    One sglang service of a host, as the controller plans it.

    + name: its name (``sglang`` for a host without ``services``)
    + layout: its paths, unit and user (``Layout.for_service``)
    + config: the host's ``HostConfig`` with this service's launch
    + gpus: the GPU indices it owns, or None where the host has one service and all its GPUs
    """

    name: str
    layout: Layout
    config: Any
    gpus: tuple[int, ...] | None = None

    @property
    def unit(self) -> str:
        return self.layout.unit

    @property
    def port(self) -> int:
        return self.config.launch.listen_port


def host_services(config, layout: Layout = LAYOUT) -> list[Service]:
    """
    A host's services in inventory order: its ``services``, else the one ``sglang`` service.

    + config: the host's ``HostConfig``
    + layout: the host's layout
    """
    if not config.services:
        return [Service(name=layout.service_name, layout=layout, config=config)]
    return [Service(name=one.name, layout=layout.for_service(one.name), config=_config_of(config, one),
                    gpus=tuple(one.gpus))
            for one in config.services]


def _config_of(config, one):
    """The host's config as one service sees it: its launch, and the pins of the models it loads."""
    update = {"launch": one.launch, "services": None}
    for key, path in REVISION_KEYS.items():
        own = getattr(one, key)
        # The host's pin holds for the host's model only: another model is pinned by the service, or not at all.
        update[key] = own if own or getattr(one.launch, path) != getattr(config.launch, path) else getattr(config, key)
    return config.model_copy(update=update)


def gpu_problems(host: str, services: list[Service], found: int) -> list[str]:
    """
    The GPUs each service names against the ones the host has (``NvidiaGpus``); one line each.

    + host: the host's name
    + services: ``host_services``
    + found: how many GPUs nvidia-smi reports
    """
    problems = []
    for service in services:
        missing = [gpu for gpu in service.gpus or () if gpu >= found]
        if missing:
            problems.append(f"{host}: service {service.name}: GPU {', '.join(map(str, missing))} does not exist "
                            f"(nvidia-smi reports {found} GPUs, indices 0 to {found - 1}): fix its gpus")
    return problems
