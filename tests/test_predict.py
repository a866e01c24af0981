"""Predicting the runtime from a profile: what it charges, and the calibration mode."""

from __future__ import annotations

import numpy as np
import pytest

import pipeplan
from pipeplan.calibration import Calibration
from pipeplan.layers import LayerProfile
from pipeplan.predict import costs_as_run, fit_kind_factors, predict, scale_profile
from pipeplan.timeline import Timeline


def profile(calibration: Calibration | None = None) -> LayerProfile:
    return LayerProfile([2.0, 1.0, 1.0, 3.0], [3.0, 2.0, 2.0, 4.0], [3.0, 1.2, 1.2, 1.0],
                        backward_input=[0.0, 1.5, 1.5, 3.5], send_bytes=[1000.0, 2000.0, 3000.0, 0.0],
                        calibration=calibration)


def test_prediction_charges_the_calibrated_messages_and_core_sharing():
    calibration = Calibration(latency=0.5, bandwidth=1000.0, slowdown=(1.0, 1.6))
    schedule = pipeplan.build_schedule("zb-h1", num_stages=2, num_microbatches=4)
    timeline = predict(profile(calibration), schedule, [2, 2])
    costs = profile().stage_costs([2, 2])
    expected = pipeplan.simulate(schedule, costs, pipeplan.CommModel(latency=0.5, bandwidth=1000.0,
                                                                     boundary_bytes=[2000.0]), slowdown=(1.0, 1.6))
    np.testing.assert_array_equal(timeline.end, expected.end)
    free = predict(profile(), schedule, [2, 2])  # no calibration: free messages, a core per rank
    assert free.makespan == pipeplan.simulate(schedule, costs).makespan
    assert timeline.makespan > free.makespan


def test_checkpointing_moves_the_weight_half_into_i():
    costs = costs_as_run(profile().stage_costs([2, 2]), True)
    assert costs.weight == (0.0, 0.0)
    assert costs.backward_input == pytest.approx((3.0 + 5.0, 6.0 + 4.0))


def _scaled_timeline(timeline: Timeline, factors: dict[str, float]) -> Timeline:
    """The same actions with each duration scaled by its kind's factor (starts kept)."""
    kinds = np.array([a.kind for order in timeline.schedule.orders for a in order])
    scale = np.array([factors[k] for k in kinds])
    return Timeline(timeline.schedule, timeline.start, timeline.start + (timeline.end - timeline.start) * scale,
                    source="measured")


def test_calibration_recovers_per_kind_factors_and_scales_the_profile():
    schedule = pipeplan.build_schedule("zb-h1", num_stages=2, num_microbatches=4)
    predicted = predict(profile(), schedule, [2, 2])
    factors = fit_kind_factors(predicted, _scaled_timeline(predicted, {"F": 1.5, "I": 0.8, "W": 2.0}))
    assert factors == pytest.approx({"F": 1.5, "I": 0.8, "W": 2.0})
    scaled = scale_profile(profile(), factors)
    assert scaled.forward == pytest.approx([3.0, 1.5, 1.5, 4.5])
    assert scaled.backward_input == pytest.approx([0.0, 1.2, 1.2, 2.8])
    assert scaled.weight == pytest.approx([6.0, 2.4, 2.4, 2.0])
    # the full backward takes the time-weighted mean of the two halves' factors
    assert scaled.backward[1] == pytest.approx(2.0 * (0.8 * 1.5 + 2.0 * 1.2) / 2.7)
    again = predict(scaled, schedule, [2, 2])
    durations = again.end - again.start
    wanted = _scaled_timeline(predicted, factors).end - predicted.start
    actions = [a for order in schedule.orders for a in order]
    later = np.array([a.stage == 1 or a.kind != "W" for a in actions])
    np.testing.assert_allclose(durations[later], wanted[later])
    # stage 0's W is its whole backward (its input is data), scaled like the full backward
    w0 = [d for d, a in zip(durations, actions) if a == ("W", 0, 0)][0]
    assert w0 == pytest.approx(scaled.backward[0] + scaled.backward[1])
