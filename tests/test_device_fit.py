"""The fit from raw timings to a Device: timings made from a known device come back to it; bad timings are refused."""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest
from hypothesis import given, strategies as st

from pipeplan import hardware
from pipeplan.errors import InvalidInputError
from pipeplan.hardware.fit import (
    MONOTONE_TOLERANCE, P2P_MONOTONE_TOLERANCE, AttentionTiming, GemmTiming, MemoryTiming, Timings,
    device_from_timings, link_from_timings,
)

from _devices import example_device


_MS = (16, 64, 256, 1024, 4096, 8192)


def _known_timings(*, peak: float, bandwidth: float, gemm: float, attention: float, memory: float,
                   launch: float, jitter: list[float], random: float | None = None) -> Timings:
    """Timings a device with these efficiencies would give: busy time + launch, each times a jitter factor.

    GEMM efficiency rises with M as ``gemm · min(1, M / 1024)``; attention and memory are flat; with
    ``random``, a dropout kernel at that efficiency too.
    """
    noise = iter(jitter * 100)
    gemms = tuple(GemmTiming(m, n, k, (2 * m * n * k / (peak * gemm * min(1.0, m / 1024)) + launch) * next(noise))
                  for n, k in ((4096, 4096), (12288, 4096)) for m in _MS)
    shapes = [(1, 32, s, 128, causal) for s in (1024, 4096) for causal in (False, True)]
    attentions = tuple(AttentionTiming(b, h, s, d, c, 0.0) for b, h, s, d, c in shapes)
    attentions = tuple(dataclasses.replace(a, seconds=(a.flops / (peak * attention) + launch) * next(noise))
                       for a in attentions)
    memories = tuple(MemoryTiming(kernel, factor * size, (factor * size / (bandwidth * memory) + launch) * next(noise))
                     for kernel, factor in (("copy", 2.0), ("add", 3.0), ("layer_norm", 2.0))
                     for size in (64 * 2**20, 1024 * 2**20))
    if random is not None:
        memories += tuple(MemoryTiming("dropout", 2.5 * size,
                                       (2.5 * size / (bandwidth * random) + launch) * next(noise))
                          for size in (64 * 2**20, 1024 * 2**20))
    return Timings("NVIDIA H100 80GB HBM3", 85e9, 132, gemms=gemms, attention=attentions, memory=memories,
                   launch=tuple(launch * next(noise) for _ in range(5)))


_efficiency = st.floats(0.2, 0.95)
_jitter = st.lists(st.floats(0.97, 1.03), min_size=1, max_size=7)


@given(gemm=_efficiency, attention=_efficiency, memory=_efficiency, random=_efficiency, jitter=_jitter,
       launch=st.floats(1e-6, 8e-6))
def test_timings_of_a_known_device_fit_back_to_its_efficiencies(gemm: float, attention: float, memory: float,
                                                               random: float, jitter: list[float],
                                                               launch: float) -> None:
    reference = example_device()
    timings = _known_timings(peak=reference.peak_flops, bandwidth=reference.memory_bandwidth, gemm=gemm,
                             attention=attention, memory=memory, launch=launch, jitter=jitter, random=random)
    device = device_from_timings(timings, reference=reference)
    assert device.random_efficiency == pytest.approx(random, rel=0.07)
    # ±3 % jitter on every time (the launch too) moves each efficiency by at most ~7 %.
    assert device.gemm_efficiency == pytest.approx(gemm, rel=0.07)
    assert device.attention_efficiency == pytest.approx(attention, rel=0.07)
    assert device.memory_efficiency == pytest.approx(memory, rel=0.07)
    assert device.launch_overhead_ms == pytest.approx(launch * 1e3, rel=0.031)
    assert (device.peak_flops, device.memory_bandwidth) == (reference.peak_flops, reference.memory_bandwidth)
    for point in device.gemm_table:
        if point.m >= 256:  # busy time well above the launch: the point is the shape's efficiency
            assert point.efficiency == pytest.approx(gemm * min(1.0, point.m / 1024), rel=0.08)
    assert [(p.m, p.n, p.k) for p in device.gemm_table] == [(g.m, g.n, g.k) for g in timings.gemms]


