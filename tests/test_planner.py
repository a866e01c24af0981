"""The planner's search: exact against enumeration, valid bounds, memory model, baselines, bad input."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _planner_models import gpt_workload, make_cluster
from pipeplan import InfeasiblePlanError, InvalidInputError, StageCosts, build_schedule, data_parallel, simulate
from pipeplan.costs import CommModel
from pipeplan.hardware import Device, Link
from pipeplan.layers import LayerProfile
from pipeplan.partition import PartitionOptions, even_split, partition_layers
from pipeplan.planner import (
    Cluster,
    Config,
    OptimizerBytes,
    SearchOptions,
    SearchSpace,
    Workload,
    evaluate_layout,
    search,
    step_time_lower_bound,
)



def small_cluster(gpus: int = 4, memory: float = 4e9) -> Cluster:
    return make_cluster(gpus, memory, gpus_per_node=2)


# ------------------------------------------------------------- optimality
@pytest.mark.parametrize(
    "layers,gpus,batch,memory,extra",
    [
        (8, 4, 16, 4e9, 0.0),     # memory is loose: pp = 1 wins
        (8, 4, 16, 0.9e9, 12.0),  # tight: pipelines, recompute on some stages
        (6, 4, 8, 0.7e9, 30.0),   # a heavy first stage (a vision encoder)
    ],
)
def test_pruned_search_equals_exhaustive_enumeration(layers, gpus, batch, memory, extra):
    workload = gpt_workload(num_layers=layers, hidden=512, heads=8, seq=512, first_extra=extra,
                            first_extra_bytes=1e8)
    cluster = small_cluster(gpus, memory)
    pruned = search(workload, cluster, batch, SearchOptions(top=3))
    full = search(workload, cluster, batch, SearchOptions(top=3, exhaustive=True))
    assert full.stats.pruned == 0 and full.stats.simulated >= pruned.stats.simulated
    assert pruned.best.step_time == pytest.approx(full.best.step_time, rel=1e-12)
    # the whole top list is exact for the templates (adaptive is pruned against the best only)
    templates = ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"]
    pruned = search(workload, cluster, batch, SearchOptions(top=3, schedules=templates))
    full = search(workload, cluster, batch, SearchOptions(top=3, schedules=templates, exhaustive=True))
    assert [p.step_time for p in pruned.plans] == pytest.approx([p.step_time for p in full.plans], rel=1e-12)


def test_best_equals_an_independent_enumeration_of_the_space():
    """Rebuild every candidate with the public pieces (partition, build, simulate) and take the minimum."""
    profile = LayerProfile([2.0, 1.0, 1.0, 1.0, 1.0, 3.0], params=[1e6] * 6, activation_bytes=[1e5] * 6)
    workload = Workload.from_profile(profile)
    free = Link("free", latency_ms=0.0, bandwidth=1e30)  # the enumeration below charges no messages
    cluster = Cluster(4, Device("test-gpu", memory_bytes=1e12, peak_flops=1e15), free, free)
    result = search(workload, cluster, 8, SearchOptions(schedules=["1f1b", "gpipe", "zb-h1", "interleaved"], top=1))
    space = SearchSpace(num_gpus=4, global_batch=8, num_layers=6, micro_batch_sizes=(1,), recompute_modes=("none",),
                        schedules=("1f1b", "gpipe", "zb-h1", "interleaved"))
    best = math.inf
    for config in space.configs():
        options = {"virtual_stages": config.virtual_stages} if config.schedule == "interleaved" else {}
        split = partition_layers(profile, config.num_stages, PartitionOptions(schedule=config.schedule, schedule_options=options))
        costs = profile.stage_costs(split.layers_per_stage)
        schedule = build_schedule(config.schedule, num_stages=config.num_stages,
                                  num_microbatches=config.num_microbatches, **options)
        best = min(best, simulate(schedule, costs, CommModel()).makespan)
    assert result.best.pipeline_time == pytest.approx(best, rel=1e-12)
    # dp = 1 here: the rest of the step is the optimizer's pass over the same parameters in every candidate
    assert result.best.step_time == pytest.approx(best + result.best.optimizer_time, rel=1e-12)


# ------------------------------------------------------------- bounds
@settings(max_examples=40, deadline=None)
@given(
    forward=st.lists(st.floats(0.5, 5.0), min_size=2, max_size=5),
    micro=st.integers(1, 9),
    name=st.sampled_from(["1f1b", "gpipe", "zb-h1", "zb-h2"]),
    latency=st.floats(0.0, 2.0),
)
def test_lower_bound_never_exceeds_the_simulated_makespan(forward, micro, name, latency):
    costs = StageCosts(forward)
    schedule = build_schedule(name, num_stages=len(forward), num_microbatches=micro)
    boundary = [latency] * (len(forward) - 1)
    timeline = simulate(schedule, costs, CommModel(latency=latency))
    bound = step_time_lower_bound(costs, boundary, schedule.placement, micro, split=schedule.split_backward)
    assert bound <= timeline.makespan * (1 + 1e-12)


@pytest.mark.parametrize("name,virtual", [("interleaved", 2), ("zb-v", 2)])
def test_lower_bound_holds_with_chunks(name, virtual):
    costs = StageCosts([3.0, 1.0, 2.0, 1.0, 1.0, 2.5, 1.0, 4.0])
    options = {"virtual_stages": virtual} if name == "interleaved" else {}
    schedule = build_schedule(name, num_stages=8, num_microbatches=8, **options)
    makespan = simulate(schedule, costs, CommModel(latency=0.3)).makespan
    bound = step_time_lower_bound(costs, [0.3] * 7, schedule.placement, 8, split=schedule.split_backward)
    assert 0 < bound <= makespan


@settings(max_examples=30, deadline=None)
@given(
    forward=st.lists(st.floats(0.2, 5.0), min_size=6, max_size=6),
    ranks=st.sampled_from([2, 3]),
    micro=st.integers(1, 8),
    latency=st.floats(0.0, 1.0),
    effort=st.sampled_from(["fast", "full"]),
    send_mode=st.sampled_from(["eager", "rendezvous"]),
)
def test_lower_bound_holds_for_adaptive_orders_over_chunks_in_a_loop(forward, ranks, micro, latency, effort,
                                                                     send_mode):
    """The planner's split-backward bound for its chunked adaptive candidates, whatever order comes out."""
    stages = len(forward)
    costs = StageCosts(forward)
    placement = [s % ranks for s in range(stages)]
    comm = CommModel(latency=latency, send_mode=send_mode)
    schedule = build_schedule("adaptive", num_stages=stages, num_microbatches=micro, costs=costs, comm=comm,
                              placement=placement, effort=effort)
    makespan = simulate(schedule, costs, comm).makespan
    bound = step_time_lower_bound(costs, [latency] * (stages - 1), schedule.placement, micro, split=True)
    assert bound <= makespan * (1 + 1e-12)


