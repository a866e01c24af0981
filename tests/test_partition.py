"""The exact partition solver: brute force on small instances, memory, tie-breaks, speed."""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeplan
from pipeplan import AsymmetricPipelineScheduler, InfeasiblePlanError, InvalidInputError, simulate
from pipeplan.partition import memory as memory_module
from pipeplan.partition.memory import gib
from pipeplan.partition import problem as problem_module
from pipeplan.partition import tiebreak as tiebreak_module
from pipeplan.partition import ties as partition_ties
from pipeplan.layers import LayerProfile
from pipeplan.partition import PartitionOptions, even_split, inflight_per_stage, partition_layers
from pipeplan.schedules.inflight import _inflight_from_orders
from pipeplan.schedules import build_schedule


# ------------------------------------------------------------------ references
def all_bounds(num_layers: int, num_stages: int):
    for cuts in itertools.combinations(range(1, num_layers), num_stages - 1):
        yield (0, *cuts, num_layers)


def stage_values(costs, bounds, first_extra=0.0, last_extra=0.0):
    values = [float(sum(costs[bounds[k] : bounds[k + 1]])) for k in range(len(bounds) - 1)]
    values[0] += first_extra
    values[-1] += last_extra
    return values


def brute_lexicographic(costs, num_stages, first_extra=0.0, last_extra=0.0):
    """Smallest stage-time vector sorted slowest first, over every partition."""
    return min(
        sorted(stage_values(costs, b, first_extra, last_extra), reverse=True)
        for b in all_bounds(len(costs), num_stages)
    )


# ------------------------------------------------------------------ instances
@st.composite
def instances(draw):
    num_layers = draw(st.integers(1, 9))
    num_stages = draw(st.integers(1, num_layers))
    kind = draw(st.sampled_from(["uniform", "random", "dumbbell", "p_equals_l"]))
    if kind == "uniform":
        costs = [draw(st.integers(1, 5))] * num_layers
    elif kind == "dumbbell":
        light = draw(st.lists(st.integers(1, 3), min_size=num_layers, max_size=num_layers))
        costs = [draw(st.integers(10, 30)), *light[1:-1], draw(st.integers(10, 30))] if num_layers > 1 else light
    else:
        costs = draw(st.lists(st.integers(0, 12), min_size=num_layers, max_size=num_layers))
        if kind == "p_equals_l":
            num_stages = num_layers
    first = draw(st.sampled_from([0, 0, 5, 16]))
    last = draw(st.sampled_from([0, 0, 3, 8]))
    return [float(c) for c in costs], num_stages, float(first), float(last)


# ------------------------------------------------------------- worked examples
def test_lesson16_case():
    # Seed lesson 16: 32 layers of 2 ms, 16 ms fixed on stage 0 and 8 ms on the
    # last, 4 stages -> [3, 11, 11, 7] (every stage 22 ms).
    result = pipeplan.partition_layers([2.0] * 32, 4, PartitionOptions(first_extra=16, last_extra=8))
    assert result.layers_per_stage == (3, 11, 11, 7)
    assert result.stage_times == (22.0, 22.0, 22.0, 22.0)
    assert AsymmetricPipelineScheduler().solve_optimal_layer_partition(32, 2.0, 16.0, 8.0, 4) == [3, 11, 11, 7]


def test_tie_break_lowers_the_second_slowest_stage():
    # Bottleneck 10 is forced by the single layer of 10; among optimal answers the
    # lexicographic rule must make the other stages as even as possible.
    result = partition_layers([10, 1, 1, 1, 1, 1, 1], 3)
    assert result.bottleneck == 10
    assert sorted(result.stage_times, reverse=True) == [10, 3, 3]
    assert partition_layers([10, 1, 1, 1, 1, 1, 1], 3, PartitionOptions(tie_break="variance")).stage_times == (10, 3, 3)