@given(gemm=_efficiency, attention=_efficiency, memory=_efficiency)
def test_without_a_preset_peak_and_bandwidth_are_the_best_measured(gemm: float, attention: float,
                                                                   memory: float) -> None:
    timings = _known_timings(peak=1e12, bandwidth=1e11, gemm=gemm, attention=attention, memory=memory,
                             launch=1e-6, jitter=[1.0])
    device = device_from_timings(timings, match_preset=False)
    best = max(gemm, attention)
    assert device.peak_flops == pytest.approx(1e12 * best, rel=1e-9)
    assert device.gemm_efficiency == pytest.approx(gemm / best, rel=1e-9)
    assert device.attention_efficiency == pytest.approx(attention / best, rel=1e-9)
    assert device.memory_bandwidth == pytest.approx(1e11 * memory, rel=1e-9)
    assert device.memory_efficiency == pytest.approx(1.0)
    assert max(p.efficiency for p in device.gemm_table) <= 1.0


@given(slower=st.floats(0.0, 0.74), kernel=st.sampled_from(["copy", "add", "layer_norm"]))
def test_a_larger_kernel_much_faster_than_a_smaller_one_is_refused(slower: float, kernel: str) -> None:
    timings = _known_timings(peak=1e12, bandwidth=1e11, gemm=0.7, attention=0.5, memory=0.8, launch=1e-6,
                             jitter=[1.0])
    small, big = [m for m in timings.memory if m.kernel == kernel]
    faster = dataclasses.replace(big, seconds=max(small.seconds * slower, 1e-9))
    broken = dataclasses.replace(timings, memory=tuple(faster if m is big else m for m in timings.memory))
    with pytest.raises(InvalidInputError, match="non-monotone in size") as error:
        device_from_timings(broken, match_preset=False)
    assert "\n" not in str(error.value)


@given(shrink=st.floats(0.05, 0.74))
def test_a_larger_gemm_or_message_much_faster_is_refused(shrink: float) -> None:
    timings = _known_timings(peak=1e12, bandwidth=1e11, gemm=0.7, attention=0.5, memory=0.8, launch=1e-6,
                             jitter=[1.0])
    gemms = list(timings.gemms)
    gemms[3] = dataclasses.replace(gemms[3], seconds=gemms[2].seconds * shrink)  # M 1024 faster than M 256
    with pytest.raises(InvalidInputError, match="non-monotone in size"):
        device_from_timings(dataclasses.replace(timings, gemms=tuple(gemms)), match_preset=False)
    messages = ((4.0, 1e-5), (4e6, 1e-5 * shrink * (1 - P2P_MONOTONE_TOLERANCE) / (1 - MONOTONE_TOLERANCE)))
    with pytest.raises(InvalidInputError, match="non-monotone in size"):
        link_from_timings(dataclasses.replace(timings, p2p=messages))


def test_noise_within_the_tolerance_is_accepted() -> None:
    timings = _known_timings(peak=1e12, bandwidth=1e11, gemm=0.7, attention=0.5, memory=0.8, launch=1e-6,
                             jitter=[1.0])
    # A 4x larger copy at 80 % of the smaller one's time: noise on launch-bound sizes, not a broken timer.
    small, big = [m for m in timings.memory if m.kernel == "copy"]
    noisy = dataclasses.replace(big, seconds=small.seconds * (1 - MONOTONE_TOLERANCE + 0.05))
    device_from_timings(dataclasses.replace(timings, memory=(small, noisy)), match_preset=False)


@pytest.mark.parametrize("value", [0.0, -1e-3, math.nan, math.inf])
def test_non_positive_or_non_finite_times_are_refused(value: float) -> None:
    timings = _known_timings(peak=1e12, bandwidth=1e11, gemm=0.7, attention=0.5, memory=0.8, launch=1e-6,
                             jitter=[1.0])
    gemms = (dataclasses.replace(timings.gemms[0], seconds=value), *timings.gemms[1:])
    with pytest.raises(InvalidInputError, match=r"GEMM 16x4096x4096 must be a time > 0 s"):
        device_from_timings(dataclasses.replace(timings, gemms=gemms), match_preset=False)


