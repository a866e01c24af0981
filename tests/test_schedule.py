"""Schedule model: construction, validation and the messages it gives."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeplan import (
    Action,
    DeadlockError,
    InvalidInputError,
    InvalidScheduleError,
    Kind,
    Payload,
    Schedule,
    build_schedule,
)


def _rebuild(schedule: Schedule, orders: list[list[Action]]) -> Schedule:
    return Schedule(orders, schedule.placement, schedule.num_microbatches)


shapes = st.tuples(
    st.sampled_from(["gpipe", "1f1b"]),
    st.integers(1, 6),
    st.integers(1, 10),
    st.sampled_from(["full", "split"]),
)


@given(shapes)
def test_generated_schedules_are_valid_and_complete(shape):
    name, stages, microbatches, backward = shape
    schedule = build_schedule(name, num_stages=stages, num_microbatches=microbatches, backward=backward)
    schedule.validate()
    actions = [a for order in schedule.orders for a in order]
    assert sorted(actions) == sorted(schedule.expected_actions())


@given(shapes, st.data())
def test_dropping_an_action_is_rejected_naming_it(shape, data):
    name, stages, microbatches, backward = shape
    schedule = build_schedule(name, num_stages=stages, num_microbatches=microbatches, backward=backward)
    rank = data.draw(st.integers(0, schedule.num_ranks - 1))
    orders = [list(o) for o in schedule.orders]
    dropped = orders[rank].pop(data.draw(st.integers(0, len(orders[rank]) - 1)))
    rebuilt = _rebuild(schedule, orders)
    if dropped.kind == "B" and schedule.num_actions == 2:
        # The kinds say what the schedule is: without its only B it is a complete forward-only one.
        assert rebuilt.validate().forward_only
        return
    with pytest.raises(InvalidScheduleError) as error:
        rebuilt.validate()
    assert str(error.value) == f"rank {rank}: {dropped} is missing from its order"


@given(shapes, st.data())
def test_duplicating_an_action_is_rejected(shape, data):
    name, stages, microbatches, backward = shape
    schedule = build_schedule(name, num_stages=stages, num_microbatches=microbatches, backward=backward)
    rank = data.draw(st.integers(0, schedule.num_ranks - 1))
    orders = [list(o) for o in schedule.orders]
    copy = orders[rank][data.draw(st.integers(0, len(orders[rank]) - 1))]
    orders[rank].insert(data.draw(st.integers(0, len(orders[rank]))), copy)
    with pytest.raises(InvalidScheduleError, match="more than once"):
        _rebuild(schedule, orders).validate()


@given(shapes, st.data())
def test_backward_swapped_before_its_forward_deadlocks(shape, data):
    name, stages, microbatches, backward = shape
    schedule = build_schedule(name, num_stages=stages, num_microbatches=microbatches, backward=backward)
    rank = data.draw(st.integers(0, schedule.num_ranks - 1))
    mb = data.draw(st.integers(0, microbatches - 1))
    orders = [list(o) for o in schedule.orders]
    forward_at = orders[rank].index(Action("F", rank, mb))
    gradient = schedule.gradient_kind  # B for a full backward, I for a split one
    backward_at = orders[rank].index(Action(gradient, rank, mb))
    orders[rank][forward_at], orders[rank][backward_at] = orders[rank][backward_at], orders[rank][forward_at]
    with pytest.raises(DeadlockError) as error:
        _rebuild(schedule, orders).validate()
    assert f"rank {rank} is stuck at {gradient}(stage {rank}, mb {mb}) waiting for F(stage {rank}, mb {mb}) on rank {rank} " \
        "(later in its own order)" in str(error.value)


def _has_cycle(schedule: Schedule) -> bool:
    """Independent oracle: Kahn's algorithm on dependency edges plus per-rank order edges."""
    edges: dict[Action, list[Action]] = {a: [] for order in schedule.orders for a in order}
    indegree = dict.fromkeys(edges, 0)
    for order in schedule.orders:
        for before, after in zip(order, order[1:]):
            edges[before].append(after)
            indegree[after] += 1
    for action in edges:
        for dep in schedule.dependencies(action):
            edges[dep].append(action)
            indegree[action] += 1
    ready = [a for a, d in indegree.items() if d == 0]
    seen = 0
    while ready:
        action = ready.pop()
        seen += 1
        for nxt in edges[action]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    return seen < len(edges)


