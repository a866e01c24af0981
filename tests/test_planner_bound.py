"""The planner's partition-free lower bounds: valid on every partition and schedule, and no looser than before."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _planner_models import gpt_workload, make_cluster
from pipeplan import InfeasiblePlanError, build_schedule, data_parallel, simulate
from pipeplan.costs import CommModel
from pipeplan.hardware import Device, Link
from pipeplan.layers import LayerProfile
from pipeplan.planner import Cluster, Config, SearchOptions, Workload, search
from pipeplan.planner.bounds import LayerTimes, fill_bound, least_max_load
from pipeplan.planner.cluster import allreduce_ms
from pipeplan.planner.evaluate import Evaluator as _Evaluator


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=7), bins=st.integers(1, 3))
def test_least_max_load_never_exceeds_the_best_assignment(items, bins):
    best = min(max(sum(x for x, b in zip(items, assign) if b == k) for k in range(bins))
               for assign in itertools.product(range(bins), repeat=len(items)))
    assert least_max_load(items, bins) <= best + 1e-9


def test_least_max_load_counts_the_pigeonhole():
    # 3 ranks, 4 heavy layers: one rank holds two of them
    assert least_max_load([5.0, 5.0, 5.0, 5.0, 1.0], 3) == 10.0
    # 2 ranks, 5 layers of 5: one holds three
    assert least_max_load([5.0] * 5, 2) == 15.0


def _sizes(draw_cuts: list[int], layers: int, stages: int) -> list[int]:
    """``stages`` non-empty stage sizes from drawn cut positions (topped up with the first free ones)."""
    cuts = set(sorted({c % (layers - 1) + 1 for c in draw_cuts})[: stages - 1])
    cuts |= set([c for c in range(1, layers) if c not in cuts][: stages - 1 - len(cuts)])
    edges = [0, *sorted(cuts), layers]
    return [b - a for a, b in zip(edges, edges[1:])]


@settings(max_examples=40, deadline=None)
@given(
    forward=st.lists(st.floats(0.05, 5.0), min_size=6, max_size=10),
    shape=st.sampled_from([("interleaved", 2, 2), ("zb-v", 2, 2), ("interleaved", 3, 2), ("1f1b", 3, 1),
                           ("zb-h1", 3, 1), ("gpipe", 2, 1), ("zb-v", 3, 2), ("adaptive", 2, 2),
                           ("adaptive", 3, 2), ("adaptive", 2, 3)]),
    rounds=st.integers(1, 3),
    cuts=st.lists(st.integers(0, 100), min_size=8, max_size=8),
    latency=st.floats(0.0, 1.0),
    recompute=st.floats(0.0, 1.0),
    extra=st.floats(0.0, 3.0),
)
def test_partition_free_bounds_hold_for_any_partition_schedule_and_recompute(
    forward, shape, rounds, cuts, latency, recompute, extra
):
    """m · least rank load, the chunked fill and one microbatch's chain never exceed a simulated makespan.

    The partition is arbitrary (not the planner's), the simulated costs recompute
    a share of the forward in the backward, and messages cost ``latency``.
    """
    name, ranks, virtual = shape
    stages = ranks * virtual
    micro = ranks * rounds
    light = LayerProfile(forward, [2 * f for f in forward], [f for f in forward], first_extra=extra,
                         last_extra=extra / 2)
    heavy = light.replaced(backward=[(2 + recompute) * f for f in forward])
    sizes = _sizes(cuts, len(forward), stages)
    options: dict = {"virtual_stages": virtual} if name == "interleaved" else {}
    if name == "adaptive":  # the planner's cost-aware order over chunks in a loop
        options = {"costs": heavy.stage_costs(sizes), "comm": CommModel(latency=latency), "effort": "fast",
                   "placement": [s % ranks for s in range(stages)]}
    schedule = build_schedule(name, num_stages=stages, num_microbatches=micro, **options)
    makespan = simulate(schedule, heavy.stage_costs(sizes), CommModel(latency=latency)).makespan
    times = LayerTimes.of([light, heavy])
    split = schedule.split_backward
    loads = times.total.copy()
    loads[0] += times.first_extra
    loads[-1] += times.last_extra
    assert micro * least_max_load(loads, ranks) <= makespan * (1 + 1e-9)
    assert times.chain(split=split) <= makespan * (1 + 1e-9)
    shallowest = [list(schedule.placement).index(r) for r in range(ranks)]
    assert times.chunked_fill(micro, shallowest, split=split) <= makespan * (1 + 1e-9)


def _old_config_bound(evaluator: _Evaluator, config: Config) -> float:
    """The bound before the rank-load, chunked-fill and chain terms (kept to check the new one is no looser)."""
    profile = evaluator.workload.profile(config.micro_batch_size)
    total = profile.total
    work = float(total.sum()) + profile.first_extra + profile.last_extra
    micro = config.num_microbatches
    shared = micro * work / config.pp
    if config.virtual_stages == 1 and config.pp > 1:
        split = config.schedule not in ("1f1b", "gpipe")
        share = np.asarray(profile.forward) / total
        shared = fill_bound(work, micro, config.pp, float(share.min()) if split else 1.0)
    comm = 0.0
    if config.dp > 1:
        grads = float(np.sum(profile.trainable_params)) * evaluator.memory.bytes_per_param(config.dp).gradients / config.pp
        link = evaluator.cluster.data_parallel_link(config.pp, config.dp)
        comm = allreduce_ms(link, grads, config.dp) * 1e-3 / evaluator.workload.time_unit
    return max(shared, micro * float(total.max())) + comm


@settings(max_examples=6, deadline=None)
@given(
    layers=st.integers(4, 8),
    batch=st.sampled_from([4, 8, 16]),
    memory=st.sampled_from([0.8e9, 2e9, 8e9]),
    extra=st.floats(0.0, 20.0),
    sync=st.sampled_from(["megatron", "megatron-overlap"]),
)
def test_bound_never_exceeds_a_plan_the_exhaustive_search_evaluates(layers, batch, memory, extra, sync):
    workload = gpt_workload(num_layers=layers, hidden=512, heads=8, seq=512, first_extra=extra,
                            micro_batch_sizes=(1, 2))
    cluster = make_cluster(4, memory, gpus_per_node=2)
    try:
        everything = search(workload, cluster, batch, SearchOptions(top=10_000, exhaustive=True, sync=sync))
    except InfeasiblePlanError:  # no plan fits this memory: nothing to check
        return
    evaluators = {mode: _Evaluator(workload, cluster, memory, "adam", "eager", dp_mode=mode, sync=sync)
                  for mode in data_parallel.names()}
    for plan in everything.plans:
        evaluator = evaluators[plan.dp_mode]  # each data-parallel mode has its own bound
        config = Config(plan.pp, plan.dp, plan.micro_batch_size, plan.num_microbatches, plan.schedule,
                        plan.virtual_stages, dp_mode=plan.dp_mode)
        bound = evaluator.bounds.config_bound(config)
        assert bound <= plan.step_time * (1 + 1e-9), (config, bound, plan.step_time)
        if plan.dp_mode == "ddp" and sync == "megatron":  # the bound before the modes, for what it covered
            assert bound >= _old_config_bound(evaluator, config) * (1 - 1e-12)
    assert everything.lower_bound <= everything.best.step_time * (1 + 1e-9)


def test_the_rank_load_bound_charges_the_pigeonhole_on_chunked_placements():
    """Five equal heavy layers on two ranks with two chunks each: one rank does three of them."""
    profile = LayerProfile([1.0] * 5 + [0.01] * 3, params=[1.0] * 8)
    free = Link("free", latency_ms=0.0, bandwidth=1e30)
    cluster = Cluster(2, Device("test-gpu", memory_bytes=1e12, peak_flops=1e15), free, free)
    evaluator = _Evaluator(Workload.from_profile(profile), cluster, None, "adam", "eager")
    config = Config(2, 1, 1, 4, "zb-v", 2)
    total_per_microbatch = 3.0 * 5 + 0.03 * 3
    assert _old_config_bound(evaluator, config) == pytest.approx(4 * total_per_microbatch / 2)
    assert evaluator.bounds.config_bound(config) >= 4 * 3 * 3.0


def test_the_chunked_fill_charges_each_rank_the_forward_and_backward_before_its_first_stage():
    """Two heavy first layers, interleaved on 2 ranks: rank 1 waits for layer 0's forward and its backward."""
    profile = LayerProfile([4.0, 4.0, 0.5, 0.5])  # B = 2F
    times = LayerTimes.of([profile])
    micro = 2
    fill = times.chunked_fill(micro, [0, 1], split=False)
    assert fill == pytest.approx((micro * 27.0 + 4.0 + 8.0) / 2)
    assert fill > micro * times.work / 2
    schedule = build_schedule("interleaved", num_stages=4, num_microbatches=micro, virtual_stages=2)
    makespan = simulate(schedule, profile.stage_costs([1, 1, 1, 1])).makespan
    assert fill <= makespan
