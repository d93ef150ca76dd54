"""The host's RDMA devices, as the kernel lists them: what mooncake and nixl's UCX move the KV cache over.

Each RDMA device (an InfiniBand HCA, a RoCE NIC) the kernel's ib_core knows is a folder of
``/sys/class/infiniband`` (``mlx5_0``, ``mlx5_bond_0``, ``rocep1s0f0``...), named as
``--disaggregation-ib-device`` names it. A host without the NIC's driver (mlx5_ib) or without
such a NIC has none: the folder is empty or absent.

**Example:**

.. code:: python

    host.get_fact(RdmaDevices)   # ["mlx5_0", "mlx5_1"], or [] without any
"""

from __future__ import annotations

from pyinfra.api import FactBase

SYSFS = "/sys/class/infiniband"


class RdmaDevices(FactBase[list[str]]):
    """
    Returns the names of the host's RDMA devices, sorted; [] where there are none.
    """

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self) -> str:
        # Absent without ib_core loaded: not an error, no device.
        return f"ls -1 {SYSFS} 2>/dev/null || true"

    def process(self, output: list[str]) -> list[str]:
        return sorted(line.strip() for line in output if line.strip())
