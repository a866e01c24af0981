"""The simulator against closed forms, bounds and its own dependency rules."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeplan import (
    Action,
    CommModel,
    DeadlockError,
    IdleCause,
    InvalidInputError,
    Schedule,
    StageCosts,
    analytic,
    build_schedule,
    simulate,
)

cost_value = st.floats(0.5, 50.0, allow_nan=False, allow_infinity=False)


@st.composite
def unequal_costs(draw, stages):
    forward = draw(st.lists(cost_value, min_size=stages, max_size=stages))
    backward = [f * draw(st.floats(1.0, 3.0)) for f in forward]
    weight = [b * draw(st.floats(0.1, 0.6)) for b in backward]
    return StageCosts(forward, backward, weight)


@st.composite
def comm_models(draw, stages):
    latency = draw(st.floats(0.0, 5.0))
    sizes = draw(st.lists(st.floats(0.0, 100.0), min_size=stages - 1, max_size=stages - 1)) if stages > 1 else 0.0
    mode = draw(st.sampled_from(["eager", "rendezvous"]))
    return CommModel(latency, 50.0, sizes if stages > 1 else 0.0, mode)


@given(st.sampled_from(["gpipe", "1f1b"]), st.integers(1, 12), st.integers(1, 40),
       st.floats(0.1, 10.0), st.floats(0.1, 10.0))
def test_uniform_bubble_matches_closed_form(name, stages, microbatches, forward, backward):
    timeline = simulate(build_schedule(name, num_stages=stages, num_microbatches=microbatches),
                        StageCosts.uniform(stages, forward=forward, backward=backward))
    assert math.isclose(timeline.bubble_ratio, analytic.uniform_bubble(stages, microbatches),
                        rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(timeline.makespan,
                        analytic.one_f_one_b_step_time(stages, microbatches, forward, backward), rel_tol=1e-9)


@given(st.integers(1, 10), st.integers(1, 50), st.data())
def test_forward_only_makespan_is_sum_plus_bottleneck(stages, microbatches, data):
    forward = data.draw(st.lists(cost_value, min_size=stages, max_size=stages))
    schedule = build_schedule("1f1b", num_stages=stages, num_microbatches=microbatches, backward="none")
    timeline = simulate(schedule, StageCosts(forward))
    assert math.isclose(timeline.makespan, analytic.forward_makespan(forward, microbatches), rel_tol=1e-9)
    assert math.isclose(timeline.bubble_ratio, analytic.asymmetric_forward_bubble(forward, microbatches),
                        rel_tol=1e-9, abs_tol=1e-12)


@given(st.integers(1, 10), st.integers(1, 30), st.data())
def test_peak_inflight_one_f_one_b_and_gpipe(stages, microbatches, data):
    costs = data.draw(unequal_costs(stages))
    one = simulate(build_schedule("1f1b", num_stages=stages, num_microbatches=microbatches), costs)
    assert one.peak_inflight == tuple(analytic.one_f_one_b_peak_inflight(p, stages, microbatches)
                                      for p in range(stages))
    gpipe = simulate(build_schedule("gpipe", num_stages=stages, num_microbatches=microbatches), costs)
    assert gpipe.peak_inflight == (microbatches,) * stages


@given(st.sampled_from(["gpipe", "1f1b"]), st.sampled_from(["full", "split"]), st.integers(1, 8),
       st.integers(1, 16), st.data())
def test_makespan_respects_lower_bound_and_dependencies(name, backward, stages, microbatches, data):
    costs = data.draw(unequal_costs(stages))
    comm = data.draw(comm_models(stages))
    schedule = build_schedule(name, num_stages=stages, num_microbatches=microbatches, backward=backward)
    timeline = simulate(schedule, costs, comm)
    assert timeline.makespan >= analytic.makespan_lower_bound(schedule, costs, comm) - 1e-9
    message = comm.boundary_times(stages)
    for record in timeline.records():
        for dep in schedule.dependencies(record.action):
            gap = 0.0
            if schedule.placement[dep.stage] != record.rank:
                gap = message[min(dep.stage, record.action.stage)]
            assert record.start >= timeline.end_of(dep) + gap - 1e-9, (record, dep)
        expected = costs.duration(*record.action)
        assert math.isclose(record.end - record.start, expected, rel_tol=1e-9)


@given(st.sampled_from(["gpipe", "1f1b"]), st.integers(1, 8), st.integers(1, 16), st.data())
def test_idle_by_cause_sums_to_total_idle(name, stages, microbatches, data):
    costs = data.draw(unequal_costs(stages))
    comm = data.draw(comm_models(stages))
    timeline = simulate(build_schedule(name, num_stages=stages, num_microbatches=microbatches), costs, comm)
    idle = timeline.idle_by_cause()
    for rank in range(stages):
        assert math.isclose(sum(idle[rank].values()), timeline.makespan - timeline.busy[rank],
                            rel_tol=1e-9, abs_tol=1e-9)
        assert idle[rank][IdleCause.OVERHEAD] == 0.0  # only measured timelines have overhead
    total_idle = sum(sum(row.values()) for row in idle)
    assert math.isclose(total_idle / (stages * timeline.makespan), timeline.bubble_ratio, abs_tol=1e-9)


@given(st.sampled_from(["gpipe", "1f1b"]), st.integers(1, 6), st.integers(1, 12), st.data())
def test_rendezvous_is_never_faster_than_eager(name, stages, microbatches, data):
    costs = data.draw(unequal_costs(stages))
    latency = data.draw(st.floats(0.0, 5.0))
    schedule = build_schedule(name, num_stages=stages, num_microbatches=microbatches)
    eager = simulate(schedule, costs, CommModel(latency, send_mode="eager"))
    blocking = simulate(schedule, costs, CommModel(latency, send_mode="rendezvous"))
    assert (blocking.start >= eager.start - 1e-9).all()
    assert blocking.makespan >= eager.makespan - 1e-9


def test_lesson16_backpressure_shows_up_as_blocked_time():
    # Lesson 16 Q1: a fast middle stage that must hand off to a slow stage blocks in its send.
    costs = StageCosts([10.0, 10.0, 30.0])
    schedule = build_schedule("gpipe", num_stages=3, num_microbatches=4, backward="none")
    eager = simulate(schedule, costs, CommModel(send_mode="eager"))
    blocking = simulate(schedule, costs, CommModel(send_mode="rendezvous"))
    assert eager.idle_by_cause()[1][IdleCause.BLOCKED] == 0.0
    # Rank 1 finishes mb 1 at 30 but rank 2 takes it only at 50 (busy with mb 0): it blocks
    # 20 ms on each of the three hand-offs after the first; rank 0 feels it once (40 -> 60).
    assert blocking.idle_by_cause()[1][IdleCause.BLOCKED] == pytest.approx(3 * 20.0)
    assert blocking.idle_by_cause()[0][IdleCause.BLOCKED] == pytest.approx(20.0)
    assert blocking.makespan == eager.makespan == pytest.approx(10 + 10 + 4 * 30)


def test_worked_example_lesson16_one_f_one_b():
    # Lesson 16's dumbbell, full 1F1B step, backward = 2 x forward. Rank 0 is the bottleneck:
    # its own work is 8 * (30 + 60) = 720 ms, plus the first gradient's round trip.
    timeline = simulate(build_schedule("1f1b", num_stages=4, num_microbatches=8), StageCosts([30, 10, 10, 20]))
    assert timeline.busy[0] == pytest.approx(720.0)
    assert timeline.makespan == pytest.approx(750.0)
    assert timeline.makespan >= analytic.makespan_lower_bound(timeline.schedule, StageCosts([30, 10, 10, 20]))


def test_rendezvous_cycle_is_reported_not_hung():
    # A pairwise exchange (each rank sends, then receives) survives: a rank blocked in a send
    # has its next receive posted, like Megatron's batched send_forward_recv_backward.
    exchange = Schedule(
        [[Action("F", 0, 0), Action("F", 0, 1), Action("B", 0, 0), Action("B", 0, 1)],
         [Action("F", 1, 0), Action("B", 1, 0), Action("F", 1, 1), Action("B", 1, 1)]],
        [0, 1], 2,
    )
    assert simulate(exchange, StageCosts([1, 1]), CommModel(send_mode="rendezvous")).makespan > 0
    # Rank 0's send of F(0, 0) is taken only after rank 1 has run B(1, 1), which needs F(0, 1),
    # which rank 0 runs only after that send: eager sends finish, blocking sends never do.
    cycle = Schedule(
        [[Action("F", 0, 0), Action("F", 0, 1), Action("B", 0, 0), Action("B", 0, 1)],
         [Action("F", 1, 1), Action("B", 1, 1), Action("F", 1, 0), Action("B", 1, 0)]],
        [0, 1], 2,
    )
    assert simulate(cycle, StageCosts([1, 1]), CommModel(send_mode="eager")).makespan > 0
    with pytest.raises(DeadlockError, match="rank 0 is blocked sending"):
        simulate(cycle, StageCosts([1, 1]), CommModel(send_mode="rendezvous"))


def test_costs_must_match_schedule():
    schedule = build_schedule("1f1b", num_stages=3, num_microbatches=2)
    with pytest.raises(InvalidInputError, match="costs describe 2 stages but the schedule has 3"):
        simulate(schedule, StageCosts([1, 1]))
    with pytest.raises(InvalidInputError, match="microbatch_scale has 3 entries, expected 2"):
        simulate(schedule, StageCosts([1, 1, 1], microbatch_scale=[1, 1, 1]))


def test_microbatch_scale_shrinks_the_last_microbatch():
    full = simulate(build_schedule("gpipe", num_stages=2, num_microbatches=3, backward="none"), StageCosts([4, 4]))
    scaled = simulate(build_schedule("gpipe", num_stages=2, num_microbatches=3, backward="none"),
                      StageCosts([4, 4], microbatch_scale=[1, 1, 0.5]))
    assert full.makespan == pytest.approx(16.0)
    assert scaled.makespan == pytest.approx(14.0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"forward": [1, float("nan")]}, r"forward\[1\] must be finite"),
        ({"forward": [1, -2]}, r"forward\[1\] must be > 0"),
        ({"forward": [1, 0]}, r"forward\[1\] must be > 0"),
        ({"forward": [1, 2], "backward": [1]}, "backward has 1 entries, expected 2"),
        ({"forward": [1, 2], "weight": [5, 0]}, r"weight\[0\] = 5.0 must be <= backward\[0\]"),
        ({"forward": []}, "forward must not be empty"),
        ({"forward": "30,10"}, "forward must be a list of numbers"),
    ],
)
def test_bad_costs_name_the_field(kwargs, message):
    with pytest.raises(InvalidInputError, match=message):
        StageCosts(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"latency": -1}, "latency must be a finite number >= 0"),
        ({"latency": float("nan")}, "latency must be a finite number >= 0"),
        ({"latency": float("inf")}, "latency must be a finite number >= 0"),
        ({"bandwidth": 0}, "bandwidth must be a number > 0"),
        ({"send_mode": "lazy"}, "send_mode must be 'eager' or 'rendezvous'"),
    ],
)
def test_bad_comm_names_the_field(kwargs, message):
    with pytest.raises(InvalidInputError, match=message):
        CommModel(**kwargs)


# ------------------------------------------------------------------ several iterations
def test_one_iteration_reports_the_makespan():
    timeline = simulate(build_schedule("1f1b", num_stages=4, num_microbatches=8), StageCosts([30, 10, 10, 20]))
    assert timeline.iterations == 1 and timeline.step_ends.tolist() == [timeline.makespan]
    assert timeline.steady_step_time == timeline.makespan


@given(st.sampled_from(["gpipe", "1f1b", "zb-h1", "zb-h2"]), st.integers(1, 5), st.integers(1, 8),
       st.integers(2, 5), st.data())
def test_barrier_repeats_the_step_and_overlap_is_never_slower(name, stages, microbatches, iterations, data):
    costs = data.draw(unequal_costs(stages))
    comm = data.draw(comm_models(stages))
    schedule = build_schedule(name, num_stages=stages, num_microbatches=microbatches)
    try:
        single = simulate(schedule, costs, comm)
    except DeadlockError:
        return  # blocking sends can deadlock ZB-H2 at small m (docs/schedules.md)
    barrier = simulate(schedule, costs, comm, iterations=iterations, optimizer="barrier")
    overlap = simulate(schedule, costs, comm, iterations=iterations, optimizer="overlap")
    for timeline in (barrier, overlap):  # the Timeline is the first step's, as with one iteration
        assert timeline.start.tolist() == single.start.tolist() and timeline.iterations == iterations
    # barrier: every rank starts step i + 1 together, so every step takes the makespan
    assert barrier.step_times == pytest.approx([single.makespan] * iterations, rel=1e-9)
    # overlap: never later than the barrier, and a step still holds every rank's work
    assert (overlap.step_ends <= barrier.step_ends * (1 + 1e-12)).all()
    assert overlap.steady_step_time >= single.busy.max() * (1 - 1e-9)


def test_overlap_reaches_the_zero_bubble_span():
    # Zero bubble (Qi et al., 2024), F = B = W: ZB-H2's per-rank span is m·(F + B + W) with no
    # bubble, but its makespan is longer (the ranks start and end at different times). With a
    # barrier each step takes the makespan; overlapped steps settle to the span.
    schedule = build_schedule("zb-h2", num_stages=4, num_microbatches=8)
    costs = StageCosts.uniform(4, forward=1.0, backward=2.0, weight=1.0)
    barrier = simulate(schedule, costs, iterations=6)
    overlap = simulate(schedule, costs, iterations=6, optimizer="overlap")
    assert barrier.steady_step_time == pytest.approx(27.0)  # makespan: 24 + the (P − 1)·F fill
    assert overlap.steady_step_time == pytest.approx(8 * 3.0)
    assert overlap.steady_step_time == pytest.approx(float(barrier.spans.max()))


@pytest.mark.parametrize("options, message", [
    ({"iterations": 0}, "iterations must be >= 1, got 0"),
    ({"iterations": 1.5}, "iterations must be an integer >= 1"),
    ({"optimizer": "later"}, "optimizer must be one of barrier, overlap, got 'later'"),
])
def test_bad_iterations_and_optimizer_are_named(options, message):
    with pytest.raises(InvalidInputError, match=message):
        simulate(build_schedule("1f1b", num_stages=2, num_microbatches=2), StageCosts([1, 1]), **options)


def test_rendezvous_deadlock_names_the_rank_pair_and_the_messages():
    # docs/schedules.md: ZB-H2 with P = 2, m = 4 deadlocks on blocking sends.
    schedule = build_schedule("zb-h2", num_stages=2, num_microbatches=4)
    with pytest.raises(DeadlockError) as error:
        simulate(schedule, StageCosts([1, 1]), CommModel(send_mode="rendezvous"))
    text = str(error.value)
    assert text.startswith("rendezvous sends deadlock between ranks 0 and 1")
    assert "rank 0 is blocked sending the activation of F(stage 0, mb 3) from rank 0 to F(stage 1, mb 3) on " \
           "rank 1; rank 1 posts that receive only after W(stage 1, mb 0)" in text
    assert "rank 1 is blocked sending the gradient of I(stage 1, mb 2)" in text


def test_overlap_starts_each_rank_when_its_own_part_is_done():
    # Forward-only GPipe, 2 stages of 1 and 5 ms, one microbatch, 0.5 ms blocking messages.
    # Rank 0 (F0) sends to rank 1, whose first action F1 posts its receive when rank 1's step
    # starts. Step 1: rank 0 ends F0 at 1, its send is done at 1.5; rank 1 runs F1 1.5..6.5.
    # Step 2: rank 0 starts at 1.5, ends F0 at 2.5, but rank 1 posts only at 6.5: done at 7.0;
    # rank 1 runs 7.0..12.0. Step 3 likewise: 12.5 and 17.5.
    schedule = build_schedule("gpipe", num_stages=2, num_microbatches=1, backward="none")
    timeline = simulate(schedule, StageCosts([1.0, 5.0]), CommModel(latency=0.5, send_mode="rendezvous"),
                        iterations=3, optimizer="overlap")
    assert timeline.rank_step_ends.tolist() == [[1.5, 6.5], [7.0, 12.0], [12.5, 17.5]]
    assert timeline.step_ends.tolist() == [6.5, 12.0, 17.5] and timeline.steady_step_time == 5.5
    barrier = simulate(schedule, StageCosts([1.0, 5.0]), CommModel(latency=0.5, send_mode="rendezvous"),
                       iterations=3)
    assert barrier.rank_step_ends.tolist() == [[1.5, 6.5], [8.0, 13.0], [14.5, 19.5]]
