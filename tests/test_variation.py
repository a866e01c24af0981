"""Costs per (stage, microbatch) in the simulator, and each rank's idle split into bubble and variation.

Properties (hypothesis, small shapes so they stay fast): a matrix whose microbatches are
alike simulates bit for bit like the per-stage costs it repeats; the fast kernel agrees
with the reference simulator on any matrix; the step lies between the analytic lower
bound and the step at every stage's largest cost; the variation is 0 for alike
microbatches, never negative, and bubble + variation is each rank's idle time.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _reference_simulate import reference_times
from pipeplan import CommModel, StageCosts, build_schedule, simulate
from pipeplan.analytic import makespan_lower_bound
from pipeplan.errors import InvalidInputError
from pipeplan.variation import collapsed, idle_split

_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v")


def _build(name: str, ranks: int, microbatches: int):
    if name == "interleaved":
        return build_schedule(name, num_stages=2 * ranks, num_microbatches=microbatches, virtual_stages=2)
    if name == "zb-v":
        return build_schedule(name, num_stages=2 * ranks, num_microbatches=microbatches)
    return build_schedule(name, num_stages=ranks, num_microbatches=microbatches)


@st.composite
def _case(draw, alike: bool = False):
    name = draw(st.sampled_from(_SCHEDULES))
    ranks = draw(st.integers(1, 4))
    microbatches = draw(st.integers(1, 6))
    if name == "interleaved":
        microbatches = ranks * draw(st.integers(1, 2))
    schedule = _build(name, ranks, microbatches)
    stages = schedule.num_stages
    times = st.floats(0.25, 8.0, allow_nan=False, width=32)
    if alike:
        columns = [[draw(times) for _ in range(stages)]] * microbatches
    else:
        columns = [[draw(times) for _ in range(stages)] for _ in range(microbatches)]
    forward = [[columns[mb][s] for mb in range(microbatches)] for s in range(stages)]
    ratio = draw(st.floats(0.5, 3.0, width=32))
    share = draw(st.floats(0.0, 1.0, width=32))
    backward = [[ratio * f for f in row] for row in forward]
    weight = [[share * b for b in row] for row in backward]
    comms = [None, CommModel(latency=0.5)]
    if name in ("gpipe", "1f1b"):  # blocking sends deadlock in some orders of the others
        comms.append(CommModel(latency=0.25, send_mode="rendezvous"))
    if stages > 1:  # messages whose size follows the microbatch
        sizes = [[draw(st.floats(0.0, 4.0, width=32)) for _ in range(microbatches)] for _ in range(stages - 1)]
        comms.append(CommModel(latency=0.25, bandwidth=2.0, microbatch_bytes=sizes))
    comm = draw(st.sampled_from(comms))
    return schedule, forward, backward, weight, comm


@settings(max_examples=40, deadline=None)
@given(_case(alike=True))
def test_a_matrix_of_alike_microbatches_simulates_bit_for_bit_like_per_stage_costs(case):
    schedule, forward, backward, weight, comm = case
    per_stage_comm = comm
    if comm is not None and comm.microbatch_bytes is not None:  # alike messages too
        sizes = [row[0] for row in comm.microbatch_bytes]
        per_stage_comm = CommModel(comm.latency, comm.bandwidth, sizes)
        comm = CommModel(comm.latency, comm.bandwidth, microbatch_bytes=[[size] * schedule.num_microbatches
                                                                         for size in sizes])
    per_stage = StageCosts([row[0] for row in forward], [row[0] for row in backward], [row[0] for row in weight])
    matrix = StageCosts.per_microbatch(forward, backward, weight)
    assert matrix.forward == per_stage.forward and matrix.weight == per_stage.weight
    ours, theirs = simulate(schedule, matrix, comm), simulate(schedule, per_stage, per_stage_comm)
    assert np.array_equal(ours.start, theirs.start) and np.array_equal(ours.blocked_until, theirs.blocked_until)
    split = idle_split(schedule, matrix, comm)
    assert split.variation == (0.0,) * schedule.num_ranks
    assert split.makespan == split.mean_makespan == theirs.makespan
    assert idle_split(schedule, per_stage, per_stage_comm).variation == (0.0,) * schedule.num_ranks


@settings(max_examples=40, deadline=None)
@given(_case())
def test_per_microbatch_steps_agree_with_the_reference_and_lie_within_the_bounds(case):
    schedule, forward, backward, weight, comm = case
    costs = StageCosts.per_microbatch(forward, backward, weight)
    timeline = simulate(schedule, costs, comm)
    if comm is None or comm.microbatch_bytes is None:
        start, end, blocked = reference_times(schedule, costs, comm)
        assert timeline.start.tolist() == pytest.approx(start, abs=1e-9)
        assert timeline.blocked_until.tolist() == pytest.approx(blocked, abs=1e-9)
    else:  # each message takes its own microbatch's time
        for message in schedule.messages():
            mb = message.producer.microbatch
            took = comm.latency + comm.microbatch_bytes[message.boundary][mb] / comm.bandwidth
            assert timeline.start_of(message.consumer) >= timeline.end_of(message.producer) + took - 1e-9
    split = idle_split(schedule, costs, comm, timeline=timeline)
    low = simulate(schedule, collapsed(costs, schedule.num_microbatches, "min"), comm).makespan
    assert split.lower_bound == makespan_lower_bound(schedule, costs, comm)
    assert max(split.lower_bound, low) <= timeline.makespan + 1e-9
    assert timeline.makespan <= split.upper_bound + 1e-9
    busy = timeline.busy
    for rank in range(schedule.num_ranks):
        assert split.variation[rank] >= 0.0 and split.bubble[rank] >= 0.0
        assert split.bubble[rank] + split.variation[rank] == pytest.approx(split.idle[rank], abs=1e-9)
        assert split.idle[rank] == pytest.approx(timeline.makespan - busy[rank], abs=1e-9)
        assert sum(split.cause_change[rank].values()) == pytest.approx(split.idle[rank] - split.mean_idle[rank],
                                                                       abs=1e-9)


def test_microbatch_scale_is_a_matrix_of_scaled_columns():
    schedule = build_schedule("zb-h1", num_stages=3, num_microbatches=4)
    forward, backward, weight, scale = [3.0, 1.0, 2.0], [5.0, 2.0, 3.0], [2.0, 1.0, 1.5], [1.0, 0.5, 2.0, 0.25]
    scaled = StageCosts(forward, backward, weight, microbatch_scale=scale)
    matrix = StageCosts.per_microbatch(*([[value * k for k in scale] for value in row]
                                         for row in (forward, backward, weight)))
    assert np.array_equal(simulate(schedule, scaled).end, simulate(schedule, matrix).end)
    assert collapsed(scaled, 4, "max").forward == (6.0, 2.0, 4.0)


def test_a_small_case_by_hand():
    # 1F1B, 2 stages, 4 microbatches; the last microbatch costs 5 (backward 10) on stage 0, every other 1 (2).
    # rank 0: F0 0-1, F1 1-2, B0 4-6, F2 6-7, B1 7-9, F3 9-14, B2 14-16, B3 17-27 (waits for rank 1's B3 at 17)
    # rank 1: F0 1-2, B0 2-4, F1 4-5, B1 5-7, F2 7-8, B2 8-10, F3 14-15, B3 15-17; busy 24 and 12 of 27.
    # At the means (stage 0: 2 and 4) the step is 25: idle 1 and 13, so the variation is 2 on each rank.
    # Mean: rank 0 waits 4-5 for B0's gradient; rank 1 fills 0-2, starves 8-11 and 14-17, drains 20-25.
    schedule = build_schedule("1f1b", num_stages=2, num_microbatches=4)
    split = idle_split(schedule, StageCosts.per_microbatch([[1, 1, 1, 5], [1, 1, 1, 1]]))
    assert (split.makespan, split.mean_makespan) == (27.0, 25.0)
    assert split.idle == (3.0, 15.0) and split.bubble == (1.0, 13.0) and split.variation == (2.0, 2.0)
    # where it shows: rank 0 waits 2-4 and 16-17 for gradients (+2); rank 1 fills 0-1, starves 10-14 and
    # drains 17-27, waiting for rank 0's long last backward
    change = [{cause.value: value for cause, value in rank.items() if value} for rank in split.cause_change]
    assert change == [{"starved_downstream": 2.0}, {"fill": -1.0, "starved_upstream": -2.0, "drain": 5.0}]
    # cheap microbatches around the slow ones: this order idles less than the mean's (24 < 25), no variation
    gain = idle_split(schedule, StageCosts.per_microbatch([[1, 3, 3, 1], [1, 1, 1, 1]]))
    assert (gain.makespan, gain.mean_makespan) == (24.0, 25.0)
    assert gain.variation == (0.0, 0.0) and gain.bubble == gain.idle == (0.0, 12.0)


def test_per_microbatch_costs_refuse_bad_tables_in_one_line():
    with pytest.raises(InvalidInputError, match="microbatch 1: forward\\[0\\] must be > 0"):
        StageCosts.per_microbatch([[1, 0], [1, 1]])
    with pytest.raises(InvalidInputError, match="rows of one length"):
        StageCosts.per_microbatch([[1, 1], [1]])
    with pytest.raises(InvalidInputError, match="backward has 3 microbatches"):
        StageCosts.per_microbatch([[1, 1]], [[2, 2, 2]])
    with pytest.raises(InvalidInputError, match="microbatch 0: weight\\[0\\] = 3.0 must be <= backward"):
        StageCosts.per_microbatch([[1, 1]], [[2, 2]], [[3, 1]])
    costs = StageCosts.per_microbatch([[1, 3]], [[2, 6]])
    with pytest.raises(InvalidInputError, match="describe 2 microbatches, the schedule has 4"):
        simulate(build_schedule("1f1b", num_stages=1, num_microbatches=4), costs)
    with pytest.raises(InvalidInputError, match="cannot replace forward"):
        costs.replaced(forward=[1.0])
    bigger = costs.replaced(activation_bytes=[5.0])
    assert bigger.microbatch_costs == costs.microbatch_costs and bigger.activation_bytes == (5.0,)
    both = StageCosts.stagewise([StageCosts.per_microbatch([[1, 3], [1, 1]]),
                                 StageCosts.per_microbatch([[2, 2], [4, 5]], [[4, 4], [8, 9]])])
    assert both.microbatch_costs is not None
    assert [both.duration(kind, s, 1) for kind, s in (("F", 0), ("F", 1), ("B", 1))] == [3.0, 5.0, 9.0]
    with pytest.raises(InvalidInputError, match="every source has costs per"):
        StageCosts.stagewise([costs, StageCosts([1.0])])


def test_the_adaptive_schedule_builds_its_order_on_per_microbatch_costs():
    rng = np.random.default_rng(0)
    forward = rng.uniform(1, 4, (4, 8))
    costs = StageCosts.per_microbatch(forward.tolist())
    schedule = build_schedule("adaptive", num_stages=4, num_microbatches=8, costs=costs)
    assert simulate(schedule, costs).makespan >= makespan_lower_bound(schedule, costs) - 1e-9
    # alike microbatches: the same order as on the per-stage costs
    alike = StageCosts.per_microbatch(np.repeat(forward[:, :1], 8, axis=1).tolist())
    same = build_schedule("adaptive", num_stages=4, num_microbatches=8, costs=alike)
    assert same.orders == build_schedule("adaptive", num_stages=4, num_microbatches=8,
                                         costs=StageCosts(forward[:, 0].tolist())).orders
