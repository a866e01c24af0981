"""ZB-H1, ZB-H2 and ZB-V against the zero-bubble paper (Qi et al., ICLR 2024).

Assumptions of the closed-form tests (the paper's Table 2 setting): every stage
has the same F, B (input gradient) and W (weight gradient) times, there is no
communication, and the bubble is the paper's ``span − m·(F + B + W)`` where span
is the largest per-rank span. The formulas are exact for

* ZB-H1, ``(P − 1)(F + B − W)``: ``m >= P`` and ``W <= F``;
* ZB-H2, ``(P − 1)(F + B − 2W)``: ``m >= 2P − 1``, ``W <= F`` and ``2W <= F + B``
  (the bubble cannot go below 0);

and in particular for the paper's ``F = B = W``. Times are drawn from multiples
of 0.5 so float sums stay exact.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeplan import Action, InvalidInputError, StageCosts, build_schedule, simulate
from pipeplan.schedules.zb_v import zb_v, zb_v_peak_inflight
from pipeplan.schedules.zero_bubble import zb_h1, zb_h1_peak_inflight, zb_h2, zb_h2_peak_inflight

halves = st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])


def _uniform(num_stages: int, forward: float, input_grad: float, weight: float) -> StageCosts:
    return StageCosts.uniform(num_stages, forward=forward, backward=input_grad + weight, weight=weight)


def _paper_bubble(timeline, microbatches, forward, input_grad, weight) -> float:
    return float(timeline.spans.max()) - microbatches * (forward + input_grad + weight)


def test_zb_h1_steady_triples_follow_the_paper():
    # Steady phase of ZB-H1 on stage i: (F x, I x − (P − 1 − i), W x − (P − 1)); the paper's
    # "B" is the input-gradient backward I. P = 4, m = 8, stage 1: warm-up F0 F1, then F2 I0
    # (one F I pair), then F3 I1 W0.
    order = zb_h1(4, 8).orders[1]
    labels = [a.label for a in order[:10]]
    assert labels == ["F0", "F1", "F2", "I0", "F3", "I1", "W0", "F4", "I2", "W1"]


def test_zb_h2_warmup_is_twice_as_long():
    # ZB-H2 on stage i: 2(P − 1 − i) forwards before the first I. P = 4, stage 0: 6 + 1.
    order = zb_h2(4, 8).orders[0]
    assert [a.label for a in order[:9]] == ["F0", "F1", "F2", "F3", "F4", "F5", "F6", "I0", "W0"]


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(1, 8), extra=st.integers(0, 12), forward=halves, input_grad=halves, weight=halves)
def test_zb_h1_bubble_is_p_minus_one_times_f_plus_b_minus_w(ranks, extra, forward, input_grad, weight):
    assume(weight <= forward)
    microbatches = ranks + extra
    timeline = simulate(zb_h1(ranks, microbatches), _uniform(ranks, forward, input_grad, weight))
    bubble = _paper_bubble(timeline, microbatches, forward, input_grad, weight)
    assert bubble == pytest.approx((ranks - 1) * (forward + input_grad - weight), abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(1, 8), extra=st.integers(0, 12), forward=halves, input_grad=halves, weight=halves)
def test_zb_h2_bubble_is_p_minus_one_times_f_plus_b_minus_2w(ranks, extra, forward, input_grad, weight):
    assume(weight <= forward and 2 * weight <= forward + input_grad)
    microbatches = 2 * ranks - 1 + extra
    timeline = simulate(zb_h2(ranks, microbatches), _uniform(ranks, forward, input_grad, weight))
    bubble = _paper_bubble(timeline, microbatches, forward, input_grad, weight)
    assert bubble == pytest.approx((ranks - 1) * (forward + input_grad - 2 * weight), abs=1e-9)


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_paper_equal_times_one_third_of_1f1b_and_zero(ranks):
    # F = B = W = 1: 1F1B's bubble is (P − 1)·3, ZB-H1's (P − 1)·1, ZB-H2's 0 (Table 2).
    microbatches = 3 * ranks
    costs = _uniform(ranks, 1.0, 1.0, 1.0)
    # The paper's 1F1B runs the whole backward (B + W = 2) before sending the gradient.
    one_f_one_b = simulate(build_schedule("1f1b", num_stages=ranks, num_microbatches=microbatches), costs)
    h1 = simulate(zb_h1(ranks, microbatches), costs)
    h2 = simulate(zb_h2(ranks, microbatches), costs)
    assert _paper_bubble(one_f_one_b, microbatches, 1, 1, 1) == pytest.approx(3 * (ranks - 1))
    assert _paper_bubble(h1, microbatches, 1, 1, 1) == pytest.approx(ranks - 1)
    assert _paper_bubble(h2, microbatches, 1, 1, 1) == pytest.approx(0.0)
    assert h2.span_bubble_rate == pytest.approx(0.0)


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(1, 16), microbatches=st.integers(1, 64))
def test_zb_h1_and_h2_peak_inflight_bounds(ranks, microbatches):
    costs = StageCosts.uniform(ranks)
    h1 = simulate(zb_h1(ranks, microbatches), costs)
    h2 = simulate(zb_h2(ranks, microbatches), costs)
    assert h1.peak_inflight == (zb_h1_peak_inflight(ranks, microbatches),) * ranks
    assert h2.peak_inflight == (zb_h2_peak_inflight(ranks, microbatches),) * ranks
    # ZB-H1 never exceeds 1F1B's first rank; ZB-H2 stays below twice that.
    assert max(h1.peak_inflight) == min(microbatches, ranks)
    assert max(h2.peak_inflight) <= 2 * min(microbatches, ranks)


def test_w_stash_counts_in_bytes():
    # Activations 3 bytes, stash 1: B frees 2, W the last 1. In ZB-H1's steady phase,
    # right after F(x) stage i holds P − i microbatches not yet through B (3 bytes
    # each) and i through B but waiting for W (1 byte each): 3(P − i) + i.
    costs = StageCosts([1.0] * 4, activation_bytes=[3.0] * 4, weight_stash_bytes=[1.0] * 4)
    timeline = simulate(zb_h1(4, 8), costs)
    assert timeline.peak_bytes == pytest.approx([12.0, 10.0, 8.0, 6.0])


def test_zb_v_placement_is_a_v():
    schedule = zb_v(8, 8)
    assert schedule.placement == (0, 1, 2, 3, 3, 2, 1, 0)
    assert [schedule.stages_of(r) for r in range(4)] == [(0, 7), (1, 6), (2, 5), (3, 4)]


def test_zb_v_first_rank_warms_up_then_runs_the_loss_stage():
    # Rank 0 holds stages 0 and 2P − 1 (the loss): 2P − 1 chunk-0 forwards, then
    # F I W triples on chunk 1 (no F-F pairs on rank 0).
    order = zb_v(8, 8).orders[0]
    assert list(order[:10]) == [Action("F", 0, mb) for mb in range(7)] + [
        Action("F", 7, 0), Action("I", 7, 0), Action("W", 7, 0)
    ]


def test_zb_v_last_rank_pairs_its_two_middle_stages():
    # Rank P − 1 holds stages P − 1 and P: one chunk-0 forward, then P − 1 pairs
    # (F chunk 1, F chunk 0) while the gradient of microbatch 0 comes back.
    order = zb_v(8, 8).orders[3]
    assert list(order[:7]) == [
        Action("F", 3, 0), Action("F", 4, 0), Action("F", 3, 1), Action("F", 4, 1),
        Action("F", 3, 2), Action("F", 4, 2), Action("F", 3, 3),
    ]


@settings(max_examples=40, deadline=None)
@given(ranks=st.integers(1, 8), extra=st.integers(0, 16), unit=halves)
def test_zb_v_has_no_bubble_with_equal_times(ranks, extra, unit):
    # F = B = W = unit on every chunk, m >= 2P − 1: the paper's bubble rate is 0 and
    # the step is 2m·3·unit plus the last rank's (P − 1)·unit wait.
    microbatches = 2 * ranks - 1 + extra
    costs = _uniform(2 * ranks, unit, unit, unit)
    timeline = simulate(zb_v(2 * ranks, microbatches), costs)
    assert timeline.span_bubble_rate == pytest.approx(0.0, abs=1e-12)
    assert timeline.makespan == pytest.approx(6 * unit * microbatches + (ranks - 1) * unit)


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(1, 16), microbatches=st.integers(1, 64))
def test_zb_v_peak_inflight_bound(ranks, microbatches):
    timeline = simulate(zb_v(2 * ranks, microbatches), StageCosts.uniform(2 * ranks))
    assert timeline.peak_inflight == tuple(
        zb_v_peak_inflight(rank, ranks, microbatches) for rank in range(ranks)
    )
    if microbatches >= 2 * ranks - 1:
        # 2P half-size chunks: the same bytes as 1F1B's first rank holding P full stages.
        assert set(timeline.peak_inflight) == {2 * ranks}


@pytest.mark.parametrize("factory", [zb_h1, zb_h2, zb_v])
def test_zero_bubble_schedules_need_a_split_backward(factory):
    with pytest.raises(InvalidInputError, match="backward must be 'split'"):
        factory(4, 4, backward="full")


def test_zb_v_needs_an_even_number_of_stages():
    with pytest.raises(InvalidInputError, match="num_stages must be even for zb-v"):
        zb_v(5, 4)


@pytest.mark.parametrize("name", ["zb-h1", "zb-h2", "zb-v"])
def test_registered_and_split(name):
    schedule = build_schedule(name, num_stages=4, num_microbatches=6)
    assert schedule.name == name
    assert schedule.split_backward
