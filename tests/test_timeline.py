"""Timeline metrics: memory with a split backward, measured gaps, JSON export."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeplan import Action, IdleCause, InvalidInputError, Schedule, StageCosts, Timeline, build_schedule, simulate


def test_split_backward_keeps_the_weight_stash_until_w():
    # One stage, one microbatch: F [0,1], I [1,2], W [2,3]. Activation 10 bytes, 4 kept for W.
    schedule = Schedule([[Action("F", 0, 0), Action("I", 0, 0), Action("W", 0, 0)]], [0], 1)
    costs = StageCosts([1.0], [2.0], [1.0], activation_bytes=[10.0], weight_stash_bytes=[4.0])
    timeline = simulate(schedule, costs)
    trace = timeline.memory(0)
    assert list(trace.times) == [0.0, 1.0, 2.0, 3.0]
    assert list(trace.bytes) == [0.0, 10.0, 4.0, 0.0]
    assert list(trace.inflight) == [0.0, 1.0, 1.0, 0.0]
    assert timeline.peak_bytes == (10.0,)


def test_forward_only_holds_nothing():
    timeline = simulate(build_schedule("gpipe", num_stages=2, num_microbatches=3, backward="none"),
                        StageCosts([1.0, 1.0]))
    assert timeline.peak_inflight == (0, 0)


def test_measured_gaps_with_no_remote_cause_are_overhead():
    # A measured timeline: rank 0 pauses between two local forwards (Python overhead, data loading).
    schedule = Schedule([[Action("F", 0, 0), Action("F", 0, 1), Action("B", 0, 0), Action("B", 0, 1)]], [0], 2)
    timeline = Timeline(schedule, [0.0, 1.5, 2.5, 3.5], [1.0, 2.5, 3.5, 4.5], source="measured")
    causes = [(iv.cause, iv.start, iv.end) for iv in timeline.idle_intervals()]
    assert causes == [(IdleCause.OVERHEAD, 1.0, 1.5)]
    assert timeline.bubble_ratio == pytest.approx(0.5 / 4.5)


def test_timeline_shape_is_checked():
    schedule = build_schedule("1f1b", num_stages=2, num_microbatches=2)
    with pytest.raises(InvalidInputError, match=r"start has shape \(3,\), expected \(8,\)"):
        Timeline(schedule, np.zeros(3), np.zeros(8))


def test_to_dict_is_json_and_complete():
    timeline = simulate(build_schedule("1f1b", num_stages=3, num_microbatches=4), StageCosts([3, 1, 2]))
    payload = json.loads(json.dumps(timeline.to_dict()))
    assert payload["makespan"] == timeline.makespan
    assert len(payload["actions"]) == timeline.schedule.num_actions
    assert {r["rank"] for r in payload["ranks"]} == {0, 1, 2}
    assert sum(iv["end"] - iv["start"] for iv in payload["idle"]) == pytest.approx(
        3 * timeline.makespan - timeline.busy.sum())


def test_span_bubble_rate_for_equal_stages_is_the_papers():
    # Zero-bubble paper: (cost - m(F+B+W)) / cost with cost the longest per-rank span.
    stages, m = 4, 8
    timeline = simulate(build_schedule("1f1b", num_stages=stages, num_microbatches=m, backward="split"),
                        StageCosts.uniform(stages, forward=1.0, backward=2.0, weight=1.0))
    cost = timeline.spans.max()
    assert timeline.span_bubble_rate == pytest.approx((cost - m * 3.0) / cost)


def test_a_step_without_idle_time_has_no_negative_bubble():
    # newcomer walk: `partition --preset openvla-7b --stages 1` printed "bubble -0.00%" (the sum's rounding)
    import pipeplan

    costs = pipeplan.StageCosts([0.1 + 0.2] * 1)
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=1, num_microbatches=7), costs)
    assert timeline.bubble_ratio == 0.0 and f"{timeline.bubble_ratio:.2%}" == "0.00%"
