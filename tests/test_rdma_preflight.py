"""Preflight of a PD host's RDMA devices: the RdmaDevices fact on its reads, and the rule as a table."""

from pathlib import Path

import pytest

from paths import GATEWAY
from sglfleet.facts.host import MARK, HostRead
from sglfleet.facts.rdma import RdmaDevices
from sglfleet.plan.preflight import PdService, rdma_problems

DATA = Path(__file__).parent / "data" / "rdma"
DGX = [f"mlx5_{i}" for i in range(12)]


def devices(name):
    return RdmaDevices().process((DATA / name).read_text().splitlines())


def test_the_fact_reads_the_kernels_device_names_sorted():
    assert sorted(devices("dgx-h200.txt")) == sorted(DGX) and len(devices("dgx-h200.txt")) == 12
    assert devices("roce-bond.txt") == ["mlx5_bond_0"]
    assert devices("none.txt") == [] == RdmaDevices.default()
    assert "/sys/class/infiniband" in RdmaDevices().command()


def test_the_devices_ride_in_the_one_host_read():
    command = HostRead().command(stack_id="dev-0123456789ab", python="3.11", uv_version="0.9.2", user="nobody",
                                 paths=[], patch_path=None, patch_known=[], release_id=None)
    assert f"{MARK}rdma" in command and RdmaDevices().command() in command
    # A gateway host reads no GPU and no RDMA device.
    gateway = HostRead().command(stack_id="gw-0123456789ab", python="3.11", uv_version="0.9.2", user="nobody",
                                 paths=[], patch_path=None, patch_known=[], release_id=None,
                                 gateway_unit=GATEWAY.unit_file,
                                 gateway_runtime_dir=GATEWAY.runtime_dir)
    assert f"{MARK}rdma" not in gateway


PREFILL = PdService("sglang", "prefill", "mooncake")
DECODE_NIXL = PdService("sglang", "decode", "nixl")

# (services, devices read, disaggregation_allow_tcp, fragments of each problem line)
CASES = {
    "mooncake with the DGX's devices": ([PREFILL], "dgx-h200.txt", False, []),
    "nixl on a bonded RoCE NIC": ([DECODE_NIXL], "roce-bond.txt", False, []),
    "mooncake without a device": ([PREFILL], "none.txt", False,
                                  [["node1: prefill service sglang", "mooncake over RDMA", "no RDMA device",
                                    "disaggregation_allow_tcp = True"]]),
    "nixl without a device": ([DECODE_NIXL], "none.txt", False, [["node1: decode service sglang", "nixl"]]),
    "TCP asked for": ([PREFILL, DECODE_NIXL], "none.txt", True, []),
    "named devices it has": ([PREFILL._replace(ib_device="mlx5_0,mlx5_1")], "dgx-h200.txt", False, []),
    "a named device it lacks": ([PREFILL._replace(ib_device="mlx5_0,mlx5_12")], "dgx-h200.txt", False,
                                [["disaggregation_ib_device of service sglang names mlx5_12", "host lacks",
                                  "it has mlx5_0, mlx5_1, mlx5_10"]]),
    "a named device, none there, TCP asked for": ([PREFILL._replace(ib_device="mlx5_0")], "none.txt", True,
                                                  [["names mlx5_0", "it has no RDMA device"]]),
    "a JSON mapping is sglang's to read": ([PREFILL._replace(ib_device='{"0": "mlx5_0"}')], "roce-bond.txt",
                                           False, []),
    "two services, one short": ([PREFILL._replace(name="p"), PdService("d", "decode", "mooncake", "mlx5_bond_1")],
                                "roce-bond.txt", False, [["service d names mlx5_bond_1"]]),
    "a whole server's host has no PD service": ([], "none.txt", False, []),
}


@pytest.mark.parametrize("case", CASES)
def test_rdma_rule(case):
    services, read, allow_tcp, expected = CASES[case]
    problems = rdma_problems("node1", services, devices(read), allow_tcp)
    assert len(problems) == len(expected), problems
    for line, fragments in zip(problems, expected):
        assert line.startswith("node1: ") and "\n" not in line
        for fragment in fragments:
            assert fragment in line, line