# ------------------------------------------------------------------ properties
@settings(max_examples=250, deadline=None)
@given(instances())
def test_equals_brute_force(instance):
    costs, num_stages, first, last = instance
    result = partition_layers(costs, num_stages, PartitionOptions(first_extra=first, last_extra=last))
    assert len(result.layers_per_stage) == num_stages
    assert min(result.layers_per_stage) >= 1
    assert sum(result.layers_per_stage) == len(costs)
    assert result.stage_times == tuple(stage_values(costs, result.boundaries, first, last))
    assert sorted(result.stage_times, reverse=True) == brute_lexicographic(costs, num_stages, first, last)


@settings(max_examples=120, deadline=None)
@given(instances(), st.sampled_from(["variance", "none"]))
def test_other_tie_breaks_keep_the_optimal_bottleneck(instance, tie_break):
    costs, num_stages, first, last = instance
    result = partition_layers(costs, num_stages, PartitionOptions(first_extra=first, last_extra=last, tie_break=tie_break))
    optimum = brute_lexicographic(costs, num_stages, first, last)[0]
    assert result.bottleneck == optimum
    if tie_break == "variance":
        best = min(
            sum(v * v for v in stage_values(costs, b, first, last))
            for b in all_bounds(len(costs), num_stages)
            if max(stage_values(costs, b, first, last)) == optimum
        )
        assert sum(v * v for v in result.stage_times) == best


