"""The rest of the step (pipeplan.planner.step): gradient reduction, its overlap, the optimizer, NCCL link rates."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _planner_models import gpt_workload
from pipeplan import InvalidInputError, hardware
from pipeplan.hardware import Device, Link
from pipeplan.layers import LayerProfile
from pipeplan.planner import Cluster, Config, SearchOptions, Workload, search
from pipeplan.planner.cluster import allreduce_ms, ring_pass_ms
from pipeplan.planner.evaluate import Evaluator, evaluate_layout
from pipeplan.planner.step import (
    ELEMENTS_PER_LAUNCH,
    SYNCS,
    GradientSync,
    adam_step_bytes,
    exposed_reduction_ms,
    gradient_sync,
    optimizer_ms,
    overlap_window,
)


@dataclass(frozen=True)
class HbmDevice(Device):
    """A device with the HBM fields the lead adds to hardware.Device (test-local until they land)."""

    memory_bandwidth: float = 2.0e12
    memory_efficiency: float = 1.0
    launch_overhead_ms: float = 0.0


def _cluster(gpus: int = 4, *, gpus_per_node: int = 2, launch_ms: float = 0.0) -> Cluster:
    device = HbmDevice("hbm-gpu", memory_bytes=1e12, peak_flops=989e12, launch_overhead_ms=launch_ms)
    return Cluster(gpus, device, Link("nvlink", 0.002, 8e10, allreduce_bandwidth=4.5e11),
                   Link("ib", 0.005, 4.6e10), gpus_per_node)


def _plan(config: Config, sizes, *, sync="megatron", optimizer="adam", layers: int = 8, cluster=None):
    workload = gpt_workload(num_layers=layers, hidden=512, heads=8, seq=512, micro_batch_sizes=(1,))
    return evaluate_layout(workload, cluster or _cluster(), config, sizes, optimizer=optimizer, sync=sync)


# ------------------------------------------------------------------ the arithmetic
@settings(max_examples=80, deadline=None)
@given(total=st.floats(0.0, 1e3), window=st.floats(0.0, 1e3), last=st.floats(0.0, 1e3))
def test_exposed_is_never_more_than_the_collective_nor_less_than_its_last_bucket(total, window, last):
    exposed = exposed_reduction_ms(total, window_ms=window, last_bucket_ms=last)
    assert 0.0 <= exposed <= total
    assert exposed >= min(total, last)
    assert exposed >= total - window - 1e-12


def test_overlap_window_starts_when_the_first_bucket_is_ready():
    # one action from 0 to 10 ms producing 100 bytes evenly: 25 bytes are ready at 2.5 ms
    assert overlap_window([(0.0, 10.0, 100.0)], 25.0) == pytest.approx(7.5)
    # two stages: the first bucket fills inside the second action (starting at 20)
    assert overlap_window([(20.0, 30.0, 50.0), (0.0, 10.0, 10.0)], 30.0) == pytest.approx(30.0 - 24.0)
    # one bucket holds everything: it is ready only at the end
    assert overlap_window([(0.0, 10.0, 100.0)], 100.0) == 0.0
    assert overlap_window([(0.0, 10.0, 100.0)], float("inf")) == 0.0
    assert overlap_window([], 1.0) == 0.0


def test_ring_collectives_follow_nccl_tests_bus_bandwidth():
    """nccl-tests: busbw = algbw · 2 (g − 1) / g for all-reduce, · (g − 1) / g for reduce-scatter/all-gather."""
    link = Link("x", 0.0, 1e9, allreduce_bandwidth=2e11)
    size, group = 1e9, 8
    assert allreduce_ms(link, size, group) == pytest.approx(1e3 * size * 2 * (group - 1) / group / 2e11)
    assert ring_pass_ms(link, size, group) == pytest.approx(allreduce_ms(link, size, group) / 2)
    assert allreduce_ms(link, size, 1) == ring_pass_ms(link, size, 1) == 0.0
    assert Link("y", 0.0, 3e9).bus_bandwidth == 3e9  # allreduce_bandwidth defaults to bandwidth
    with pytest.raises(InvalidInputError, match="allreduce_bandwidth"):
        Link("z", 0.0, 1e9, allreduce_bandwidth=0.0)


def test_adam_moves_28_bytes_per_parameter_and_the_distributed_optimizer_a_dp_th_of_30():
    # read fp32 master, m, v (12) + bf16 grad (2); write master, m, v (12) + bf16 weight (2)
    assert adam_step_bytes(1.0) == 28.0
    # Megatron's distributed optimizer: fp32 gradient (4), state sharded over dp
    assert adam_step_bytes(1.0, gradient_bytes=4.0, shards=8) == pytest.approx(30.0 / 8)


@settings(max_examples=40, deadline=None)
@given(params=st.floats(1e3, 1e11), dp=st.integers(1, 64))
def test_optimizer_time_scales_with_trainable_params_over_dp(params, dp):
    device = HbmDevice("d", memory_bytes=1e12, peak_flops=1e15, memory_bandwidth=3e12, memory_efficiency=0.8)
    time = optimizer_ms(adam_step_bytes(params, shards=dp), params / dp, device)
    assert time == pytest.approx(1e3 * 28.0 * params / dp / (3e12 * 0.8))
    launches = HbmDevice("d", memory_bytes=1e12, peak_flops=1e15, launch_overhead_ms=0.01)
    extra = optimizer_ms(0.0, params / dp, launches)
    assert extra == pytest.approx(0.01 * -(-params / dp // ELEMENTS_PER_LAUNCH))


def test_a_device_without_hbm_bandwidth_charges_no_optimizer_time():
    assert optimizer_ms(1e9, 1e9, object()) == 0.0
    assert optimizer_ms(0.0, 0.0, HbmDevice("d", memory_bytes=1e9, peak_flops=1e12, launch_overhead_ms=1.0)) == 0.0


def test_sync_presets_and_their_buckets():
    megatron, overlap, ddp = SYNCS["megatron"], SYNCS["megatron-overlap"], SYNCS["torch-ddp"]
    assert megatron.bucket(8, 4.0) == float("inf")  # no overlap: one bucket after the backward
    # Megatron-LM: max(40M, 1M · dp) parameters; only pipeline rank 0 buckets
    assert overlap.bucket(8, 4.0) == 40e6 * 4.0
    assert overlap.bucket(64, 2.0) == 64e6 * 2.0
    assert overlap.bucket(8, 4.0, pipeline_rank=1) == float("inf")
    assert ddp.bucket(8, 2.0, pipeline_rank=3) == 25 * 2**20  # torch DDP bucket_cap_mb=25 on every rank
    assert gradient_sync("torch-ddp") is ddp and gradient_sync(ddp) is ddp
    with pytest.raises(InvalidInputError, match="gradient sync must be one of megatron"):
        gradient_sync("carrier-pigeon")


# ------------------------------------------------------------------ in the planner
_SHAPES = st.sampled_from([(2, 2, "1f1b", (4, 4)), (2, 2, "zb-h1", (3, 5)), (1, 4, "1f1b", (8,)),
                           (2, 2, "gpipe", (5, 3)), (4, 1, "1f1b", (2, 2, 2, 2))])


@settings(max_examples=12, deadline=None)
@given(shape=_SHAPES, microbatches=st.integers(1, 6), optimizer=st.sampled_from(["adam", "distributed"]),
       sync=st.sampled_from(["megatron-overlap", "torch-ddp", GradientSync("tiny", True, bucket_bytes=1e5,
                                                                            bucket_first_stage_only=False)]))
def test_overlap_never_makes_a_step_slower_and_step_time_is_the_sum_of_its_parts(shape, microbatches, optimizer,
                                                                                 sync):
    pp, dp, schedule, sizes = shape
    config = Config(pp, dp, 1, microbatches, schedule)
    plain = _plan(config, sizes, optimizer=optimizer)
    overlapped = _plan(config, sizes, optimizer=optimizer, sync=sync)
    assert overlapped.pipeline_time == plain.pipeline_time
    assert overlapped.step_time <= plain.step_time * (1 + 1e-12)
    assert overlapped.dp_comm_time == pytest.approx(plain.dp_comm_time)
    for plan in (plain, overlapped):
        assert 0.0 <= plan.dp_exposed_time <= plan.dp_comm_time * (1 + 1e-12)
        assert plan.step_time == pytest.approx(plan.pipeline_time + plan.dp_exposed_time + plan.optimizer_time)
        assert plan.optimizer_time > 0
    # without overlap everything is exposed
    assert plain.dp_exposed_time == pytest.approx(plain.dp_comm_time)


def test_dp_1_costs_no_data_parallel_time():
    for sync in SYNCS:
        plan = _plan(Config(2, 1, 1, 4, "1f1b"), (4, 4), sync=sync, optimizer="distributed")
        assert plan.dp_comm_time == plan.dp_exposed_time == 0.0
        assert plan.step_time == pytest.approx(plan.pipeline_time + plan.optimizer_time)


def test_the_optimizer_step_shrinks_with_the_distributed_optimizers_dp():
    # a cluster of one node each, so only dp changes
    two = _plan(Config(1, 2, 1, 4, "1f1b"), (8,), optimizer="distributed", cluster=_cluster(2, gpus_per_node=8))
    four = _plan(Config(1, 4, 1, 4, "1f1b"), (8,), optimizer="distributed", cluster=_cluster(4, gpus_per_node=8))
    assert four.optimizer_time == pytest.approx(two.optimizer_time / 2)
    adam = _plan(Config(1, 4, 1, 4, "1f1b"), (8,), optimizer="adam", cluster=_cluster(4, gpus_per_node=8))
    assert adam.optimizer_time == pytest.approx(four.optimizer_time * 4 * 28 / 30)  # not sharded, bf16 gradient


def test_frozen_layers_have_no_optimizer_step_or_gradients_to_reduce():
    profile = LayerProfile([1.0] * 4, params=[1e8] * 4, trainable_params=[1e8, 1e8, 0.0, 0.0])
    frozen = Workload.from_profile(profile)
    profile_all = LayerProfile([1.0] * 4, params=[1e8] * 4)
    config = Config(1, 2, 1, 2, "1f1b")
    part = evaluate_layout(frozen, _cluster(2), config, (4,))
    full = evaluate_layout(Workload.from_profile(profile_all), _cluster(2), config, (4,))
    assert part.optimizer_time == pytest.approx(full.optimizer_time / 2)
    assert part.dp_comm_time < full.dp_comm_time


def test_only_the_last_bucket_stays_exposed_when_the_backward_is_long():
    """One stage, a long backward, small buckets: the exposed tail is the last bucket's reduction."""
    profile = LayerProfile([100.0] * 4, params=[1e8] * 4)  # 100 ms per layer forward, 200 ms backward
    workload = Workload.from_profile(profile)
    cluster = _cluster(2)
    config = Config(1, 2, 1, 1, "1f1b")
    sync = GradientSync("small", True, bucket_bytes=1e6, bucket_first_stage_only=False)
    plan = evaluate_layout(workload, cluster, config, (4,), sync=sync)
    link = cluster.data_parallel_link(1, 2)
    assert plan.dp_exposed_time == pytest.approx(allreduce_ms(link, 1e6, 2))
    assert plan.dp_exposed_time < plan.dp_comm_time


