"""Closed forms, each tied to the simulator."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeplan import InvalidInputError, StageCosts, analytic, build_schedule, simulate


def test_lesson16_numbers():
    # Lesson 16, scene 1: [30, 10, 10, 20], m = 8 -> 280 ms and 50 % bubble.
    assert analytic.forward_makespan([30, 10, 10, 20], 8) == 280.0
    assert analytic.asymmetric_forward_bubble([30, 10, 10, 20], 8) == pytest.approx(0.5)
    assert analytic.asymmetric_bubble_limit([30, 10, 10, 20]) == pytest.approx(1 - 17.5 / 30)


def test_seed003_uniform_numbers():
    # Seed 003: M = 8, N = 4 gives 27 %; M = 64, N = 4 gives 4.5 %.
    assert analytic.uniform_bubble(4, 8) == pytest.approx(3 / 11)
    assert round(analytic.uniform_bubble(4, 64), 3) == 0.045


@given(st.lists(st.floats(0.5, 50.0), min_size=1, max_size=8))
def test_asymmetric_bubble_tends_to_its_limit_in_simulation(times):
    limit = analytic.asymmetric_bubble_limit(times)
    previous = None
    for m in (1, 10, 100, 1000):
        timeline = simulate(build_schedule("gpipe", num_stages=len(times), num_microbatches=m, backward="none"),
                            StageCosts(times), validate=False)
        assert timeline.bubble_ratio >= limit - 1e-9
        if previous is not None:
            assert timeline.bubble_ratio <= previous + 1e-9
        previous = timeline.bubble_ratio
    assert previous - limit <= len(times) / 1000 + 1e-9


def test_korthikanti_activation_formula():
    # s = 2048, b = 1, h = 4096, a = 32, one layer: sbh(34 + 5as/h) = 2048*4096*(34 + 80).
    assert analytic.activation_bytes_per_microbatch(
        seq_len=2048, micro_batch_size=1, hidden_size=4096, num_layers=1, num_heads=32
    ) == 2048 * 4096 * (34 + 5 * 32 * 2048 / 4096)


@given(st.integers(1, 10), st.integers(1, 30), st.floats(1e3, 1e9))
def test_one_f_one_b_activation_bytes_match_simulated_peak(stages, microbatches, per_microbatch):
    costs = StageCosts([1.0] * stages, activation_bytes=[per_microbatch] * stages)
    timeline = simulate(build_schedule("1f1b", num_stages=stages, num_microbatches=microbatches), costs)
    for stage in range(stages):
        assert math.isclose(timeline.peak_bytes[stage],
                            analytic.one_f_one_b_activation_bytes(stage, stages, microbatches, per_microbatch),
                            rel_tol=1e-12)


def test_lower_bound_is_tight_for_a_single_stage():
    schedule = build_schedule("1f1b", num_stages=1, num_microbatches=5)
    costs = StageCosts([2.0], [3.0])
    assert analytic.makespan_lower_bound(schedule, costs) == simulate(schedule, costs).makespan == 25.0


@pytest.mark.parametrize("call", [
    lambda: analytic.uniform_bubble(0, 4),
    lambda: analytic.forward_makespan([1, float("nan")], 2),
    lambda: analytic.one_f_one_b_peak_inflight(4, 4, 8),
])
def test_bad_input_raises(call):
    with pytest.raises(InvalidInputError):
        call()
