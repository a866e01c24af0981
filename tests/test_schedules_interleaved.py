"""Interleaved 1F1B: Megatron-LM's order, the (P − 1)(F + B)/v bubble, memory, errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import Action, InvalidInputError, StageCosts, build_schedule, simulate
from pipeplan.schedules.interleaved import (
    interleaved,
    interleaved_peak_inflight,
    interleaved_warmup,
    microbatch_groups,
)
from pipeplan.schedules.one_f_one_b import one_f_one_b


def _f(stage: int, mb: int) -> Action:
    return Action("F", stage, mb)


def _b(stage: int, mb: int) -> Action:
    return Action("B", stage, mb)


def test_megatron_order_for_two_ranks_two_chunks_four_microbatches():
    # Worked by hand from Megatron-LM's forward_backward_pipelining_with_interleaving:
    # groups of P = 2 microbatches, chunk ids 0,0,1,1 per group of 4 virtual
    # microbatches (reversed for backwards); warm-up 2·(P − r − 1) + (v − 1)·P,
    # i.e. 4 on rank 0 and 2 on rank 1. Stage s = chunk·P + rank.
    schedule = interleaved(4, 4, virtual_stages=2)
    assert schedule.placement == (0, 1, 0, 1)
    assert list(schedule.orders[0]) == [
        _f(0, 0), _f(0, 1), _f(2, 0), _f(2, 1),          # warm-up
        _f(0, 2), _b(2, 0), _f(0, 3), _b(2, 1),          # steady: F(k + 4), B(k)
        _f(2, 2), _b(0, 0), _f(2, 3), _b(0, 1),
        _b(2, 2), _b(2, 3), _b(0, 2), _b(0, 3),          # cool-down
    ]
    assert list(schedule.orders[1]) == [
        _f(1, 0), _f(1, 1),
        _f(3, 0), _b(3, 0), _f(3, 1), _b(3, 1),
        _f(1, 2), _b(1, 0), _f(1, 3), _b(1, 1),
        _f(3, 2), _b(3, 2), _f(3, 3), _b(3, 3),
        _b(1, 2), _b(1, 3),
    ]


def test_megatron_table_for_a_group_size_above_p():
    # Megatron-LM's schedules.py documents the table for PP=2, N=3, M=5, VP=2:
    # microbatch_id 0 1 2 0 1 2 3 4 3 4, model_chunk_id 0 0 0 1 1 1 0 0 1 1.
    # Our generalisation picks N = 3 for m = 5, P = 2 (two groups, 3 and 2).
    assert microbatch_groups(5, 2) == [3, 2]
    schedule = interleaved(4, 5, virtual_stages=2, backward="none")
    assert [(a.microbatch, a.stage // 2) for a in schedule.orders[0]] == [
        (0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (3, 0), (4, 0), (3, 1), (4, 1)
    ]
    # and Megatron's warm-up with N = 3: 2·(P − r − 1) + (v − 1)·N.
    assert interleaved_warmup(0, 2, 5, 2) == 5
    assert interleaved_warmup(1, 2, 5, 2) == 3


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(1, 16), virtual=st.integers(2, 4), rounds=st.integers(1, 4))
def test_megatron_closed_form_chunk_and_microbatch_of_each_virtual_microbatch(ranks, virtual, rounds):
    # Megatron-LM (before its schedule table) computed, for virtual microbatch k:
    #   chunk = (k mod P·v) // P  (reversed, v − 1 − chunk, for backwards),
    #   microbatch = (k // (P·v))·P + k mod P,
    # and ran warm-up = min(v·m, 2(P − r − 1) + (v − 1)P) forwards, then F(k + warm-up), B(k).
    microbatches = rounds * ranks
    schedule = interleaved(ranks * virtual, microbatches, virtual_stages=virtual)
    total = virtual * microbatches

    def forward(rank, k):
        chunk = (k % (ranks * virtual)) // ranks
        return Action("F", chunk * ranks + rank, (k // (ranks * virtual)) * ranks + k % ranks)

    def backward(rank, k):
        chunk = virtual - 1 - (k % (ranks * virtual)) // ranks
        return Action("B", chunk * ranks + rank, (k // (ranks * virtual)) * ranks + k % ranks)

    for rank in range(ranks):
        warmup = min(total, 2 * (ranks - rank - 1) + (virtual - 1) * ranks)
        expected = [forward(rank, k) for k in range(warmup)]
        for k in range(total - warmup):
            expected += [forward(rank, k + warmup), backward(rank, k)]
        expected += [backward(rank, k) for k in range(total - warmup, total)]
        assert list(schedule.orders[rank]) == expected


@pytest.mark.parametrize("ranks, microbatches", [(1, 1), (1, 5), (3, 7), (4, 2), (5, 5), (8, 16)])
def test_one_virtual_stage_is_1f1b(ranks, microbatches):
    for backward in ("full", "split", "none"):
        got = interleaved(ranks, microbatches, virtual_stages=1, backward=backward)
        assert got.orders == one_f_one_b(ranks, microbatches, backward=backward).orders


@settings(max_examples=80, deadline=None)
@given(
    ranks=st.integers(1, 8),
    virtual=st.integers(1, 4),
    rounds=st.integers(1, 4),
    forward=st.sampled_from([0.5, 1.0, 2.0, 3.0]),
    backward=st.sampled_from([1.0, 2.0, 3.0]),
)
def test_uniform_bubble_is_p_minus_one_times_f_plus_b_over_v(ranks, virtual, rounds, forward, backward):
    # F and B are a rank's per-microbatch totals; each of its v chunks costs F/v and B/v.
    microbatches = rounds * ranks
    num_stages = ranks * virtual
    costs = StageCosts([forward / virtual] * num_stages, [backward / virtual] * num_stages)
    timeline = simulate(interleaved(num_stages, microbatches, virtual_stages=virtual), costs)
    expected = (ranks - 1) * (forward + backward) / virtual
    idle = timeline.makespan - timeline.busy
    assert idle == pytest.approx([expected] * ranks, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(1, 16), virtual=st.integers(1, 4), microbatches=st.integers(1, 64))
def test_peak_inflight_equals_the_documented_bound(ranks, virtual, microbatches):
    num_stages = ranks * virtual
    schedule = interleaved(num_stages, microbatches, virtual_stages=virtual)
    timeline = simulate(schedule, StageCosts.uniform(num_stages))
    assert timeline.peak_inflight == tuple(
        interleaved_peak_inflight(rank, ranks, microbatches, virtual) for rank in range(ranks)
    )


def test_peak_inflight_for_m_multiple_of_p_matches_megatron_warmup_plus_one():
    # P = 4, v = 2, m = 8: rank r holds 2·(4 − r − 1) + 4 + 1 chunk activations.
    assert [interleaved_peak_inflight(r, 4, 8, 2) for r in range(4)] == [11, 9, 7, 5]


def test_microbatch_groups_hold_at_least_p_when_m_is_at_least_p():
    for ranks in range(1, 17):
        for microbatches in range(ranks, 65):
            groups = microbatch_groups(microbatches, ranks)
            assert sum(groups) == microbatches
            assert min(groups) >= ranks
            assert max(groups) - min(groups) <= 1
            if microbatches % ranks == 0:
                assert groups == [ranks] * (microbatches // ranks)


def test_fewer_microbatches_than_ranks_still_gives_a_valid_schedule():
    schedule = interleaved(8, 3, virtual_stages=2)   # P = 4, m = 3 < P
    schedule.validate()
    assert sorted(a for o in schedule.orders for a in o) == sorted(schedule.expected_actions())


def test_split_backward_puts_w_after_its_b():
    schedule = interleaved(6, 6, virtual_stages=2, backward="split").validate()
    for order in schedule.orders:
        for index, action in enumerate(order):
            if action.kind == "B":
                assert order[index + 1] == Action("W", action.stage, action.microbatch)


def test_stages_not_a_multiple_of_virtual_stages_is_rejected():
    with pytest.raises(InvalidInputError, match="num_stages = 6 must be a multiple of virtual_stages = 4"):
        interleaved(6, 8, virtual_stages=4)


def test_bad_virtual_stages_is_rejected():
    with pytest.raises(InvalidInputError, match="virtual_stages must be >= 1, got 0"):
        interleaved(4, 8, virtual_stages=0)


def test_registered_with_build_schedule():
    schedule = build_schedule("interleaved", num_stages=8, num_microbatches=8, virtual_stages=2)
    assert schedule.name == "interleaved"
    assert schedule.num_ranks == 4
    assert schedule.stages_of(1) == (1, 5)