@settings(max_examples=10, deadline=None)
@given(shape=_SHAPES, microbatches=st.integers(1, 6),
       sync=st.sampled_from(["megatron", "megatron-overlap", "torch-ddp"]),
       optimizer=st.sampled_from(["adam", "distributed"]))
def test_the_evaluators_lower_bound_never_exceeds_the_step(shape, microbatches, sync, optimizer):
    pp, dp, schedule, sizes = shape
    workload = gpt_workload(num_layers=8, hidden=512, heads=8, seq=512, micro_batch_sizes=(1,))
    evaluator = Evaluator(workload, _cluster(), None, optimizer, "eager", sync=sync)
    config = Config(pp, dp, 1, microbatches, schedule)
    plan = evaluator.evaluate(config, sizes, ("none",) * len(sizes))
    layout = evaluator.layouts.fixed(config, sizes, ("none",) * len(sizes))
    assert evaluator.lower_bound(config, layout) <= plan.step_time * (1 + 1e-9)


def test_a_searched_plan_reports_its_parts_in_json():
    workload = gpt_workload(num_layers=8, hidden=512, heads=8, seq=512, micro_batch_sizes=(1, 2))
    result = search(workload, _cluster(4), 16, SearchOptions(top=5))
    for plan in result.plans:
        data = plan.to_dict()
        assert data["step_time"] == pytest.approx(data["pipeline_time"] + data["dp_exposed_time"]
                                                  + data["optimizer_time"])
        assert 0.0 <= data["dp_exposed_time"] <= data["dp_comm_time"] * (1 + 1e-12)
        assert data["optimizer_time"] > 0


