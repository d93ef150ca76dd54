"""Preflight rules: does a host fit its stack? Pure functions of facts and the stack.

Each problem is one line naming the host, the thing and the fix, e.g.
``node2: driver 550.54 is too old for stack cu130-sglang-0.5.9 (needs 580 or newer)``.

**Example:**

.. code:: python

    problems = check("node2", stack, gpus, disk_free=50 << 30, gpu_less=False,
                     os=OsInfo(id="debian", version_id="13", glibc="2.41", python="3.13.5"))
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import NamedTuple

from sglfleet.artifacts.stacks import Stack
from sglfleet.facts.gpu import Gpu
from sglfleet.facts.os import OsInfo
from sglfleet.host.layout import LAYOUT

GIB = 1 << 30


class Declared(NamedTuple):
    """What the inventory says of a host's GPUs: checked against what nvidia-smi reports."""

    compute_cap: str | None = None
    count: int | None = None
    tp_size: int = 1


def gib(size: int) -> str:
    return f"{size / GIB:.1f} GiB"


def disk_needed(stack: Stack, unpacked: int) -> int:
    """
    Bytes a build of ``stack`` takes at its peak: the wheels in the host's wheelhouse,
    and the venv unpacked from them, with a fifth more for its bytecode and the file
    system's blocks (measured: cu130-sglang-0.5.23's 4.3 GB of wheels unpack to 9.7 GB
    and make a 10.5 GB venv; df saw 15.4 GB go for both).

    + stack: the stack to build
    + unpacked: bytes its venv's wheels hold unpacked (``wheelhouse.unpacked_size``)
    """
    return stack.size + unpacked + unpacked // 5


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def serves(stack: Stack, os: OsInfo) -> bool:
    """Whether ``stack``'s lock has wheels for the host's ``python3`` that its glibc can load."""
    if not stack.serves(os.python):
        return False
    needed = stack.for_python(os.python_minor).glibc
    return not (needed and os.glibc and _version(os.glibc) < _version(needed))


def fitting(stacks: list[Stack], os: OsInfo, gpu_less: bool) -> list[str]:
    """
    The names of the stacks that would serve a host of ``os``: its Python and glibc,
    GPU-less stacks for a GPU-less host and CUDA stacks for a GPU host.

    + stacks: every stack defined (``sglfleet.artifacts.stacks.available``), loaded
    + os: ``HostOs``'s answer
    + gpu_less: the inventory says the host has no GPU
    """
    return [stack.name for stack in stacks if serves(stack, os) and bool(stack.cuda) != gpu_less]


def fitting_instead(stack: Stack, os: OsInfo, gpu_less: bool, candidates: Callable[[], Iterable[Stack]]) -> list[str]:
    """
    The other stacks that would serve a host ``stack`` does not serve (``fitting``), for the fix;
    [] where it serves it, without calling ``candidates`` (every lock parsed: about 0.1 s).

    + candidates: returns every stack defined here whose lock loads

    **Example:**

    .. code:: python

        fitting_instead(stack, found.os, False, loadable)  # [] on a host whose python3 the stack serves
    """
    if not interpreter_problems("", stack, os, []):
        return []
    return [name for name in fitting(list(candidates()), os, gpu_less) if name != stack.name]


def interpreter_problems(host: str, stack: Stack, os: OsInfo, others: list[str]) -> list[str]:
    """
    The host's ``python3`` and glibc against the Pythons and wheels ``stack``'s lock holds.

    + os: ``HostOs``'s answer
    + others: the stacks that would fit the host (``fitting``), named in the fix
    """
    fix = (f"give the host a stack that serves it ({', '.join(others)})" if others
           else "no stack defined here serves it: add its Python to a stack's pythons and re-lock")
    if os.python is None:
        return [f"{host}: no python3 found ({os.pretty or 'unknown OS'}), stack {stack.name} needs python3 "
                f"{' or '.join(stack.pythons)}: install python3 (Debian, Ubuntu: apt install python3 python3-venv)"]
    if not stack.serves(os.python):
        return [f"{host}: python3 is {os.python} ({os.pretty or 'unknown OS'}, glibc {os.glibc or '?'}), which "
                f"stack {stack.name} does not serve (its lock holds {', '.join(stack.pythons)}): {fix}"]
    needed = stack.for_python(os.python_minor).glibc
    if needed and os.glibc and _version(os.glibc) < _version(needed):
        return [f"{host}: glibc {os.glibc} ({os.pretty or 'unknown OS'}) is older than stack {stack.name}'s "
                f"wheels for python {os.python_minor} need ({needed}): {fix}"]
    return []


