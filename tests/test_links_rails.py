"""NCCL's rail rule: a collective across nodes moves at k NICs' bus bandwidth for k GPUs of its group per node.

The rule and its sources are in pipeplan/planner/cluster.py's module doc (NVIDIA/nccl #412,
nccl-tests #119): up to the intra-node link's bus bandwidth; pipeline messages stay on one NIC.
"""

from __future__ import annotations

import pytest

from pipeplan import hardware
from pipeplan.errors import InvalidInputError
from pipeplan.planner import Cluster
from pipeplan.planner.cluster import rail_bus_bandwidth, ring_pass_ms
from pipeplan.planner.evaluate import Evaluator
from pipeplan.planner.space import Config
from pipeplan.planner.workload import Workload
from pipeplan.layers import LayerProfile

NVLINK_A100 = hardware.link("nvlink-a100")
HDR = hardware.link("ib-hdr")


def _a100(gpus: int) -> Cluster:
    return Cluster(gpus, hardware.device("a100-80g"), NVLINK_A100, HDR, 8)


@pytest.mark.parametrize("k, expected", [(1, 24e9), (2, 48e9), (4, 96e9), (8, 192e9)])
def test_k_gpus_per_node_drive_k_nics(k: int, expected: float) -> None:
    """FSDP over 8 nodes of 8 A100s (stride 1) has 8 GPUs a node; dp at tp·pp = 2 has 4; at 8 has 1."""
    stride = 8 // k
    link = _a100(64).collective_link(64 // stride, stride)
    assert link.bus_bandwidth == pytest.approx(expected)
    assert link.latency_ms == HDR.latency_ms and link.bandwidth == HDR.bandwidth  # p2p and latency: one NIC's


def test_bounded_by_the_intra_node_link() -> None:
    """16 GPUs a node on HDR would be 384 GB/s: the ring's NVLink hops (230 GB/s busbw) bound it."""
    cluster = Cluster(64, hardware.device("a100-80g"), NVLINK_A100, HDR, 16)
    assert cluster.collective_link(64, 1).bus_bandwidth == NVLINK_A100.bus_bandwidth
    assert rail_bus_bandwidth(HDR, NVLINK_A100, 16) == NVLINK_A100.bus_bandwidth < 16 * HDR.bus_bandwidth


def test_monotone_in_k() -> None:
    for gpu, intra, inter in (("a100-80g", "nvlink-a100", "ib-hdr"), ("h100-80g", "nvlink-h100", "ib-ndr")):
        cluster = Cluster(128, hardware.device(gpu), hardware.link(intra), hardware.link(inter), 8)
        rates = [cluster.collective_link(128 // stride, stride).bus_bandwidth for stride in (8, 4, 2, 1)]
        assert rates == sorted(rates) and rates[0] < rates[-1]
        assert rates[0] == hardware.link(inter).bus_bandwidth


def test_a_group_inside_one_node_is_unchanged() -> None:
    cluster = _a100(64)
    assert cluster.collective_link(8, 1) is NVLINK_A100
    assert cluster.collective_link(4, 2) is NVLINK_A100
    assert cluster.data_parallel_link(pp=2, dp=4) is NVLINK_A100


def test_one_gpu_per_node_is_unchanged() -> None:
    """tp = 8 fills a node: its data-parallel groups hold one GPU of each node and ride one NIC, as before."""
    cluster = _a100(64).for_tensor_parallel(8)
    assert cluster.data_parallel_link(pp=1, dp=8) is HDR
    assert _a100(64).collective_link(8, 8) is HDR
    assert _a100(64).collective_link(4, 16) is HDR


def test_tensor_parallel_groups_share_the_nics() -> None:
    """At tp 2 the tp-reduced cluster's node holds 4 devices: a dp group over them has 4 GPUs a node."""
    cluster = _a100(64).for_tensor_parallel(2)
    assert cluster.data_parallel_link(pp=1, dp=32).bus_bandwidth == pytest.approx(4 * HDR.bus_bandwidth)
    assert cluster.data_parallel_link(pp=2, dp=16).bus_bandwidth == pytest.approx(2 * HDR.bus_bandwidth)


def test_ring_time_scales_with_the_rails() -> None:
    """Bandwidth term of a reduce-scatter over 64 GPUs: 8 rails take 1/8 of one NIC's time, latency unchanged."""
    cluster = _a100(64)
    fast, slow = cluster.collective_link(64, 1), cluster.collective_link(8, 8)
    size = 1e9
    fast_bw = ring_pass_ms(fast, size, 64) - ring_pass_ms(fast, 0.0, 64)
    slow_bw = ring_pass_ms(slow, size, 64) - ring_pass_ms(slow, 0.0, 64)
    assert fast_bw == pytest.approx(slow_bw / 8)
    assert ring_pass_ms(fast, 0.0, 64) == ring_pass_ms(slow, 0.0, 64)


def test_pipeline_messages_stay_on_one_nic() -> None:
    cluster = _a100(64)
    assert cluster.pipeline_link(pp=16, dp=4, rank_a=7, rank_b=8) is HDR
    assert cluster.pipeline_link(pp=16, dp=4, rank_a=0, rank_b=1) is NVLINK_A100


def test_a_pcie_node_is_bound_by_its_own_ring_hops() -> None:
    """Where the intra-node link is slower than one NIC, k >= 2 rides the intra-node rate (the ring passes it)."""
    pcie, ndr = hardware.link("pcie-gen4"), hardware.link("ib-ndr")
    assert rail_bus_bandwidth(ndr, pcie, 1) == ndr.bus_bandwidth
    assert rail_bus_bandwidth(ndr, pcie, 8) == pcie.bus_bandwidth


def test_bad_counts_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        _a100(64).collective_link(0, 1)
    with pytest.raises(InvalidInputError):
        rail_bus_bandwidth(HDR, NVLINK_A100, 0)


def test_the_evaluator_prices_data_parallel_on_the_rails() -> None:
    """A DDP all-reduce over 64 A100s (8 nodes, pp 1): the same bytes take 1/8 of the one-NIC time, less latency."""
    profile = LayerProfile.uniform(4, forward=1.0, params=1e8, activation_bytes=1e6)
    work = Workload.from_profile(profile)
    config = Config(1, 64, 1, 1, "1f1b", 1, "none", 1, "ddp")
    fast = Evaluator(work, _a100(64)).links.allreduce(config, 1e9)
    one_nic = Cluster(64, hardware.device("a100-80g"), NVLINK_A100, HDR, 1)  # one GPU a node: one NIC
    slow = Evaluator(work, one_nic).links.allreduce(config, 1e9)
    latency = 2 * 63 * HDR.latency_ms
    assert fast - latency == pytest.approx((slow - latency) / 8)