# ------------------------------------------------------------------ NCCL link presets
#: one direction's line rate of each preset, bytes/s (NVLink 3/4: 12/18 links; PCIe 4.0 x16; 200/400 Gb/s NICs)
_LINE_RATES = {"nvlink-a100": 300e9, "nvlink-h100": 450e9, "pcie-gen4": 32e9, "ib-hdr": 25e9, "ib-ndr": 50e9,
               "roce-400g": 50e9}


def test_nccl_rates_are_below_line_rate_and_collectives_reach_more_inside_a_node():
    assert set(hardware.LINKS) == set(_LINE_RATES)
    for name, line_rate in _LINE_RATES.items():
        link = hardware.link(name)
        assert 0 < link.bandwidth < line_rate
        assert link.latency_ms > 0
    for name in ("nvlink-a100", "nvlink-h100"):
        link = hardware.link(name)
        assert link.bus_bandwidth > link.bandwidth  # NVSwitch all-reduce busbw > one pair's sendrecv


@pytest.mark.parametrize("batch, hidden, published_ms", [(6, 2304, 0.601), (3, 4096, 0.527)])
def test_a100_nvlink_p2p_meets_the_zero_bubble_papers_t_comm_within_25_percent(batch, hidden, published_ms):
    """Qi et al. 2024 (Zero Bubble Pipeline Parallelism), Table 9: T_comm between stages, A100 SXM 80 GB, one node.

    A bf16 activation of b × s × h (s = 1024). Not fitted: the link's rate is nccl-tests'
    (hardware.LINKS); the paper's points imply ~47 GB/s, the preset 53 GB/s (about 9 % fast).
    """
    message = batch * 1024 * hidden * 2
    predicted = hardware.link("nvlink-a100").milliseconds(message)
    assert abs(predicted - published_ms) / published_ms < 0.25