def test_best_for_an_engine_is_the_first_plan_it_runs():
    workload = gpt_workload(num_layers=8, hidden=512, heads=8, seq=512, first_extra=20.0)
    result = search(workload, small_cluster(4, 4e9), 16, SearchOptions(pp=4, top=5))
    assert result.best_for("torch") == (result.best, 0)
    plan, index = result.best_for("megatron")
    assert plan.schedule in ("1f1b", "interleaved")
    assert index is None or result.plans[index] is plan
    with pytest.raises(InvalidInputError, match="engine must be one of"):
        result.best_for("jax")


def test_lower_bound_is_exact_for_uniform_one_f_one_b():
    # (m + P − 1)(F + B): DESIGN.md's closed form
    costs = StageCosts.uniform(4, forward=1.0, backward=2.0)
    schedule = build_schedule("1f1b", num_stages=4, num_microbatches=8)
    assert step_time_lower_bound(costs, [0.0] * 3, schedule.placement, 8, split=False) == 11 * 3.0
    assert simulate(schedule, costs).makespan == 33.0


# ------------------------------------------------------------- memory
def test_optimizer_bytes_per_parameter():
    assert OptimizerBytes.for_optimizer("adam", 8).per_trainable == 16
    # Megatron-LM theoretical_memory_usage.py: 6 + 12 / dp with the distributed optimizer (the evaluator's shorthand)
    assert OptimizerBytes.for_mode("distributed", data_parallel.get("ddp"), 8).per_trainable == pytest.approx(6 + 12 / 8)
    assert OptimizerBytes.for_optimizer(18.0, 1).per_trainable == 18
    assert OptimizerBytes.for_optimizer("18", 1).per_trainable == 18
    with pytest.raises(InvalidInputError, match="optimizer"):
        OptimizerBytes.for_optimizer("sgd", 1)
    # issue 24: a user's "distributed" optimizer is the data-parallel mode zero1, refused with that pointer
    with pytest.raises(InvalidInputError, match="the distributed optimizer is the data-parallel mode zero1: "
                                                "--dp-modes zero1"):
        OptimizerBytes.for_optimizer("distributed", 8)