@st.composite
def adversarial_instances(draw):
    """Small instances shaped like the slow cases of benchmarks/partition_speed.py: a dominant layer, equal or zero costs."""
    num_layers = draw(st.integers(2, 9))
    num_stages = draw(st.integers(2, num_layers))
    kind = draw(st.sampled_from(["dominant_first", "dominant_first_last", "dominant_middle", "uniform", "zeros"]))
    light = draw(st.lists(st.integers(1, 3), min_size=num_layers, max_size=num_layers))
    if kind == "uniform":
        costs = [draw(st.integers(0, 3))] * num_layers
    elif kind == "zeros":
        costs = draw(st.lists(st.sampled_from([0, 0, 1, 2]), min_size=num_layers, max_size=num_layers))
    else:
        costs = list(light)
        heavy = draw(st.integers(8, 30))
        where = {"dominant_first": [0], "dominant_first_last": [0, num_layers - 1],
                 "dominant_middle": [num_layers // 2]}[kind]
        for index in where:
            costs[index] = heavy
    first = draw(st.sampled_from([0, 0, 5]))
    last = draw(st.sampled_from([0, 0, 3]))
    return [float(c) for c in costs], num_stages, float(first), float(last)


@contextlib.contextmanager
def windowed(level_budget: int = partition_ties.LEVEL_PAIR_BUDGET):
    """Force the windowed tie-breaks; a level budget of 0 peels every level, a huge one none."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tiebreak_module, "PAIR_BUDGET", -1)
        patch.setattr(partition_ties, "LEVEL_PAIR_BUDGET", level_budget)
        yield


@settings(max_examples=300, deadline=None)
@given(st.one_of(adversarial_instances(), instances()), st.sampled_from([0, 4, 10**9]))
def test_windowed_tie_breaks_equal_brute_force(instance, level_budget):
    costs, num_stages, first, last = instance
    candidates = [stage_values(costs, b, first, last) for b in all_bounds(len(costs), num_stages)]
    lexicographic = min(sorted(v, reverse=True) for v in candidates)
    optimum = lexicographic[0]
    smallest_squares = min(sum(x * x for x in v) for v in candidates if max(v) == optimum)
    with windowed(level_budget):
        lex = partition_layers(costs, num_stages, PartitionOptions(first_extra=first, last_extra=last))
        spread = partition_layers(costs, num_stages, PartitionOptions(first_extra=first, last_extra=last, tie_break="variance"))
    assert lex.tie_break == "lexicographic"
    assert sorted(lex.stage_times, reverse=True) == lexicographic
    assert lex.stage_times == tuple(stage_values(costs, lex.boundaries, first, last))
    assert spread.bottleneck == optimum
    assert sum(x * x for x in spread.stage_times) == smallest_squares


@settings(max_examples=150, deadline=None)
@given(adversarial_instances())
def test_tie_breaks_on_adversarial_instances_equal_brute_force(instance):
    costs, num_stages, first, last = instance
    result = partition_layers(costs, num_stages, PartitionOptions(first_extra=first, last_extra=last))
    assert sorted(result.stage_times, reverse=True) == brute_lexicographic(costs, num_stages, first, last)


# Found by a random search: the two tie-breaks disagree here (the variance optimum
# is not the lexicographic one), so a tie-break that returns the other fails.
DISAGREEING = [
    ([8, 2, 4, 1, 1, 6, 1], 5, [8, 6, 6, 2, 1], [8, 7, 4, 2, 2]),
    ([12, 5, 3, 2, 6, 3, 6, 0], 5, [12, 8, 8, 6, 3], [12, 9, 6, 5, 5]),
    ([10, 2, 5, 0, 0, 4, 2, 1, 5], 5, [10, 6, 6, 5, 2], [10, 7, 5, 4, 3]),
]


@pytest.mark.parametrize("costs,num_stages,lexicographic,variance", DISAGREEING)
@pytest.mark.parametrize("level_budget", [None, 0, 10**9])
def test_tie_breaks_that_disagree(costs, num_stages, lexicographic, variance, level_budget):
    context = contextlib.nullcontext() if level_budget is None else windowed(level_budget)
    with context:
        lex = partition_layers([float(c) for c in costs], num_stages)
        spread = partition_layers([float(c) for c in costs], num_stages, PartitionOptions(tie_break="variance"))
    assert sorted(lex.stage_times, reverse=True) == lexicographic == brute_lexicographic(costs, num_stages)
    assert sorted(spread.stage_times, reverse=True) == variance


def test_windowed_and_pair_walk_agree_on_a_medium_dominant_instance(monkeypatch):
    # 400 layers with a dominant first layer: too many tied pairs to brute force,
    # few enough for the pair-by-pair programs; both are exact, so the sorted
    # stage times (lexicographic) and the sum of squares (variance) must agree.
    costs = [1.0 + (i % 7) * 0.25 for i in range(400)]
    costs[0] = 80.0
    costs[200] = 60.0
    monkeypatch.setattr(tiebreak_module, "PAIR_BUDGET", 10**12)
    walked = {how: partition_layers(costs, 16, PartitionOptions(tie_break=how)) for how in ("lexicographic", "variance")}
    monkeypatch.setattr(tiebreak_module, "PAIR_BUDGET", -1)
    # the windowed path must finish on its own, not fall back to the pair walk
    monkeypatch.setattr(partition_ties, "LISTING_LIMIT", 30_000)  # of ~69,000 tied pairs
    monkeypatch.setattr(tiebreak_module, "_exact_lexicographic", lambda *_: pytest.fail("fell back"))
    for level_budget in (0, 1000, 10**9):
        monkeypatch.setattr(partition_ties, "LEVEL_PAIR_BUDGET", level_budget)
        lex = partition_layers(costs, 16)
        assert sorted(lex.stage_times, reverse=True) == sorted(walked["lexicographic"].stage_times, reverse=True)
    spread = partition_layers(costs, 16, PartitionOptions(tie_break="variance"))
    assert sum(v * v for v in spread.stage_times) == pytest.approx(
        sum(v * v for v in walked["variance"].stage_times), rel=1e-12
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 100.0, allow_nan=False), min_size=2, max_size=9), st.integers(1, 5))
def test_real_valued_costs_match_brute_force(costs, num_stages):
    num_stages = min(num_stages, len(costs))
    result = partition_layers(costs, num_stages)
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    best = min(max(prefix[b[k + 1]] - prefix[b[k]] for k in range(num_stages)) for b in all_bounds(len(costs), num_stages))
    assert result.bottleneck == pytest.approx(best, rel=1e-12)


# ---------------------------------------------------------------------- memory
@st.composite
def memory_instances(draw):
    num_layers = draw(st.integers(1, 8))
    num_stages = draw(st.integers(1, num_layers))
    forward = draw(st.lists(st.integers(1, 4), min_size=num_layers, max_size=num_layers))
    profile = LayerProfile(
        forward,
        activation_bytes=draw(st.lists(st.integers(0, 5), min_size=num_layers, max_size=num_layers)),
        params=draw(st.lists(st.integers(0, 3), min_size=num_layers, max_size=num_layers)),
        first_extra=draw(st.sampled_from([0, 6])),
        last_extra=draw(st.sampled_from([0, 3])),
        first_extra_bytes=draw(st.sampled_from([0, 4])),
        last_extra_bytes=draw(st.sampled_from([0, 2])),
    )
    schedule = draw(st.sampled_from(["1f1b", "gpipe"]))
    micro = draw(st.integers(1, 6))
    capacity = draw(st.integers(4, 60))
    return profile, num_stages, schedule, micro, capacity


def brute_memory(profile, num_stages, inflight, bytes_per_param):
    """(time vector, memory vector) of every partition."""
    times = list(profile.total)
    out = []
    for bounds in all_bounds(profile.num_layers, num_stages):
        t = stage_values(times, bounds, profile.first_extra, profile.last_extra)
        m = [
            bytes_per_param * sum(profile.params[bounds[k] : bounds[k + 1]])
            + inflight[k] * sum(profile.activation_bytes[bounds[k] : bounds[k + 1]])
            for k in range(num_stages)
        ]
        m[0] += profile.first_extra_bytes
        m[-1] += profile.last_extra_bytes
        out.append((t, m))
    return out


@settings(max_examples=200, deadline=None)
@given(memory_instances())
def test_memory_is_respected_and_infeasibility_is_exact(instance):
    profile, num_stages, schedule, micro, capacity = instance
    inflight = [min(micro, num_stages - k) for k in range(num_stages)] if schedule == "1f1b" else [micro] * num_stages
    options = PartitionOptions(memory_capacity=capacity, bytes_per_param=2, schedule=schedule, num_microbatches=micro)
    candidates = brute_memory(profile, num_stages, inflight, 2)
    fitting = [sorted(t, reverse=True) for t, m in candidates if max(m) <= capacity]
    smallest = min(max(m) for _, m in candidates)
    if fitting:
        result = partition_layers(profile, num_stages, options)
        assert max(result.stage_memory) <= capacity
        assert list(result.inflight) == inflight
        assert sorted(result.stage_times, reverse=True) == min(fitting)
    else:
        with pytest.raises(InfeasiblePlanError) as caught:
            partition_layers(profile, num_stages, options)
        message = str(caught.value)
        assert caught.value.needed_bytes == pytest.approx(smallest)
        assert f"smallest capacity that fits is {gib(smallest, up=True)}," in message  # GiB, rounded up
        assert "needed by stage" in message
        # that capacity does fit
        partition_layers(profile, num_stages, replace(options, memory_capacity=smallest))


@settings(max_examples=150, deadline=None)
@given(memory_instances(), st.sampled_from(["lexicographic", "variance"]))
def test_windowed_tie_breaks_respect_memory(instance, tie_break):
    profile, num_stages, schedule, micro, capacity = instance
    inflight = [min(micro, num_stages - k) for k in range(num_stages)] if schedule == "1f1b" else [micro] * num_stages
    fitting = [(t, m) for t, m in brute_memory(profile, num_stages, inflight, 2) if max(m) <= capacity]
    if not fitting:
        return
    with windowed(0):
        result = partition_layers(profile, num_stages, PartitionOptions(
            memory_capacity=capacity, bytes_per_param=2, schedule=schedule, num_microbatches=micro, tie_break=tie_break))
    assert max(result.stage_memory) <= capacity
    optimum = min(max(t) for t, _ in fitting)
    assert result.bottleneck == optimum
    if tie_break == "lexicographic":
        assert sorted(result.stage_times, reverse=True) == min(sorted(t, reverse=True) for t, _ in fitting)
    else:
        assert sum(v * v for v in result.stage_times) == min(sum(v * v for v in t) for t, _ in fitting
                                                               if max(t) == optimum)


# ------------------------------------------------------------- memory per rank
@st.composite
def shared_rank_instances(draw):
    """Profiles on schedules with two stages per rank (zb-v: V, interleaved: round robin)."""
    schedule = draw(st.sampled_from(["zb-v", "interleaved"]))
    num_stages = 4 if schedule == "zb-v" else draw(st.sampled_from([4, 6]))
    num_layers = draw(st.integers(num_stages, 9))
    profile = LayerProfile(
        draw(st.lists(st.integers(1, 5), min_size=num_layers, max_size=num_layers)),
        activation_bytes=draw(st.lists(st.integers(0, 5), min_size=num_layers, max_size=num_layers)),
        params=draw(st.lists(st.integers(0, 3), min_size=num_layers, max_size=num_layers)),
        first_extra_bytes=draw(st.sampled_from([0, 4])),
    )
    micro = draw(st.integers(1, 6))
    return profile, num_stages, schedule, micro, draw(st.floats(0.8, 1.6))


def brute_per_rank(profile, num_stages, schedule, micro):
    """(rank memories, stage times) of every partition, and the placement."""
    plain = partition_layers(profile, num_stages, PartitionOptions(schedule=schedule, num_microbatches=micro, bytes_per_param=2))
    out = []
    for times, memory in brute_memory(profile, num_stages, plain.inflight, 2):
        out.append((pipeplan.partition.rank_totals(memory, plain.placement), times))
    return out, plain.placement


@settings(max_examples=80, deadline=None)
@given(shared_rank_instances(), st.booleans())
def test_capacity_is_per_rank_when_stages_share_a_rank(instance, exhaustive):
    profile, num_stages, schedule, micro, scale = instance
    everything, placement = brute_per_rank(profile, num_stages, schedule, micro)
    assert len(set(placement)) == num_stages // 2
    smallest = min(max(ranks) for ranks, _ in everything)
    capacity = max(smallest, 1.0) * scale
    fitting = [sorted(times, reverse=True) for ranks, times in everything if max(ranks) <= capacity]
    options = PartitionOptions(memory_capacity=capacity, bytes_per_param=2, schedule=schedule, num_microbatches=micro)
    with pytest.MonkeyPatch.context() as patch:
        if not exhaustive:  # the search over capacity splits, for problems too big to list
            patch.setattr(memory_module, "EXHAUSTIVE_LIMIT", -1)
        try:
            result = partition_layers(profile, num_stages, options)
        except InfeasiblePlanError as caught:
            message = str(caught)
            assert "per rank" in message and "needed by rank" in message
            if exhaustive:
                assert not fitting
                assert f"smallest capacity per rank that fits is {gib(smallest, up=True)}," in message
                assert caught.needed_bytes == pytest.approx(smallest)
            else:
                assert "found to fit is" in message
                assert caught.needed_bytes >= smallest * (1 - 1e-5)
            return
    assert fitting
    assert max(result.rank_memory) <= capacity * (1 + 1e-12)
    assert result.rank_memory == tuple(pipeplan.partition.rank_totals(result.stage_memory, placement))
    optimum = min(fitting)
    assert result.bottleneck >= optimum[0]
    if exhaustive:
        assert result.proven_optimal
        assert sorted(result.stage_times, reverse=True) == optimum
    elif result.proven_optimal:
        assert result.bottleneck == optimum[0]


def test_zb_v_fits_memory_per_rank_not_per_stage():
    # With two stages per rank (zb-v's V: stages 0+3 and 1+2) the
    # capacity is per GPU. Per stage, 56 GB admits (1, 6, 6, 5) layers with rank 1
    # holding 37.2 + 31.2 = 68.4 GB; per rank the solver must pick another split.
    rows = [(20, 4e9, 3e8)] + [(2, 1e9, 2e8)] * 16 + [(4, 5e8, 1e8)]
    profile = LayerProfile([r[0] for r in rows], activation_bytes=[r[1] for r in rows], params=[r[2] for r in rows])
    per_stage = partition_layers(profile, 4, PartitionOptions(schedule="1f1b", num_microbatches=8, memory_capacity=56e9))
    assert max(per_stage.rank_memory) <= 56e9
    result = partition_layers(profile, 4, PartitionOptions(schedule="zb-v", num_microbatches=8, memory_capacity=56e9))
    assert result.placement == (0, 1, 1, 0)
    assert max(result.rank_memory) <= 56e9
    assert result.rank_memory[1] == result.stage_memory[1] + result.stage_memory[2]
    assert result.bottleneck == 60.0 and result.proven_optimal
    with pytest.raises(InfeasiblePlanError, match=r"per rank .* needed by rank \d \(stage \d: layers"):
        partition_layers(profile, 4, PartitionOptions(schedule="zb-v", num_microbatches=8, memory_capacity=40e9))


def test_first_stage_holds_more_microbatches_under_1f1b():
    # Equal layers and activations: 1F1B's stage 0 holds P microbatches, the last
    # one, so a tight capacity pushes layers off the first stage.
    profile = LayerProfile.uniform(16, forward=1.0, activation_bytes=1.0)
    free = partition_layers(profile, 4, PartitionOptions(num_microbatches=8))
    assert free.layers_per_stage == (4, 4, 4, 4)
    assert free.stage_memory == (16.0, 12.0, 8.0, 4.0)
    tight = partition_layers(profile, 4, PartitionOptions(num_microbatches=8, memory_capacity=12))
    assert max(tight.stage_memory) <= 12
    assert tight.layers_per_stage[0] == 3
    with pytest.raises(InfeasiblePlanError, match="stage 0"):
        partition_layers(profile, 4, PartitionOptions(num_microbatches=8, memory_capacity=4))


@pytest.mark.parametrize("num_stages,micro", [(1, 1), (3, 2), (4, 8), (6, 3)])
def test_inflight_closed_forms_match_the_orders(num_stages, micro):
    for name, expected in (
        ("1f1b", tuple(min(micro, num_stages - p) for p in range(num_stages))),
        ("gpipe", (micro,) * num_stages),
    ):
        assert inflight_per_stage(name, num_stages, micro) == expected
        built = build_schedule(name, num_stages=num_stages, num_microbatches=micro)
        assert _inflight_from_orders(built) == expected
        timeline = simulate(built, pipeplan.StageCosts.uniform(num_stages))
        assert timeline.peak_inflight == expected


def test_inflight_of_other_schedules_comes_from_their_orders():
    counts = inflight_per_stage("interleaved", 4, 8, virtual_stages=2)
    built = build_schedule("interleaved", num_stages=4, num_microbatches=8, virtual_stages=2)
    per_rank = simulate(built, pipeplan.StageCosts.uniform(4)).peak_inflight
    for rank in range(built.num_ranks):
        assert sum(counts[s] for s in built.stages_of(rank)) >= per_rank[rank]
    assert len(inflight_per_stage("adaptive", 3, 4)) == 3


# ------------------------------------------------------------ schedule-aware
def test_step_time_objective_reports_both_and_never_loses():
    # Found by a random search over small instances: here one more layer on the
    # last stage and one fewer on the middle lowers the simulated 1F1B step.
    profile = LayerProfile([4, 1, 3, 5, 4, 4, 3, 4, 3, 5])
    proxy = partition_layers(profile, 3, PartitionOptions(num_microbatches=2))
    tuned = partition_layers(profile, 3, PartitionOptions(num_microbatches=2, objective="step_time"))
    assert tuned.step_time < proxy.step_time
    assert tuned.bottleneck >= proxy.bottleneck
    costs = profile.stage_costs(tuned.layers_per_stage)
    expected = simulate(build_schedule("1f1b", num_stages=3, num_microbatches=2), costs).makespan
    assert tuned.step_time == pytest.approx(expected)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=3, max_size=8), st.integers(2, 3), st.integers(1, 4))
def test_step_time_search_respects_memory(forward, num_stages, micro):
    num_stages = min(num_stages, len(forward))
    profile = LayerProfile(forward, activation_bytes=[1.0] * len(forward))
    capacity = float(math.ceil(len(forward) / num_stages) * min(micro, num_stages)) + 1
    try:
        proxy = partition_layers(profile, num_stages, PartitionOptions(num_microbatches=micro, memory_capacity=capacity))
    except InfeasiblePlanError:
        return
    tuned = partition_layers(
        profile, num_stages, PartitionOptions(num_microbatches=micro, memory_capacity=capacity, objective="step_time")
    )
    assert tuned.step_time <= proxy.step_time
    assert max(tuned.stage_memory) <= capacity


# ------------------------------------------------------------------ edges
def test_even_split():
    assert even_split(10, 4) == (3, 3, 2, 2)
    with pytest.raises(InvalidInputError):
        even_split(3, 4)


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        (([1.0, 2.0], 3), {}, "num_stages must be <= the number of layers"),
        (([1.0, float("nan")], 1), {}, "layer_costs\\[1\\] must be finite"),
        (([1.0, 2.0], 1), {"objective": "fast"}, "objective must be"),
        (([1.0, 2.0], 1), {"tie_break": "random"}, "tie_break must be"),
        (([1.0, 2.0], 0), {}, "num_stages must be >= 1"),
        (([1.0, 2.0], 1), {"memory_capacity": -1}, "memory_capacity"),
    ],
)
def test_bad_input_names_the_field(args, kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        partition_layers(*args, PartitionOptions(**kwargs))


def test_ten_thousand_layers_into_128_stages_is_optimal():
    # Its speed (target under 1 s) is benchmarks/partition_speed.py's "random" case, recorded in docs/partition.md.
    rng = np.random.default_rng(0)
    costs = rng.uniform(0.5, 2.0, 10_000).tolist()
    result = partition_layers(costs, 128)
    assert sum(result.layers_per_stage) == 10_000 and min(result.layers_per_stage) >= 1
    # optimality certificate: nothing below the bottleneck is feasible
    problem = problem_module.MinMaxProblem([np.concatenate([[0.0], np.cumsum(costs)])] * 128, np.zeros(128))
    assert problem.check(result.bottleneck)[0]
    assert not problem.check(np.nextafter(result.bottleneck, 0))[0]


def test_even_rank_capacity_fits_every_rank_in_one_solve():
    # four chunks on two ranks (interleaved v=2); memory binds so the per-stage relaxation
    # does not fit per rank: "even" splits each rank's capacity over its stages
    profile = LayerProfile([1.0] * 12, params=[3e6] + [1e6] * 11, activation_bytes=[4e5] + [1e5] * 11)
    interleaved = PartitionOptions(schedule="interleaved", schedule_options={"virtual_stages": 2}, num_microbatches=4)
    loose = partition_layers(profile, 4, interleaved)
    capacity = 0.99 * max(loose.rank_memory)
    exact = partition_layers(profile, 4, replace(interleaved, memory_capacity=capacity))
    even = partition_layers(profile, 4, replace(interleaved, memory_capacity=capacity, rank_capacity="even"))
    assert max(even.rank_memory) <= capacity and max(exact.rank_memory) <= capacity
    assert even.bottleneck >= exact.bottleneck and not even.proven_optimal
    with pytest.raises(InfeasiblePlanError, match="split evenly over its stages"):
        partition_layers(profile, 4, replace(interleaved, memory_capacity=0.5 * capacity, rank_capacity="even"))
    with pytest.raises(InvalidInputError, match="rank_capacity must be"):
        partition_layers(profile, 4, PartitionOptions(rank_capacity="odd"))


def test_in_flight_counts_are_cached_per_factory_and_per_value_type(monkeypatch):
    from pipeplan.partition import inflight_per_stage
    from pipeplan.schedules import SCHEDULES, register_schedule
    from pipeplan.schedules.gpipe import gpipe
    from pipeplan.schedules.one_f_one_b import one_f_one_b

    monkeypatch.setitem(SCHEDULES, "cached-test", one_f_one_b)
    assert inflight_per_stage("cached-test", 4, 8, backward="full") == (4, 3, 2, 1)
    register_schedule("cached-test", gpipe)  # the same name, another order: built anew
    assert inflight_per_stage("cached-test", 4, 8, backward="full") == (8, 8, 8, 8)
    assert inflight_per_stage("interleaved", 4, 4, virtual_stages=1) == (4, 3, 2, 1)
    with pytest.raises(InvalidInputError, match="virtual_stages must be an integer"):
        inflight_per_stage("interleaved", 4, 4, virtual_stages=True)  # not the cached answer for 1