def check(host: str, stack: Stack, gpus: list[Gpu], disk_free: int, gpu_less: bool,
          os: OsInfo, built: bool = False, declared: Declared = Declared(),
          unpacked: int = 0, others: list[str] = ()) -> list[str]:
    """
    Every reason ``host`` cannot take ``stack``; empty when it fits.

    + host: the host's name, first word of each message
    + stack: the stack the inventory gives it
    + gpus: the NvidiaGpus fact ([] without nvidia-smi)
    + disk_free: bytes free where stacks live
    + gpu_less: the inventory says the host has no GPU (local fleet, CI)
    + os: ``HostOs``'s answer: the host's ``python3`` and glibc, against the Pythons the stack serves
    + built: the stack is already built and verified there (no disk needed)
    + declared: the inventory's ``gpu_compute_cap``, ``gpu_count`` and ``tp_size``
    + unpacked: bytes the stack's wheels hold unpacked (see ``disk_needed``)
    + others: the stacks that would fit the host (``fitting``), named when this one does not
    """
    problems = _declared_problems(host, gpus, declared) if gpus else []
    problems += interpreter_problems(host, stack, os, [name for name in others if name != stack.name])
    if not gpus:
        if not gpu_less:
            problems.append(f"{host}: no NVIDIA GPU found (nvidia-smi missing or lists none): install or load "
                            f"the NVIDIA driver, or set gpu_less=True if this host has no GPU")
        elif stack.cuda:
            problems.append(f"{host}: stack {stack.name} needs a GPU (CUDA {stack.cuda}) but the host has "
                            f"none: give it a GPU-less stack such as dev")
    if stack.min_driver:
        for driver in sorted({gpu.driver for gpu in gpus if gpu.driver_major < stack.min_driver}):
            problems.append(f"{host}: driver {driver} is too old for stack {stack.name} "
                            f"(needs {stack.min_driver} or newer)")
    if stack.cuda:
        for gpu in sorted({gpu for gpu in gpus if gpu.compute_cap not in stack.compute_caps},
                          key=lambda g: g.compute_cap):
            problems.append(
                f"{host}: {gpu.name} has compute capability {gpu.compute_cap}, which stack {stack.name} "
                f"was not built for (supports {', '.join(stack.compute_caps)}): give the host a stack built for "
                f"{gpu.compute_cap}"
            )
    needed = disk_needed(stack, unpacked)
    if not built and disk_free < needed:
        problems.append(
            f"{host}: {gib(disk_free)} free under {LAYOUT.stacks} is too little for stack {stack.name} "
            f"(needs {gib(needed)}: its wheels, {gib(stack.size)}, and the venv built from them, "
            f"{gib(needed - stack.size)}): free space or grow the filesystem"
        )
    return problems


def _declared_problems(host: str, gpus: list[Gpu], declared: Declared) -> list[str]:
    """The inventory's word on the GPUs against nvidia-smi's: the lint judged flags by the former."""
    problems = []
    measured = sorted({gpu.compute_cap for gpu in gpus})
    names = ", ".join(sorted({gpu.name for gpu in gpus}))
    if declared.compute_cap and measured != [declared.compute_cap]:
        problems.append(f"{host}: the inventory declares gpu_compute_cap {declared.compute_cap}, but nvidia-smi "
                        f"reports {', '.join(measured)} ({len(gpus)} x {names}): put the host in the group of "
                        f"its GPUs, or fix gpu_compute_cap")
    if declared.count and len(gpus) != declared.count:
        problems.append(f"{host}: the inventory declares gpu_count {declared.count}, but nvidia-smi reports "
                        f"{len(gpus)} GPUs ({names}): fix gpu_count, or find the missing GPUs "
                        f"(nvidia-smi -L; a GPU lost to an Xid error needs a reset or a reboot)")
    if declared.tp_size > len(gpus):
        problems.append(f"{host}: tp_size {declared.tp_size} needs {declared.tp_size} GPUs, but nvidia-smi "
                        f"reports {len(gpus)}: set tp_size <= {len(gpus)} for this host")
    return problems


# The backends that move the KV cache over RDMA: mooncake's TransferEngine (protocol "rdma", sglang
# 0.5.23 srt/distributed/device_communicators/mooncake_transfer_engine.py:205-215) and nixl's UCX
# (srt/disaggregation/nixl/conn.py:564). Without an RDMA device, each falls back to TCP, or fails.
RDMA_BACKENDS = ("mooncake", "nixl")
# A plain list of HCA names ("mlx5_0,mlx5_1"); sglang also takes a JSON mapping of GPU to devices, or a
# file of one, which this check does not read.
_DEVICE_LIST = re.compile(r"^[\w.-]+(,[\w.-]+)*$")


class PdService(NamedTuple):
    """One PD service of a host, as preflight sees it: its name, role, backend and IB devices."""

    name: str
    role: str
    backend: str
    ib_device: str | None = None


def rdma_problems(host: str, services: list[PdService], devices: list[str], allow_tcp: bool) -> list[str]:
    """
    The host's RDMA devices against what its PD services' transfer backends need.

    + services: its PD services (none for a whole server's host)
    + devices: ``RdmaDevices``'s answer (``/sys/class/infiniband``)
    + allow_tcp: the inventory's ``disaggregation_allow_tcp``: the TCP fallback is intended
    """
    problems = []
    for service in services:
        if service.backend not in RDMA_BACKENDS:
            continue
        if not devices and not allow_tcp:
            problems.append(
                f"{host}: {service.role} service {service.name} moves its KV cache with {service.backend} over "
                f"RDMA, but the host has no RDMA device (/sys/class/infiniband is empty): load the NIC's driver "
                f"(mlx5_ib, rdma-core), or set disaggregation_allow_tcp = True if the TCP fallback is intended")
        wanted = service.ib_device.strip() if service.ib_device else ""
        missing = [name for name in wanted.split(",") if name not in devices] if _DEVICE_LIST.match(wanted) else []
        if missing:
            problems.append(
                f"{host}: disaggregation_ib_device of service {service.name} names {', '.join(missing)}, which the "
                f"host lacks (it has {', '.join(devices) or 'no RDMA device'}): name the host's devices, or None "
                f"to let {service.backend} detect them")
    return problems