def test_plan_memory_is_weights_state_and_the_one_f_one_b_activation_peak():
    params, act = 1e7, 3e6
    profile = LayerProfile.uniform(8, forward=1.0, params=params, activation_bytes=act)
    workload = Workload.from_profile(profile)
    cluster = small_cluster(4, 1e12)
    config = Config(pp=4, dp=1, micro_batch_size=1, num_microbatches=8, schedule="1f1b")
    plan = evaluate_layout(workload, cluster, config, (2, 2, 2, 2), memory_capacity=1e12)
    for rank, memory in enumerate(plan.memory):
        assert memory.parameters == 2 * 2 * params
        assert memory.gradients == 2 * 2 * params
        assert memory.optimizer == 12 * 2 * params
        assert memory.activations == min(8, 4 - rank) * 2 * act  # 1F1B holds min(m, P − p)
    distributed = evaluate_layout(workload, cluster, replace_dp(config, 2), (2, 2, 2, 2), optimizer="distributed")
    assert distributed.memory[0].optimizer == 12 / 2 * 2 * params
    assert distributed.memory[0].gradients == 4 * 2 * params


def replace_dp(config: Config, dp: int) -> Config:
    return Config(config.pp, dp, config.micro_batch_size, config.num_microbatches, config.schedule)


def test_frozen_layers_hold_only_their_weights():
    profile = LayerProfile([1.0] * 4, params=[1e6] * 4, trainable_params=[0, 0, 1e6, 1e6])
    workload = Workload.from_profile(profile)
    config = Config(pp=2, dp=1, micro_batch_size=1, num_microbatches=2, schedule="1f1b")
    plan = evaluate_layout(workload, small_cluster(2, 1e12), config, (2, 2))
    assert plan.memory[0].total == 2 * 2e6  # bf16 weights only
    assert plan.memory[1].total == 16 * 2e6


def test_tight_memory_recomputes_only_the_stages_that_need_it():
    workload = gpt_workload(num_layers=8, hidden=512, heads=8, seq=512)
    loose = search(workload, small_cluster(4, 4e9), 16,
                   SearchOptions(pp=4, micro_batch_size=4, schedules=["1f1b"], top=1))
    assert set(loose.best.recompute) == {"none"}
    peak_stage0 = loose.best.memory[0].total
    tight = search(workload, small_cluster(4, peak_stage0 * 0.8), 16, SearchOptions(pp=4, micro_batch_size=4,
                   schedules=["1f1b"], top=1))
    assert tight.best.recompute[0] != "none"  # 1F1B's first stage holds the most microbatches
    assert "none" in tight.best.recompute  # the last stage holds one: no recompute there
    assert max(tight.best.peak_memory) <= peak_stage0 * 0.8


# ------------------------------------------------------------- baselines
def test_baselines_are_what_users_run_and_one_knob_plans_change_one_knob():
    workload = gpt_workload(num_layers=8, hidden=512, heads=8, seq=512, first_extra=25.0)
    result = search(workload, small_cluster(4, 4e9), 16, SearchOptions(pp=4, top=3))
    assert [b.name for b in result.baselines] == ["reference-fsdp", "megatron-recommended"]
    fsdp, megatron = result.baselines
    assert fsdp.plan is not None and (fsdp.plan.pp, fsdp.plan.dp, fsdp.plan.dp_mode) == (1, 4, "fsdp")
    base = result.baseline
    assert base is megatron.plan and base is not None and base.schedule == "1f1b"
    assert base.pp == 4 and base.layers_per_stage == even_split(8, 4)  # the least pp that fits, within --pp 4
    assert set(base.recompute) == {"none"}
    assert all(plan.pp == 4 for plan in result.plans)  # a baseline outside the searched space is not a plan
    assert result.ratio(result.best) == pytest.approx(base.step_time / result.best.step_time)
    assert result.ratio(result.best) > 1.0  # the heavy first stage makes the even split slow
    best_baseline = min(b.step_time for b in result.baselines if b.step_time is not None)
    assert result.ratio_to_best_baseline(result.best) == pytest.approx(best_baseline / result.best.step_time)
    knobs = result.one_knob
    assert knobs["partition"].schedule == "1f1b" and knobs["partition"].layers_per_stage != base.layers_per_stage
    assert (knobs["partition"].micro_batch_size, knobs["partition"].num_microbatches) == (
        base.micro_batch_size, base.num_microbatches)
    assert knobs["schedule"].layers_per_stage == even_split(8, knobs["schedule"].num_stages)
    for plan in knobs.values():
        assert result.best.step_time <= plan.step_time * (1 + 1e-12) or plan.pp != result.best.pp


