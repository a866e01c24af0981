"""pipeplan.predict.compare on synthetic timelines (numpy only, no torch)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeplan
from pipeplan import Action, InvalidInputError, Schedule, StageCosts, Timeline, compare


def _schedule() -> Schedule:
    return pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=3)


def test_identical_timelines_have_zero_error() -> None:
    predicted = pipeplan.simulate(_schedule(), StageCosts(forward=[1, 2]))
    measured = Timeline(predicted.schedule, predicted.start, predicted.end, source="measured")
    result = compare(predicted, measured)
    assert result.makespan_error == 0
    assert result.makespan_relative_error == 0
    assert np.all(result.start_error == 0) and np.all(result.duration_error == 0)
    assert "error +0.000 ms (+0.0%)" in result.report()
    assert "error +0.000 (+0.0%)" in result.report(unit="")  # a timeline in other units says none


def test_shifted_measurement_errors_are_predicted_minus_measured() -> None:
    predicted = pipeplan.simulate(_schedule(), StageCosts(forward=[1, 2]))
    # every action measured 0.5 later and 10% longer
    durations = predicted.end - predicted.start
    start = predicted.start + 0.5
    measured = Timeline(predicted.schedule, start, start + 1.1 * durations, source="measured")
    result = compare(predicted, measured)
    np.testing.assert_allclose(result.start_error, -0.5)
    np.testing.assert_allclose(result.duration_error, -0.1 * durations)
    assert result.measured_makespan == pytest.approx(measured.makespan)
    assert result.makespan_error == pytest.approx(predicted.makespan - measured.makespan)
    assert result.makespan_relative_error == pytest.approx(
        (predicted.makespan - measured.makespan) / measured.makespan
    )
    assert result.by_kind()["F"]["count"] == 6
    worst_rank, worst_action, worst_error = result.worst(1)[0]
    assert worst_error == pytest.approx(float(np.min(result.end_error)))


def test_matching_is_by_action_not_position() -> None:
    # rank 0 runs F0 F1 B0 B1 in one timeline and F0 B0 F1 B1 in the other
    a = Schedule([[("F", 0, 0), ("F", 0, 1), ("B", 0, 0), ("B", 0, 1)]], [0], 2)
    b = Schedule([[("F", 0, 0), ("B", 0, 0), ("F", 0, 1), ("B", 0, 1)]], [0], 2)
    predicted = Timeline(a, [0, 1, 2, 3], [1, 2, 3, 4])
    measured = Timeline(b, [0, 1, 2, 3], [1, 2, 3, 4], source="measured")
    result = compare(predicted, measured)
    # measured order F0 B0 F1 B1: B0 was predicted at 2, measured at 1
    assert result.actions == (Action("F", 0, 0), Action("B", 0, 0), Action("F", 0, 1), Action("B", 0, 1))
    np.testing.assert_allclose(result.start_error, [0, 1, -1, 0])


def test_mismatched_schedules_are_rejected() -> None:
    predicted = pipeplan.simulate(_schedule(), StageCosts(forward=[1, 2]))
    other = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=4),
                              StageCosts(forward=[1, 2]))
    with pytest.raises(InvalidInputError, match="different schedules"):
        compare(predicted, other)
    with pytest.raises(InvalidInputError, match="must be a Timeline"):
        compare(predicted, "measured")  # type: ignore[arg-type]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.1, 10), min_size=2, max_size=2), st.floats(0.5, 2.0))
def test_uniform_slowdown_scales_makespan_error(forward: list[float], factor: float) -> None:
    predicted = pipeplan.simulate(_schedule(), StageCosts(forward=forward))
    measured = Timeline(predicted.schedule, predicted.start * factor, predicted.end * factor, source="measured")
    result = compare(predicted, measured)
    assert result.makespan_relative_error == pytest.approx(1 / factor - 1, rel=1e-9, abs=1e-12)