@given(shapes, st.data())
def test_random_swaps_are_rejected_exactly_when_they_deadlock(shape, data):
    name, stages, microbatches, backward = shape
    schedule = build_schedule(name, num_stages=stages, num_microbatches=microbatches, backward=backward)
    orders = [list(o) for o in schedule.orders]
    rank = data.draw(st.integers(0, schedule.num_ranks - 1))
    first = data.draw(st.integers(0, len(orders[rank]) - 1))
    second = data.draw(st.integers(0, len(orders[rank]) - 1))
    orders[rank][first], orders[rank][second] = orders[rank][second], orders[rank][first]
    swapped = _rebuild(schedule, orders)
    if _has_cycle(swapped):
        with pytest.raises(DeadlockError, match="schedule deadlocks: rank"):
            swapped.validate()
    else:
        swapped.validate()


@given(st.integers(2, 6), st.integers(1, 8), st.data())
def test_moving_an_action_to_another_rank_is_rejected(stages, microbatches, data):
    schedule = build_schedule("1f1b", num_stages=stages, num_microbatches=microbatches)
    source = data.draw(st.integers(0, stages - 1))
    target = data.draw(st.integers(0, stages - 1).filter(lambda r: r != source))
    orders = [list(o) for o in schedule.orders]
    moved = orders[source].pop(0)
    orders[target].append(moved)
    with pytest.raises(InvalidScheduleError, match=f"rank {target}: .* wrong rank"):
        _rebuild(schedule, orders).validate()


def test_cross_rank_cycle_names_both_ranks():
    # Rank 0 waits for stage 1's gradient before running its forward: a cycle across ranks.
    orders = [[Action("B", 0, 0), Action("F", 0, 0)], [Action("F", 1, 0), Action("B", 1, 0)]]
    with pytest.raises(DeadlockError) as error:
        Schedule(orders, [0, 1], 1).validate()
    message = str(error.value)
    assert "rank 0 is stuck at B(stage 0, mb 0)" in message
    assert "rank 1 is stuck at F(stage 1, mb 0)" in message


def test_unknown_kind_and_out_of_range_are_named():
    with pytest.raises(InvalidScheduleError, match="rank 0: B.* a full backward is B, a split one I and W, never both"):
        Schedule([[Action("F", 0, 0), Action("B", 0, 0), Action("W", 0, 0)]], [0], 1).validate()
    with pytest.raises(InvalidInputError, match="action kind must be one of F, B, I, W, U, got 'X'"):
        Schedule([[("F", 0, 0), ("X", 0, 0)]], [0], 1)
    with pytest.raises(InvalidScheduleError, match="microbatch outside 0..0"):
        Schedule([[Action("F", 0, 0), Action("F", 0, 1), Action("B", 0, 0)]], [0], 1).validate()
    with pytest.raises(InvalidInputError, match=r"placement\[1\] = 5"):
        Schedule([[Action("F", 0, 0)]], [0, 5], 1)


@pytest.mark.parametrize("value", [0, -1, 2.5, "3", float("nan")])
def test_bad_microbatch_counts_are_rejected(value):
    with pytest.raises(InvalidInputError, match="num_microbatches"):
        build_schedule("1f1b", num_stages=2, num_microbatches=value)


def test_unknown_schedule_name_lists_the_choices():
    with pytest.raises(InvalidInputError, match="schedule must be one of .*1f1b"):
        build_schedule("2f2b", num_stages=2, num_microbatches=2)


def test_megatron_one_f_one_b_order():
    # Megatron-LM's non-interleaved schedule, P = 4, m = 8: rank 1 warms up with 2 forwards.
    schedule = build_schedule("1f1b", num_stages=4, num_microbatches=8)
    labels = [a.label for a in schedule.orders[1]]
    assert labels[:6] == ["F0", "F1", "F2", "B0", "F3", "B1"]
    assert labels[-2:] == ["B6", "B7"]
    assert [a.label for a in schedule.orders[3][:4]] == ["F0", "B0", "F1", "B1"]