def test_a_baseline_in_the_space_is_never_faster_than_the_best_plan():
    workload = gpt_workload(num_layers=8, hidden=512, heads=8, seq=512, first_extra=25.0)
    result = search(workload, small_cluster(8, 4e9), 32, SearchOptions(top=2))
    for baseline in result.baselines:
        assert baseline.step_time is not None
        assert result.best.step_time <= baseline.step_time * (1 + 1e-12)
    assert result.ratio_to_best_baseline(result.best) >= 1.0


def test_plans_are_ranked_and_fit():
    workload = gpt_workload(num_layers=8, hidden=512, heads=8, seq=512, first_extra=10.0)
    result = search(workload, small_cluster(4, 1.5e9), 16, SearchOptions(top=5))
    times = [p.step_time for p in result.plans]
    assert times == sorted(times)
    assert all(p.fits and max(p.peak_memory) <= 1.5e9 for p in result.plans)
    assert all(p.global_batch == 16 and p.pp * p.dp == 4 for p in result.plans)
    assert result.lower_bound <= result.best.step_time
    everything = search(workload, small_cluster(4, 1.5e9), 16, SearchOptions(top=1000, exhaustive=True))
    single = [p.step_time for p in everything.plans if p.virtual_stages == 1]
    assert everything.lower_bound <= min(p.step_time for p in everything.plans)
    assert result.lower_bound <= result.single_stage_bound <= min(single)


# ------------------------------------------------------------- bad input
def test_no_plan_fits_names_the_smallest_memory_and_the_module():
    # 8 layers of 3.1M parameters (50 MB each with Adam): at pp = 8 a rank holds 50 MB plus activations
    workload = gpt_workload(num_layers=8, hidden=512, heads=8, seq=512)
    with pytest.raises(InfeasiblePlanError, match=r"smallest memory that fits is .* GiB .*largest module is 'layers"):
        search(workload, small_cluster(8, 5.1e7), 16, SearchOptions(headroom=0))
    with pytest.raises(InfeasiblePlanError, match=r"weights and optimizer state alone need at least 0.04.* GiB"):
        search(workload, small_cluster(8, 4e7), 16, SearchOptions(headroom=0))
    # the default leaves 10 % free, and the message shows the capacity once, with and without it (GiB)
    with pytest.raises(InfeasiblePlanError, match=r"no plan fits a GPU of 0.0475 GiB \(0.0427 GiB usable, 10% "
                                                  r"headroom\)"):
        search(workload, small_cluster(8, 5.1e7), 16)
    with pytest.raises(InvalidInputError, match=r"headroom must be a share of the memory in \[0, 1\), got 1"):
        search(workload, small_cluster(8, 5.1e7), 16, SearchOptions(headroom=1))


def test_bad_batches_stages_and_schedules():
    workload = gpt_workload(num_layers=4, hidden=256, heads=4, seq=128, micro_batch_sizes=(1, 2))
    cluster = small_cluster(4, 4e9)
    with pytest.raises(InvalidInputError, match="global_batch=6 is not divisible by dp"):
        search(workload, cluster, 6, SearchOptions(pp=1))
    with pytest.raises(InvalidInputError, match="pp=4 needs at least that many layers"):
        search(gpt_workload(num_layers=3, hidden=256, heads=4, seq=128), cluster, 8, SearchOptions(pp=4))
    with pytest.raises(InvalidInputError, match="schedules must be among"):
        search(workload, cluster, 8, SearchOptions(schedules=["1f2b"]))
    with pytest.raises(InvalidInputError, match=r"pp=\d+ must divide"):
        search(workload, cluster, 8, SearchOptions(pp=3))
    with pytest.raises(InvalidInputError, match="budget"):
        search(workload, cluster, 8, SearchOptions(budget=0))


def test_a_tiny_budget_returns_the_best_so_far_and_says_so():
    workload = gpt_workload(num_layers=8, hidden=512, heads=8, seq=512, first_extra=10.0)
    result = search(workload, small_cluster(4, 1.5e9), 16, SearchOptions(budget=1e-9))
    assert not result.stats.complete
    assert len(result.plans) >= 1 and result.plans[0].fits


