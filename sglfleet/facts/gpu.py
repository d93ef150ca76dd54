"""GPU facts from ``nvidia-smi``: name, driver, compute capability, memory.

**Example:**

.. code:: python

    gpus = host.get_fact(NvidiaGpus)   # [] on a host without nvidia-smi
    gpus[0].compute_cap                # "12.0"
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

QUERY = "nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader"


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi reports it."""

    name: str
    driver: str  # "580.95.05"
    compute_cap: str  # "12.0"
    memory_mib: int

    @property
    def driver_major(self) -> int:
        return int(self.driver.split(".")[0])


def parse(lines: list[str]) -> list[Gpu]:
    """
    Parse ``nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader``.

    + lines: its output, one GPU a line: ``NVIDIA H200, 570.124.06, 9.0, 143771 MiB``
    """
    gpus = []
    for line in lines:
        fields = line.rsplit(",", 3)  # the name may hold commas; the last three fields never do
        if len(fields) != 4 or not fields[3].strip()[:1].isdigit():
            continue  # not a GPU line: "NVIDIA-SMI has failed ..." when the driver is not loaded
        name, driver, cap, memory = fields
        gpus.append(Gpu(name.strip(), driver.strip(), cap.strip(), int(memory.strip().split()[0])))
    return gpus


class NvidiaGpus(FactBase[list[Gpu]]):
    """
    The host's NVIDIA GPUs, one ``Gpu`` each; an empty list where nvidia-smi is missing.
    """

    def requires_command(self) -> str:
        return "nvidia-smi"

    @staticmethod
    def default() -> list:
        return []

    def command(self) -> str:
        return f"{QUERY} 2>&1 || true"  # a failing nvidia-smi means no usable GPU, not a broken fact

    def process(self, output: list[str]) -> list[Gpu]:
        return parse(output)
