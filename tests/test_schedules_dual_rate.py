"""The dual-rate schedule in the IR: orders, dependencies, messages, staleness, closed form vs simulator."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pipeplan import CommModel, IdleCause, InvalidInputError, StageCosts, build_schedule, simulate
from pipeplan.analytic import dual_rate_period
from pipeplan.dualrate.metrics import dual_rate_metrics
from pipeplan.schedule import Action, Kind, Payload
from pipeplan.schedules.dual_rate import DualRateSchedule, DualRateShape


def _schedule(vision: int, action: int, ratio: int, frames: int, staleness: int) -> DualRateSchedule:
    return build_schedule("dual-rate", num_stages=vision + action, num_microbatches=frames * ratio,
                          rate_ratio=ratio, vision_stages=vision, max_staleness=staleness)


shapes = st.tuples(st.integers(1, 3), st.integers(1, 2), st.integers(1, 5), st.integers(1, 12), st.integers(0, 3))


@given(shapes)
def test_every_action_once_and_deadlock_free(shape):
    vision, action, ratio, frames, staleness = shape
    schedule = _schedule(*shape).validate()
    assert sorted(a for order in schedule.orders for a in order) == sorted(schedule.expected_actions())
    assert schedule.num_actions == 3 * (vision * frames + action * frames * ratio)
    assert schedule.kinds == (Kind.F, Kind.B, Kind.U)
    # the runtime walks the shape's lazily generated orders: the same actions
    assert [list(o) for o in schedule.orders] == [[Action(*a) for a in o] for o in schedule.shape.orders()]


@given(shapes)
def test_staleness_ramps_to_the_frames_in_flight(shape):
    vision, _action, _ratio, frames, staleness = shape
    schedule = _schedule(*shape)
    for stage in range(vision):
        bound = staleness * (vision - stage)
        assert schedule.staleness(stage) == tuple(min(j, bound) for j in range(frames))
    assert len(schedule.step_staleness()) == schedule.num_microbatches


def test_messages_one_latent_per_frame_and_one_gradient_back():
    schedule = _schedule(1, 1, 4, 3, 1)
    latents = [m for m in schedule.messages() if m.payload is Payload.LATENT]
    gradients = [m for m in schedule.messages() if m.payload is Payload.GRADIENT]
    assert [(m.producer, m.consumer) for m in latents] == [
        (Action("F", 0, j), Action("F", 1, 4 * j)) for j in range(3)]
    assert [(m.producer, m.consumer) for m in gradients] == [
        (Action("B", 1, 4 * j + 3), Action("B", 0, j)) for j in range(3)]
    # inside a side the table's ordinary rules hold
    deep = _schedule(2, 2, 2, 2, 1)
    assert deep.dependencies(Action("F", 1, 0)) == (Action("F", 0, 0),)
    assert deep.dependencies(Action("F", 2, 3)) == (Action("F", 1, 1),)
    assert deep.dependencies(Action("B", 1, 1)) == (Action("F", 1, 1), Action("B", 2, 3))
    assert deep.dependencies(Action("U", 3, 2)) == (Action("B", 3, 2),)
    kinds = {m.payload for m in deep.messages()}
    assert kinds == {Payload.ACTIVATION, Payload.GRADIENT, Payload.LATENT}


def test_rate_ratio_one_without_overlap_is_the_synchronous_pipeline():
    """k = 1, no staleness: each step runs vision F, action F B U, vision B U in turn."""
    schedule = _schedule(1, 1, 1, 3, 0)
    costs = StageCosts([3.0, 1.0], [6.0, 2.0], update=[0.5, 0.25])
    timeline = simulate(schedule, costs)
    assert timeline.makespan == pytest.approx(3 * (3 + 1 + 2 + 6 + 0.5))
    assert schedule.staleness(0) == (0, 0, 0)


def _rows(vision, action):
    return [tuple(row) for row in vision], [tuple(row) for row in action]


costs_strategy = st.tuples(
    st.lists(st.tuples(st.floats(0.5, 10), st.floats(0.5, 20), st.floats(0, 3)), min_size=1, max_size=3),
    st.lists(st.tuples(st.floats(0.1, 3), st.floats(0.1, 5), st.floats(0, 2)), min_size=1, max_size=2),
    st.integers(1, 5), st.integers(0, 1), st.sampled_from([0.0, 0.5, 2.0]),
)


@given(costs_strategy)
# Two near-equal vision stages converge slowly: 640 frames still show 4.10788 against 4.109375.
@example(([(1.890625, 1.890625, 0.328125), (1.890625, 0.5, 1.7109375)], [(1.0, 1.0, 0.0)], 1, 1, 0.0))
def test_closed_form_period_equals_the_simulated_steady_state(case):
    vision, action, ratio, staleness, comm = case
    rows = vision + action
    costs = StageCosts([r[0] for r in rows], [r[1] for r in rows], update=[r[2] for r in rows])
    period = dual_rate_period(vision, action, rate_ratio=ratio, max_staleness=staleness, comm=comm)
    # Two cycles of close means make the start-up transient long: measure later in a longer run if needed.
    for frames in (160, 640, 2560):
        schedule = _schedule(len(vision), len(action), ratio, frames, staleness)
        simulated = dual_rate_metrics(simulate(schedule, costs, CommModel(latency=comm))).steady_period
        if simulated == pytest.approx(period, rel=1e-9):
            break
    assert simulated == pytest.approx(period, rel=1e-9)


def test_closed_form_with_a_deeper_lookahead_after_a_long_transient():
    # V = 3, L = 2: two cycles of close means; the simulator settles on the closed form's period.
    vision = [(8.6, 19.4, 2.3), (4.3, 10.1, 0.0), (2.3, 0.8, 2.3)]
    action = [(0.72, 4.13, 1.08)]
    schedule = _schedule(3, 1, 5, 1600, 2)
    rows = vision + action
    timeline = simulate(schedule, StageCosts([r[0] for r in rows], [r[1] for r in rows], update=[r[2] for r in rows]))
    assert dual_rate_metrics(timeline).steady_period == pytest.approx(
        dual_rate_period(vision, action, rate_ratio=5, max_staleness=2), rel=1e-9)


def test_the_slow_side_sets_the_pace():
    # one vision rank, overlap, free messages: max(k · T_step, f + b + u)
    assert dual_rate_period([(30, 60, 1)], [(4, 8, 0.5)], rate_ratio=4) == 91.0
    assert dual_rate_period([(30, 60, 1)], [(4, 8, 0.5)], rate_ratio=16) == 16 * 12.5
    # no overlap: everything in turn
    assert dual_rate_period([(30, 60, 1)], [(4, 8, 0.5)], rate_ratio=4, max_staleness=0) == 30 + 60 + 1 + 4 * 12 + 3 * 0.5


def test_metrics_memory_and_throughput():
    schedule = _schedule(1, 1, 4, 16, 1)
    timeline = simulate(schedule, StageCosts([30.0, 4.0], update=[1.0, 0.5]))
    metrics = dual_rate_metrics(timeline, batch_size=32, latent_bytes=4096, stash_bytes=[1e5])
    assert metrics.peak_latents == 2 and metrics.peak_latent_bytes == 8192  # the one read and the next
    assert metrics.peak_frames == (2,) and metrics.peak_stash_bytes == (2e5,)
    assert metrics.steady_samples_per_s == pytest.approx(4 * 32 / 0.091)
    assert metrics.samples_per_s == pytest.approx(64 * 32 / (timeline.makespan / 1e3))
    assert metrics.frames_per_s == pytest.approx(16 / (timeline.makespan / 1e3))
    assert metrics.step_staleness == tuple([0] * 4 + [1] * 60)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"rate_ratio": 0}, "rate_ratio must be >= 1"),
        ({"rate_ratio": 1.5}, "rate_ratio must be an integer"),
        ({"num_microbatches": 10}, "must be a multiple of rate_ratio = 4"),
        ({"vision_stages": 2}, "vision_stages must be < num_stages = 2"),
        ({"max_staleness": 2, "buffer_frames": 2}, "buffer_frames = 2 cannot hold max_staleness = 2"),
    ],
)
def test_bad_input_names_the_field(options, message):
    arguments = {"num_stages": 2, "num_microbatches": 8, "rate_ratio": 4, **options}
    with pytest.raises(InvalidInputError, match=message):
        build_schedule("dual-rate", **arguments)


def test_shape_positions_out_of_range_are_rejected():
    with pytest.raises(InvalidInputError, match="position must be in 0..5"):
        DualRateShape(1, 1, 1, 2).action_at(0, 6)


def test_latent_sends_never_block_even_with_blocking_sends():
    """Latest wins: with rendezvous sends the vision rank writes each latent and goes on."""
    schedule = _schedule(1, 1, 4, 8, 1)
    assert [schedule.messages()[i].payload for i in schedule.latest_wins()] == [Payload.LATENT] * 8
    costs = StageCosts([30.0, 4.0], update=[1.0, 0.5])
    blocking = simulate(schedule, costs, CommModel(latency=2.0, send_mode="rendezvous"))
    assert blocking.idle_by_cause()[0][IdleCause.BLOCKED] == 0.0  # rank 0 sends only latents
    assert blocking.idle_by_cause()[1][IdleCause.BLOCKED] > 0.0  # the gradients back do wait
    assert build_schedule("1f1b", num_stages=2, num_microbatches=4).latest_wins().size == 0
