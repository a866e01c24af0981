"""Device and link presets."""

from __future__ import annotations

import pytest

from pipeplan import hardware, simulate
from pipeplan.costs import StageCosts
from pipeplan.errors import InvalidInputError
from pipeplan.schedules import build_schedule


def test_devices_have_memory_and_dense_bf16_peaks():
    assert hardware.device_names() == ["a100-40g", "a100-80g", "h100-80g", "h100-96g", "h200-141g", "l40s", "cpu"]
    h100 = hardware.device("h100-80g")
    assert h100.peak_flops == 989.4e12 and h100.memory_bytes == 81_559 * 2**20
    assert h100.achievable_flops == pytest.approx(h100.gemm_efficiency * 989.4e12)  # no flat fraction set
    assert hardware.device("h100-80g", achievable_fraction=0.5).milliseconds(989.4e12) == pytest.approx(2000.0)
    assert hardware.device("a100-80g").memory_bytes > hardware.device("a100-40g").memory_bytes


@pytest.mark.parametrize("call, match", [
    (lambda: hardware.device("v100"), r"gpu must be one of a100-40g, .*got 'v100'"),
    (lambda: hardware.device("l40s", achievable_fraction=0), r"achievable_fraction must be a number > 0"),
    (lambda: hardware.device("l40s", achievable_fraction=1.2), r"achievable_fraction must be in \(0, 1\]"),
    (lambda: hardware.link("carrier-pigeon"), r"link must be one of nvlink-a100, .*got 'carrier-pigeon'"),
    (lambda: hardware.get("v100"), r"gpu must be one of a100-40g, .*got 'v100'"),
    (lambda: hardware.DeviceRecord(hardware.device("cpu"), intra_node="nvlink-5"),
     r"cpu.intra_node must be one of nvlink-a100, .*got 'nvlink-5'"),
    (lambda: hardware.DeviceRecord(hardware.device("cpu"), intra_node="pcie-gen4", torch_names=("H1(00",)),
     r"cpu.torch_names: 'H1\(00' is not a regular expression"),
])
def test_unknown_or_bad_hardware_is_one_line(call, match):
    with pytest.raises(InvalidInputError, match=match):
        call()


def test_a_record_holds_its_device_and_its_link_and_matches_torchs_names():
    record = hardware.get("a100-40g")
    assert record.name == "a100-40g" and record.device is hardware.device("a100-40g")
    assert record.intra_node_link is hardware.link("nvlink-a100")
    assert record.matches("NVIDIA A100-SXM4-40GB") and not record.matches("NVIDIA A100-SXM4-80GB")
    assert hardware.device("a100-40g", achievable_fraction=0.5).name == "a100-40g"
    assert hardware.get("a100-40g").device.achievable_fraction is None  # the record itself is unchanged


def test_links_give_the_simulators_comm_model_in_milliseconds():
    ib = hardware.link("ib-ndr")
    assert ib.milliseconds(46e6) == pytest.approx(0.020 + 1.0)  # 46 MB at NCCL's 46 GB/s on NDR = 1 ms, + 20 us
    comm = ib.comm_model([46e6, 0.0])
    assert comm.boundary_times(3) == pytest.approx((1.020, 0.020))
    costs = StageCosts([1.0, 1.0, 1.0])
    with_link = simulate(build_schedule("1f1b", num_stages=3, num_microbatches=4), costs, comm)
    without = simulate(build_schedule("1f1b", num_stages=3, num_microbatches=4), costs)
    assert with_link.makespan > without.makespan
