"""The adaptive schedule: never slower than a fitting template, within the limit, any placement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import (
    CommModel,
    DeadlockError,
    InfeasiblePlanError,
    InvalidInputError,
    StageCosts,
    analytic,
    build_schedule,
    simulate,
)
from pipeplan.schedules.adaptive import adaptive, adaptive_candidates, list_schedule, minimum_memory_limit
from pipeplan.schedules.list_scheduler import KIND_ORDERS
from pipeplan.schedules.zb_v import zb_v_placement

_SLACK = 1e-6


def _template_runs(num_stages, microbatches, costs, comm, placement, backward):
    """(name, timeline) of every fixed template for this placement, built independently."""
    ranks = max(placement) + 1
    names = []
    if list(placement) == list(range(num_stages)):
        names += [("gpipe", {}), ("1f1b", {})]
        if backward == "split":
            names += [("zb-h1", {}), ("zb-h2", {})]
    if num_stages > ranks and list(placement) == [s % ranks for s in range(num_stages)]:
        names.append(("interleaved", {"virtual_stages": num_stages // ranks}))
    if backward == "split" and num_stages == 2 * ranks and list(placement) == zb_v_placement(ranks):
        names.append(("zb-v", {}))
    runs = []
    for name, options in names:
        if name not in ("zb-h1", "zb-h2", "zb-v"):
            options = {**options, "backward": backward}
        schedule = build_schedule(name, num_stages=num_stages, num_microbatches=microbatches, **options)
        try:
            runs.append((name, simulate(schedule, costs, comm)))
        except DeadlockError:
            # Blocking sends can deadlock a template (ZB-H2 with P = 2, m = 4 does):
            # it then fits no budget and sets no floor.
            continue
    return runs


@st.composite
def problems(draw):
    ranks = draw(st.integers(1, 6))
    layout = draw(st.sampled_from(["one", "looped", "v"]))
    if layout == "one":
        placement = list(range(ranks))
    elif layout == "looped":
        placement = [s % ranks for s in range(2 * ranks)]
    else:
        placement = zb_v_placement(ranks)
    num_stages = len(placement)
    microbatches = draw(st.integers(1, 12))
    times = st.floats(0.5, 10.0, allow_nan=False)
    forward = draw(st.lists(times, min_size=num_stages, max_size=num_stages))
    backward = [f * draw(st.floats(1.2, 3.0)) for f in forward]
    weight = [b * draw(st.floats(0.1, 0.6)) for b in backward]
    costs = StageCosts(forward, backward, weight)
    comm = draw(st.sampled_from([None, CommModel(latency=0.3), CommModel(latency=0.3, send_mode="rendezvous")]))
    mode = draw(st.sampled_from(["split", "full"]))
    smallest = minimum_memory_limit(costs, placement)
    limit = draw(st.one_of(st.none(), st.floats(smallest, smallest + 2 * ranks + 2)))
    objective = draw(st.sampled_from(["makespan", "span"]))
    effort = draw(st.sampled_from(["full", "fast"]))
    return num_stages, microbatches, costs, comm, placement, mode, limit, objective, effort


def _objective(timeline, objective):
    return timeline.makespan if objective == "makespan" else float(timeline.spans.max())


@settings(max_examples=60, deadline=None)
@given(problems())
def test_never_worse_than_a_template_that_fits_and_within_the_limit(problem):
    num_stages, microbatches, costs, comm, placement, mode, limit, objective, effort = problem
    schedule = adaptive(num_stages, microbatches, costs=costs, comm=comm, memory_limit=limit,
                        placement=placement, backward=mode, objective=objective, effort=effort)
    schedule.validate()
    assert schedule.name == "adaptive"
    # A split request may come back as a full backward when that is faster (rendezvous).
    assert schedule.backward == mode or (mode == "split" and schedule.backward == "full")
    assert schedule.placement == tuple(placement)
    timeline = simulate(schedule, costs, comm)
    if limit is not None:
        assert max(timeline.peak_bytes) <= limit + _SLACK
    assert timeline.makespan >= analytic.makespan_lower_bound(schedule, costs, comm) - _SLACK
    modes = ("split", "full") if mode == "split" else ("full",)
    for template_mode in modes:
        for name, template in _template_runs(num_stages, microbatches, costs, comm, placement, template_mode):
            if limit is None or max(template.peak_bytes) <= limit + _SLACK:
                assert _objective(timeline, objective) <= _objective(template, objective) * (1 + 1e-9) + _SLACK, (
                    name, template_mode)


def test_beats_every_template_on_lesson_16_dumbbell_under_a_tight_limit():
    # Lesson 16's stages [30, 10, 10, 20], backward 2x, W a third of it, 8 microbatches.
    # With 6 microbatches per rank ZB-H2 (needs 7) does not fit; 1F1B and ZB-H1 take
    # 723.3. The list scheduler reaches the lower bound, stage 0's work 8·90 = 720.
    forward = [30.0, 10.0, 10.0, 20.0]
    costs = StageCosts(forward, [2 * f for f in forward], [2 * f / 3 for f in forward])
    schedule = adaptive(4, 8, costs=costs, memory_limit=6)
    timeline = simulate(schedule, costs)
    assert timeline.makespan == pytest.approx(720.0)
    assert max(timeline.peak_inflight) <= 6
    templates = dict(_template_runs(4, 8, costs, None, list(range(4)), "split"))
    assert templates["1f1b"].makespan == pytest.approx(723.0 + 1 / 3)
    assert max(templates["zb-h2"].peak_inflight) == 7


def test_blocking_sends_keep_the_full_backward_floor():
    # Review repro: lesson 16's dumbbell, 5 ms blocking sends. A split rank blocks in the
    # send of its B before it can run W; 1F1B with a full backward takes 815 ms.
    costs = StageCosts([30.0, 10.0, 10.0, 20.0])
    comm = CommModel(latency=5.0, send_mode="rendezvous")
    one_f_one_b = simulate(build_schedule("1f1b", num_stages=4, num_microbatches=8), costs, comm)
    schedule = adaptive(4, 8, costs=costs, comm=comm)
    assert simulate(schedule, costs, comm).makespan <= one_f_one_b.makespan + _SLACK
    assert schedule.backward == "full"  # here no split order beats the full-backward floor


def test_any_placement_works():
    # Ranks holding non-adjacent stages in no template's pattern.
    forward = [4.0, 1.0, 2.0, 3.0, 1.0, 2.0]
    costs = StageCosts(forward)
    placement = [0, 1, 1, 2, 0, 2]
    schedule = adaptive(6, 5, costs=costs, placement=placement, memory_limit=4)
    schedule.validate()
    timeline = simulate(schedule, costs)
    assert max(timeline.peak_bytes) <= 4
    assert schedule.stages_of(0) == (0, 4)
    # A numpy placement (as a partition solver may return) is accepted too.
    again = adaptive(6, 5, costs=costs, placement=np.array(placement), memory_limit=4)
    assert again.orders == schedule.orders


def test_limit_below_the_minimum_names_the_smallest_that_works():
    # Rank 0 holds stages 0 and 3: one microbatch's activations there are 2 + 5 = 7 bytes.
    costs = StageCosts([1.0] * 4, activation_bytes=[2.0, 1.0, 1.0, 5.0])
    with pytest.raises(InfeasiblePlanError, match="smallest limit that works is 7"):
        adaptive(4, 4, costs=costs, placement=[0, 1, 1, 0], memory_limit=6.5)
    schedule = adaptive(4, 4, costs=costs, placement=[0, 1, 1, 0], memory_limit=7)
    assert max(simulate(schedule, costs).peak_bytes) <= 7


def test_minimum_limit_runs_one_microbatch_at_a_time():
    costs = StageCosts([3.0, 1.0, 2.0])
    schedule = adaptive(3, 4, costs=costs, memory_limit=1, backward="full")
    timeline = simulate(schedule, costs)
    assert timeline.peak_inflight == (1, 1, 1)
    # Nothing overlaps: every microbatch pays the whole forward and backward path.
    assert timeline.makespan == pytest.approx(4 * (6 + 12))


def test_reserving_list_schedules_never_deadlock_at_the_minimum_limit():
    costs = StageCosts([1.0, 2.0, 1.0, 3.0], activation_bytes=[1.0, 2.0, 1.0, 1.0])
    placement = [0, 1, 0, 1]
    smallest = minimum_memory_limit(costs, placement)
    assert smallest == 3.0
    for kind_order in KIND_ORDERS:
        schedule = list_schedule(6, costs, placement, memory_limit=smallest, kind_order=kind_order, reserve=True)
        assert schedule is not None
        assert max(simulate(schedule, costs).peak_bytes) <= smallest


def test_candidates_include_the_templates_that_apply():
    costs = StageCosts([1.0] * 8)
    labels = [c.label for c in adaptive_candidates(8, 8, costs=costs, placement=zb_v_placement(4))]
    assert "zb-v" in labels and "1f1b" not in labels
    labels = [c.label for c in adaptive_candidates(8, 8, costs=costs, placement=[s % 4 for s in range(8)])]
    assert "interleaved" in labels
    labels = [c.label for c in adaptive_candidates(4, 8, costs=StageCosts([1.0] * 4), backward="full")]
    assert {"gpipe", "1f1b"} <= set(labels) and "zb-h1" not in labels


def test_missing_costs_is_a_clear_error():
    with pytest.raises(InvalidInputError, match="needs costs=StageCosts"):
        adaptive(4, 8)
    with pytest.raises(InvalidInputError, match="needs costs=StageCosts"):
        build_schedule("adaptive", num_stages=4, num_microbatches=8)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"placement": [0, 1, 3, 2, 0]}, "placement has 5 entries, expected 4"),
        ({"placement": [0, 2, 2, 0]}, "rank 1 holds no stage"),
        ({"placement": [0, -1, 1, 0]}, r"placement\[1\] must be a rank"),
        ({"memory_limit": 0}, "memory_limit must be a number of bytes > 0, got 0"),
        ({"backward": "none"}, "backward must be 'split' or 'full'"),
        ({"effort": "quick"}, "effort must be 'full' or 'fast'"),
    ],
)
def test_bad_options_are_rejected(options, message):
    with pytest.raises(InvalidInputError, match=message):
        adaptive(4, 4, costs=StageCosts([1.0] * 4), **options)


def test_costs_of_the_wrong_shape_are_rejected():
    with pytest.raises(InvalidInputError, match="costs describe 3 stages but the schedule has 4"):
        adaptive(4, 4, costs=StageCosts([1.0] * 3))


def test_fast_effort_tries_a_few_of_the_full_rules_and_no_repair():
    placement = [s % 3 for s in range(9)]
    costs = StageCosts([0.2, 4.0, 4.0, 0.3, 4.0, 4.0, 0.2, 4.0, 1.0])
    full = {c.label for c in adaptive_candidates(9, 12, costs=costs, placement=placement, memory_limit=6.0)}
    fast = {c.label for c in adaptive_candidates(9, 12, costs=costs, placement=placement, memory_limit=6.0,
                                                 effort="fast")}
    rules = {label for label in fast if label.startswith("list:")}
    assert fast < full and 0 < len(rules) <= 4
    assert {label for label in fast if not label.startswith("list:")} == {
        label for label in full if not label.startswith("list:") and label != "sequential"}
    # no repair: the fast result is exactly its best candidate
    chosen = adaptive(9, 12, costs=costs, placement=placement, memory_limit=6.0, effort="fast")
    best = min((c for c in adaptive_candidates(9, 12, costs=costs, placement=placement, memory_limit=6.0,
                                               effort="fast") if c.fits), key=lambda c: c.timeline.makespan)
    assert simulate(chosen, costs).makespan == pytest.approx(best.timeline.makespan, rel=1e-12)