def test_all_zero_timings_are_refused_as_such() -> None:
    timings = _known_timings(peak=1e12, bandwidth=1e11, gemm=0.7, attention=0.5, memory=0.8, launch=1e-6,
                             jitter=[1.0])
    zero = dataclasses.replace(
        timings, gemms=tuple(dataclasses.replace(g, seconds=0.0) for g in timings.gemms),
        attention=tuple(dataclasses.replace(a, seconds=0.0) for a in timings.attention),
        memory=tuple(dataclasses.replace(m, seconds=0.0) for m in timings.memory), launch=(0.0,))
    with pytest.raises(InvalidInputError, match="all zero"):
        device_from_timings(zero)
    with pytest.raises(InvalidInputError, match="no gemms entries"):
        device_from_timings(dataclasses.replace(timings, gemms=()))


def test_faster_than_the_spec_peak_is_refused() -> None:
    reference = example_device()
    timings = _known_timings(peak=reference.peak_flops * 1.5, bandwidth=reference.memory_bandwidth, gemm=0.9,
                             attention=0.5, memory=0.8, launch=1e-6, jitter=[1.0])
    with pytest.raises(InvalidInputError, match="the peak FLOP/s"):
        device_from_timings(timings, reference=reference)


@given(latency=st.floats(1e-6, 1e-4), bandwidth=st.floats(1e9, 4e11), jitter=_jitter)
def test_p2p_line_recovers_latency_and_bandwidth(latency: float, bandwidth: float, jitter: list[float]) -> None:
    sizes = (4.0, 64e3, 2**20, 16 * 2**20, 64 * 2**20, 256 * 2**20)
    noise = iter(jitter * 10)
    samples = tuple((size, (latency + size / bandwidth) * next(noise)) for size in sizes)
    timings = Timings("cpu", 1e9, 1, p2p=samples)
    link = link_from_timings(timings)
    assert link is not None
    assert link.bandwidth == pytest.approx(bandwidth, rel=0.04)
    # The intercept of a least-squares line is pulled by the large sizes' noise: compare with the noise's scale.
    assert abs(link.latency_ms / 1e3 - latency) <= latency * 0.05 + 0.03 * max(s for _b, s in samples)


def test_device_records_match_torch_device_names() -> None:
    # torch.cuda.get_device_name on each GPU (NVIDIA's product strings).
    names = {"NVIDIA A100-SXM4-80GB": "a100-80g", "NVIDIA A100-SXM4-40GB": "a100-40g",
             "NVIDIA A100 80GB PCIe": "a100-80g", "NVIDIA A100-PCIE-40GB": "a100-40g",
             "NVIDIA H100 80GB HBM3": "h100-80g", "NVIDIA H200": "h200-141g", "NVIDIA L40S": "l40s",
             "cpu": None, "NVIDIA GeForce RTX 4090": None}
    matched = {name: hardware.match_torch_name(name) for name in names}
    assert {name: record.name if record else None for name, record in matched.items()} == names
    for name in names:  # no name is claimed by two records, so the registry's order does not decide
        assert sum(record.matches(name) for record in hardware.DEVICES.values()) <= 1, name


def test_a_matched_device_is_fitted_against_its_records_spec() -> None:
    h100 = hardware.device("h100-80g")
    timings = dataclasses.replace(
        _known_timings(peak=h100.peak_flops, bandwidth=h100.memory_bandwidth, gemm=0.7, attention=0.5, memory=0.8,
                       launch=4e-6, jitter=[1.0]), device_name="NVIDIA H100 80GB HBM3")
    device = device_from_timings(timings)
    assert (device.name, device.peak_flops, device.gemm_tile) == ("h100-80g", h100.peak_flops, h100.gemm_tile)
    assert device_from_timings(timings, match_preset=False).peak_flops < h100.peak_flops  # the best measured rate
    unknown = dataclasses.replace(timings, device_name="AMD Instinct MI300X")
    assert device_from_timings(unknown).name == "amd-instinct-mi300x"


def test_timings_round_trip_through_their_dict() -> None:
    timings = _known_timings(peak=1e12, bandwidth=1e11, gemm=0.7, attention=0.5, memory=0.8, launch=1e-6,
                             jitter=[1.0, 1.01])
    timings = dataclasses.replace(timings, p2p=((4.0, 1e-5), (1e6, 1e-4)))
    assert Timings.from_dict(timings.to_dict()) == timings
    assert statistics.median(timings.launch) > 0
