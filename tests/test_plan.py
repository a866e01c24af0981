"""The one Plan type: the partitioner's and the chunk placement's answers are Plans."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import InvalidInputError, PartitionOptions, partition_layers
from pipeplan.layers import LayerProfile
from pipeplan.partition import ChunkPlacement, PartitionResult, place_chunks
from pipeplan.plan import Plan, as_plan
from pipeplan import engines

#: what PartitionResult.to_dict() and ChunkPlacement.to_dict() gave before they became Plans
PARTITION_KEYS = ["layers_per_stage", "boundaries", "stage_times", "stage_memory", "placement", "num_ranks",
                  "rank_memory", "inflight", "bottleneck", "step_time", "schedule", "num_microbatches",
                  "objective", "tie_break", "proven_optimal"]
PLACEMENT_KEYS = ["layers_per_stage", "placement", "stage_times", "rank_loads", "max_load", "lower_bound"]


def test_planner_names_are_the_core_ones():
    import pipeplan.planner as planner

    assert planner.Plan is Plan and planner.as_plan is as_plan


def test_partition_result_is_a_plan_with_its_derived_fields():
    profile = LayerProfile.from_costs([2.0] * 32)
    result = partition_layers(profile, 4, PartitionOptions(schedule="interleaved", num_microbatches=8,
                                                           schedule_options={"virtual_stages": 2}))
    assert isinstance(result, Plan) and as_plan(result) is result
    assert (result.pp, result.dp, result.num_ranks, result.num_stages) == (2, 1, 2, 4)
    assert result.schedule_options == {"virtual_stages": 2} and result.virtual_stages == 2
    assert result.pipeline_time == result.step_time is not None
    assert result.layer_names == profile.names
    assert result.placement == (0, 1, 0, 1)
    assert list(result.to_dict()) == PARTITION_KEYS


def test_partition_result_keeps_its_constructor():
    result = PartitionResult(layers_per_stage=(2, 3), stage_times=(1.0, 1.5))
    assert result.placement == (0, 1) and result.pp == 2 and result.num_ranks == 2
    assert result.layer_names == () and result.schedule_options == {} and result.rank_memory == ()
    assert list(result.to_dict()) == PARTITION_KEYS
    hash(result)  # hashable, as before it was a Plan
    shared = dataclasses.replace(result, placement=(0, 0), stage_memory=(1.0, 2.0), schedule="interleaved")
    assert shared.pp == 1 and shared.rank_memory == (3.0,) and shared.schedule_options == {"virtual_stages": 2}
    with pytest.raises(InvalidInputError, match="placement"):
        PartitionResult(layers_per_stage=(2, 3), stage_times=(1.0, 1.5), placement=(0, 2))
    with pytest.raises(TypeError):
        PartitionResult(layers_per_stage=(2, 3), stage_times=(1.0, 1.5), pp=2)  # derived, not given


def test_chunk_placement_is_a_plan():
    looped = ChunkPlacement(layers_per_stage=(2, 2, 2, 2), placement=(0, 1, 0, 1), stage_times=(1.0,) * 4,
                            rank_loads=(2.0, 2.0), lower_bound=2.0)
    assert isinstance(looped, Plan) and as_plan(looped) is looped
    assert (looped.pp, looped.dp, looped.schedule, looped.schedule_options) == (2, 1, "interleaved",
                                                                                {"virtual_stages": 2})
    v_shape = dataclasses.replace(looped, placement=(0, 1, 1, 0))
    assert (v_shape.schedule, v_shape.schedule_options) == ("custom", {})
    assert list(looped.to_dict()) == PLACEMENT_KEYS
    hash(looped)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.5, 8.0), min_size=6, max_size=16), st.integers(1, 3), st.integers(1, 2),
       st.sampled_from(["free", "interleaved", "v"]))
def test_placements_export_as_their_plan(costs, ranks, per_rank, pattern):
    """A ChunkPlacement and the plain Plan of its fields export the same (what as_plan used to build)."""
    placement = place_chunks(costs, ranks, per_rank, pattern=pattern)
    plain = Plan(pp=placement.num_ranks, dp=1, layers_per_stage=placement.layers_per_stage,
                 placement=placement.placement, schedule=placement.schedule,
                 schedule_options=placement.schedule_options)
    assert engines.plan_exports(placement) == engines.plan_exports(plain)
    assert Plan.to_dict(placement) == plain.to_dict()


def test_as_plan_of_layer_counts():
    plan = as_plan([3, 11, 11, 7])
    assert type(plan) is Plan and plan.placement == (0, 1, 2, 3) and plan.pp == 4
    for bad in ("3,4", [0, 2], [True, 2], 5):
        with pytest.raises(InvalidInputError):
            as_plan(bad)  # type: ignore[arg-type]


def test_a_plan_converts_its_own_times_to_milliseconds():
    in_ms = dataclasses.replace(as_plan([2, 2]), step_time=3.0)
    in_seconds = dataclasses.replace(in_ms, time_unit=1.0)
    assert in_ms.milliseconds(3.0) == 3.0 and in_ms.milliseconds(None) == 0.0
    assert in_seconds.milliseconds(in_seconds.step_time) == 3000.0 and in_seconds.step_seconds == 3.0