@settings(max_examples=60, deadline=None)
@given(
    stages=st.lists(st.floats(0.1, 10.0), min_size=2, max_size=6),
    micro=st.integers(1, 12),
    name=st.sampled_from(["1f1b", "gpipe", "zb-h1", "zb-h2"]),
)
def test_fill_bound_holds_for_any_partition(stages, micro, name):
    """The partition-free bound never exceeds a simulated makespan (F = T/3 per stage: ratio 1/3 when split)."""
    from pipeplan.planner.bounds import fill_bound

    costs = StageCosts([t / 3 for t in stages])
    schedule = build_schedule(name, num_stages=len(stages), num_microbatches=micro)
    makespan = simulate(schedule, costs).makespan
    ratio = 1 / 3 if schedule.split_backward else 1.0
    assert fill_bound(sum(stages), micro, len(stages), ratio) <= makespan * (1 + 1e-9)


def test_fill_bound_is_one_f_one_b_on_equal_stages_for_large_m():
    from pipeplan.planner.bounds import fill_bound

    # (m + P − 1)·T/P for 1F1B on equal stages; the bound reaches m·T/P + (P − 1)·T/(2P) as m grows
    total, ranks, micro = 8.0, 4, 10_000
    assert fill_bound(total, micro, ranks, 1.0) == pytest.approx(micro * total / ranks + 3 * total / 8, rel=1e-4)
    assert fill_bound(total, 1, 1, 1.0) == total


def test_the_asynchronous_dual_rate_schedule_is_not_planned():
    workload = gpt_workload(num_layers=4, hidden=256, heads=4, seq=128, micro_batch_sizes=(1,))
    assert "dual-rate" not in SearchSpace(num_gpus=4, global_batch=8, num_layers=4).schedule_names
    with pytest.raises(InvalidInputError, match="'dual-rate' is not planned: it trains asynchronously"):
        search(workload, small_cluster(4, 4e9), 8, SearchOptions(schedules=["dual-rate"]))


def test_divisors_are_complete_and_sorted_for_large_numbers():
    from pipeplan.planner.space import divisors

    for number in (1, 2, 12, 36, 97, 360, 1_000_000_007, 10**12):
        found = divisors(number)
        assert found == sorted(set(found))
        assert all(number % d == 0 for d in found)
        if number <= 360:
            assert found == [d for d in range(1, number + 1) if number % d == 0]
    assert len(divisors(10**12)) == 169  # (12 + 1)²


def test_adaptive_over_chunks_balances_a_light_prefix_the_templates_cannot():
    """A frozen encoder (light, forward only) before heavy decoder layers: the templates' min-max split wastes a rank."""
    forward = [0.3] * 9 + [4.0] * 8
    profile = LayerProfile(forward, [0.0] * 9 + [8.0] * 8, [0.0] * 9 + [3.5] * 8, params=[1e6] * 17,
                           trainable_params=[0.0] * 9 + [1e6] * 8, activation_bytes=[1e6] * 17)
    workload = Workload.from_profile(profile)
    cluster = make_cluster(4, 80e9)
    result = search(workload, cluster, 32, SearchOptions(pp=4))
    best = result.best
    assert best.schedule == "adaptive" and best.virtual_stages > 1
    assert best.placement == tuple(s % 4 for s in range(best.num_stages))  # a loop, as Interleaved1F1B places
    assert best.schedule_label == f"adaptive v={best.virtual_stages}"
    one_stage = search(workload, cluster, 32, SearchOptions(pp=4, max_virtual_stages=1,
                                                            schedules=["1f1b", "zb-h1", "zb-h2", "adaptive", "interleaved"]))
    assert best.step_time <= 0.95 * one_stage.best.step_time
    assert best.step_time <= 1.02 * result.lower_bound


def test_the_space_has_adaptive_over_chunks_at_the_smallest_micro_batch_only():
    space = SearchSpace(num_gpus=8, global_batch=64, num_layers=40, max_virtual_stages=4)
    chunked = [c for c in space.configs() if c.chunked_adaptive]
    assert {(c.pp, c.virtual_stages) for c in chunked} == {(pp, v) for pp in (2, 4, 8) for v in (2, 3, 4)}
    assert {c.micro_batch_size for c in chunked} == {1}
    assert any(c.schedule == "adaptive" and c.virtual_stages == 1 and c.micro_batch_size == 2 for c in space.configs())
    # any m: 18 microbatches at pp = 4 rule interleaved out (Megatron-LM needs a multiple of pp), not adaptive
    odd = [c for c in SearchSpace(num_gpus=4, global_batch=18, num_layers=40).configs() if c.pp == 4]
    assert {c.num_microbatches for c in odd} == {18, 9, 6, 3, 2, 1}
    assert not any(c.schedule == "interleaved" for c in odd)
    assert any(c.chunked_adaptive and c.num_microbatches == 18 for c in odd)