def test_schedule_options_sees_keyword_and_positional_options():
    from pipeplan.schedules import SCHEDULES, register_schedule, schedule_options

    def mine(num_stages, num_microbatches, costs=None, backward="full", *, window=2):
        return build_schedule("1f1b", num_stages=num_stages, num_microbatches=num_microbatches, backward=backward)

    register_schedule("mine", mine)
    try:
        assert schedule_options("mine") == {"costs", "backward", "window"}
        assert schedule_options("interleaved") >= {"virtual_stages", "backward"}
        assert "costs" in schedule_options("adaptive") and "costs" not in schedule_options("1f1b")
    finally:
        del SCHEDULES["mine"]


# ------------------------------------------------------------------ kinds and messages
def test_kinds_are_typed_and_strings_are_coerced():
    action = Action("I", 2, 0)
    assert action.kind is Kind.I and action == ("I", 2, 0) and hash(action) == hash(("I", 2, 0))
    assert str(action) == "I(stage 2, mb 0)" and action.label == "I0"
    assert Schedule([[("F", 0, 0), ("B", 0, 0)]], [0], 1).orders[0][1].kind is Kind.B


def test_backward_mode_is_read_from_the_kinds():
    full = build_schedule("1f1b", num_stages=3, num_microbatches=4)
    split = build_schedule("zb-h1", num_stages=3, num_microbatches=4)
    forward = build_schedule("gpipe", num_stages=3, num_microbatches=4, backward="none")
    assert (full.backward, full.gradient_kind) == ("full", Kind.B)
    assert (split.backward, split.gradient_kind, split.split_backward) == ("split", Kind.I, True)
    assert (forward.backward, forward.gradient_kind, forward.forward_only) == ("none", None, True)
    assert {a.kind for o in split.orders for a in o} == {Kind.F, Kind.I, Kind.W}


def test_dependencies_follow_the_table():
    full = build_schedule("1f1b", num_stages=3, num_microbatches=2)
    split = build_schedule("zb-h1", num_stages=3, num_microbatches=2)
    assert full.dependencies(Action("B", 1, 0)) == (Action("F", 1, 0), Action("B", 2, 0))
    assert split.dependencies(Action("I", 1, 0)) == (Action("F", 1, 0), Action("I", 2, 0))
    assert split.dependencies(Action("W", 1, 0)) == (Action("I", 1, 0),)
    assert split.dependencies(Action("F", 0, 1)) == ()
    assert split.consumers(Action("I", 1, 0)) == (Action("I", 0, 0), Action("W", 1, 0))
    assert full.consumers(Action("F", 1, 0)) == (Action("F", 2, 0), Action("B", 1, 0))


def _independent_messages(schedule: Schedule) -> list[tuple[Action, Action, int, int]]:
    """Oracle: every dependency between stages on different ranks, listed by the sender's order."""
    consumers: dict[Action, list[Action]] = {}
    for order in schedule.orders:
        for action in order:
            for dep in schedule.dependencies(action):
                if schedule.placement[dep.stage] != schedule.placement[action.stage]:
                    consumers.setdefault(dep, []).append(action)
    return [(producer, consumer, rank, schedule.placement[consumer.stage])
            for rank, order in enumerate(schedule.orders) for producer in order
            for consumer in consumers.get(producer, [])]


@pytest.mark.parametrize("name, options", [("1f1b", {}), ("zb-h2", {}), ("zb-v", {}),
                                           ("interleaved", {"virtual_stages": 2}),
                                           ("gpipe", {"backward": "none"})])
def test_messages_are_the_cross_rank_edges_in_sender_order(name, options):
    schedule = build_schedule(name, num_stages=4, num_microbatches=5, **options).validate()
    messages = schedule.messages()
    assert [(m.producer, m.consumer, m.src, m.dst) for m in messages] == _independent_messages(schedule)
    assert schedule.messages() is messages  # cached
    for message in messages:
        assert message.boundary == min(message.producer.stage, message.consumer.stage)
        assert message.payload is (Payload.ACTIVATION if message.producer.kind is Kind.F else Payload.GRADIENT)
        assert message in schedule.messages_into(message.consumer)
        assert message in schedule.messages_from(message.producer)
    # zb-v puts stages P-1 and P on one rank: that edge is no message
    if name == "zb-v":
        assert not schedule.messages_into(Action("F", 2, 0)) and not schedule.messages_into(Action("I", 1, 0))
