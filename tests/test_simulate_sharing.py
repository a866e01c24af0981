"""Ranks sharing cores (``simulate(..., slowdown=...)``): against a core per rank, and hand-worked cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pipeplan
from pipeplan.costs import CommModel, StageCosts
from pipeplan.errors import InvalidInputError

_SHAPES = [("gpipe", 3, {}), ("1f1b", 4, {}), ("interleaved", 4, {"virtual_stages": 2}), ("zb-h1", 3, {}),
           ("zb-h2", 2, {}), ("zb-v", 4, {})]


@given(shape=st.sampled_from(_SHAPES), microbatches=st.integers(1, 6),
       costs=st.lists(st.tuples(st.floats(0.1, 10), st.floats(0.2, 20), st.floats(0, 5)), min_size=8, max_size=8),
       latency=st.floats(0, 2))
def test_without_sharing_it_is_the_exact_simulator(shape, microbatches, costs, latency):
    name, ranks, options = shape
    num_stages = ranks * 2 if name in ("interleaved", "zb-v") else ranks
    schedule = pipeplan.build_schedule(name, num_stages=num_stages, num_microbatches=microbatches, **options)
    stage_costs = StageCosts([c[0] for c in costs[:num_stages]], [c[1] for c in costs[:num_stages]],
                             backward_input=[c[2] for c in costs[:num_stages]],
                             weight=[c[2] / 2 for c in costs[:num_stages]])
    comm = CommModel(latency=latency)
    exact = pipeplan.simulate(schedule, stage_costs, comm)
    shared = pipeplan.simulate(schedule, stage_costs, comm, slowdown=(1.0, 1.0, 1.0))
    np.testing.assert_allclose(shared.start, exact.start, atol=1e-9)
    np.testing.assert_allclose(shared.end, exact.end, atol=1e-9)


def test_two_ranks_on_one_core_take_turns_at_half_speed():
    # Two independent single-stage pipelines would be cleaner, but one schedule with
    # two ranks that compute at the same time is what the runtime meets: in 1F1B with
    # equal stages rank 1's F(0) overlaps rank 0's F(1) exactly.
    schedule = pipeplan.build_schedule("gpipe", num_stages=2, num_microbatches=2, backward="none")
    costs = StageCosts([1.0, 1.0])
    alone = pipeplan.simulate(schedule, costs, slowdown=(1.0, 2.0))
    # F0 on rank 0 runs alone [0, 1]; then rank 0's F1 and rank 1's F0 share: both take 2; then rank 1's F1 alone.
    assert alone.start.tolist() == [0.0, 1.0, 1.0, 3.0]
    assert alone.end.tolist() == [1.0, 3.0, 3.0, 4.0]


def test_a_slower_table_never_makes_a_step_faster():
    schedule = pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8)
    costs = StageCosts([3.0, 1.0, 1.0, 2.0])
    spans = [pipeplan.simulate(schedule, costs, slowdown=(1.0, f, f, f)).makespan for f in (1.0, 1.5, 2.0, 3.0)]
    assert spans == sorted(spans) and spans[-1] > spans[0]
    # never slower than doing all the work on one core
    total = sum(d for d in (3.0, 1.0, 1.0, 2.0)) * 3 * 8
    assert spans[-1] <= total * 3.0 / 1.0


def test_bad_inputs():
    schedule = pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=2)
    with pytest.raises(InvalidInputError, match="eager"):
        pipeplan.simulate(schedule, StageCosts([1, 1]), CommModel(send_mode="rendezvous"), slowdown=(1.0,))
    with pytest.raises(InvalidInputError, match=r"slowdown\[0\] must be 1"):
        pipeplan.simulate(schedule, StageCosts([1, 1]), slowdown=(2.0,))
    with pytest.raises(InvalidInputError, match="stages"):
        pipeplan.simulate(schedule, StageCosts([1, 1, 1]), slowdown=(1.0,))


def test_sharing_plays_several_steps_like_one_core_per_rank_without_slowdown():
    schedule = pipeplan.build_schedule("1f1b", num_stages=3, num_microbatches=4)
    costs = StageCosts([3.0, 1.0, 2.0])
    for optimizer in ("barrier", "overlap"):
        exact = pipeplan.simulate(schedule, costs, iterations=3, optimizer=optimizer)
        shared = pipeplan.simulate(schedule, costs, iterations=3, optimizer=optimizer, slowdown=(1.0,))
        np.testing.assert_allclose(shared.rank_step_ends, exact.rank_step_ends, atol=1e-9)
        slower = pipeplan.simulate(schedule, costs, iterations=3, optimizer=optimizer, slowdown=(1.0, 2.0))
        assert slower.steady_step_time > exact.steady_step_time


def test_both_simulators_charge_a_measured_split_as_measured():
    """With ``backward_input`` given, I costs it (not backward − weight) in both simulators."""
    schedule = pipeplan.build_schedule("zb-h1", num_stages=2, num_microbatches=2)
    costs = StageCosts([1.0, 1.0], [1.0, 1.0], [0.75, 0.75], backward_input=[0.0, 0.6])
    for timeline in (pipeplan.simulate(schedule, costs), pipeplan.simulate(schedule, costs, slowdown=(1.0,))):
        for record in timeline.records():
            expected = costs.duration(record.action.kind, record.action.stage, record.action.microbatch)
            assert record.end - record.start == pytest.approx(expected)
        assert {round(r.end - r.start, 6) for r in timeline.records() if r.action.kind == "I"} == {0.0, 0.6}
