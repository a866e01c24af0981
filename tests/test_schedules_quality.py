"""Adaptive's objectives against the zero-bubble paper, the repair pass and the lower bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import CommModel, InvalidInputError, StageCosts, analytic, build_schedule, simulate
from pipeplan.schedule import Kind
from pipeplan.schedules.adaptive import adaptive, adaptive_candidates, best_candidate, minimum_memory_limit
from pipeplan.schedules.refine import refine

# The zero-bubble paper's 1.5B rows (Qi et al., ICLR 2024, appendix table): p = 8,
# h = 2304, a = 24, s = 1024; M_B = 34h + 5as and M_W = 32h per token (its Table 1).
H, A, S, P = 2304, 24, 1024, 8
M_B, M_W = 34 * H + 5 * A * S, 32 * H


def _paper_costs(forward, backward, weight):
    return StageCosts([forward] * P, [backward + weight] * P, [weight] * P,
                      activation_bytes=[M_B] * P, weight_stash_bytes=[M_W] * P)


@pytest.mark.parametrize(
    ("m", "f", "b", "w", "c", "k", "paper"),
    [
        (24, 18.522, 18.086, 9.337, 0.601, 1, 0.1585),  # ZB-1p
        (24, 18.522, 18.086, 9.337, 0.601, 2, 0.0433),  # ZB-2p
        (32, 18.513, 18.086, 9.331, 0.626, 2, 0.0039),  # ZB-2p
    ],
)
def test_span_objective_matches_the_papers_automatic_schedule(m, f, b, w, c, k, paper):
    costs, comm = _paper_costs(f, b, w), CommModel(latency=c)
    schedule = adaptive(P, m, costs=costs, comm=comm, memory_limit=k * P * M_B, objective="span")
    timeline = simulate(schedule, costs, comm)
    assert max(timeline.peak_bytes) <= k * P * M_B * (1 + 1e-9)
    assert timeline.span_bubble_rate <= paper + 0.001


def test_makespan_objective_reaches_the_bound_with_its_fill_term():
    # The last rank cannot start before 7·(F + C); then it has m·(F + B + W) of work.
    f, b, w, c, m = 18.522, 18.086, 9.337, 0.601, 24
    costs, comm = _paper_costs(f, b, w), CommModel(latency=c)
    schedule = adaptive(P, m, costs=costs, comm=comm, memory_limit=2 * P * M_B)
    bound = analytic.makespan_lower_bound(schedule, costs, comm)
    assert bound == pytest.approx(7 * (f + c) + m * (f + b + w))
    assert simulate(schedule, costs, comm).makespan == pytest.approx(bound, rel=1e-9)


def test_each_objective_is_no_worse_than_the_other_on_its_own_metric():
    f, b, w, c, m = 18.522, 18.086, 9.337, 0.601, 24
    costs, comm = _paper_costs(f, b, w), CommModel(latency=c)
    by_span = simulate(adaptive(P, m, costs=costs, comm=comm, memory_limit=2 * P * M_B, objective="span"),
                       costs, comm)
    by_makespan = simulate(adaptive(P, m, costs=costs, comm=comm, memory_limit=2 * P * M_B), costs, comm)
    assert by_span.spans.max() <= by_makespan.spans.max() * (1 + 1e-9)
    assert by_makespan.makespan <= by_span.makespan * (1 + 1e-9)


def test_ties_on_the_objective_go_to_the_other_metric_then_to_memory():
    costs = StageCosts([1.0] * 4)
    candidates = adaptive_candidates(4, 8, costs=costs, memory_limit=8)
    chosen = best_candidate(candidates, "makespan")
    fastest = min(c.timeline.makespan for c in candidates if c.fits)
    tied = [c for c in candidates if c.fits and c.timeline.makespan <= fastest * (1 + 1e-9)]
    assert chosen in tied
    assert chosen.timeline.spans.max() <= min(c.timeline.spans.max() for c in tied) * (1 + 1e-9)


def test_unknown_objective_is_rejected():
    with pytest.raises(InvalidInputError, match="objective must be 'makespan' or 'span'"):
        adaptive(4, 8, costs=StageCosts([1.0] * 4), objective="throughput")


@st.composite
def split_problems(draw):
    ranks = draw(st.integers(2, 5))
    microbatches = draw(st.integers(1, 10))
    times = st.floats(0.5, 5.0, allow_nan=False)
    forward = draw(st.lists(times, min_size=ranks, max_size=ranks))
    backward = [f * draw(st.floats(1.5, 2.5)) for f in forward]
    weight = [x * draw(st.floats(0.2, 0.5)) for x in backward]
    costs = StageCosts(forward, backward, weight, weight_stash_bytes=[0.4] * ranks)
    comm = draw(st.sampled_from([CommModel(latency=0.2), CommModel(latency=0.2, send_mode="rendezvous")]))
    name = draw(st.sampled_from(["zb-h1", "zb-h2", "1f1b-split"]))
    objective = draw(st.sampled_from(["makespan", "span"]))
    return ranks, microbatches, costs, comm, name, objective


@settings(max_examples=40, deadline=None)
@given(split_problems())
def test_refine_never_worsens_keeps_validity_and_memory(problem):
    ranks, microbatches, costs, comm, name, objective = problem
    if name == "1f1b-split":
        schedule = build_schedule("1f1b", num_stages=ranks, num_microbatches=microbatches, backward="split")
    else:
        schedule = build_schedule(name, num_stages=ranks, num_microbatches=microbatches)
    try:
        before = simulate(schedule, costs, comm)
    except Exception:  # a template that deadlocks under blocking sends has nothing to repair
        return
    limit = max(before.peak_bytes)
    better, timeline = refine(schedule, costs, comm, memory_limit=limit, objective=objective)
    better.validate()
    assert sorted(a for order in better.orders for a in order) == sorted(a for order in schedule.orders for a in order)
    assert [a for order in better.orders for a in order if a.kind is not Kind.W] == [
        a for order in schedule.orders for a in order if a.kind is not Kind.W
    ]  # only W passes move
    again = simulate(better, costs, comm)
    assert again.makespan == timeline.makespan
    assert max(again.peak_bytes) <= limit * (1 + 1e-9)
    value = (lambda t: t.makespan) if objective == "makespan" else (lambda t: float(t.spans.max()))
    assert value(again) <= value(before) * (1 + 1e-9)


def test_refine_leaves_full_backward_orders_alone():
    schedule = build_schedule("1f1b", num_stages=4, num_microbatches=8)
    costs = StageCosts([1.0, 2.0, 1.0, 3.0])
    better, _ = refine(schedule, costs)
    assert better is schedule


# ------------------------------------------------------------------ lower bound
@st.composite
def bound_problems(draw):
    ranks = draw(st.integers(1, 5))
    name = draw(st.sampled_from(["gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved", "zb-v", "adaptive"]))
    stages = 2 * ranks if name in ("interleaved", "zb-v") else ranks
    microbatches = draw(st.integers(1, 10))
    forward = draw(st.lists(st.floats(0.1, 5.0), min_size=stages, max_size=stages))
    costs = StageCosts(forward, [f * draw(st.floats(1.2, 3.0)) for f in forward])
    comm = CommModel(latency=draw(st.sampled_from([0.0, 0.3, 2.0])))
    options = {"virtual_stages": 2} if name == "interleaved" else {}
    if name == "adaptive":
        options = {"costs": costs, "comm": comm}
    schedule = build_schedule(name, num_stages=stages, num_microbatches=microbatches, **options)
    return schedule, costs, comm


@settings(max_examples=80, deadline=None)
@given(bound_problems())
def test_no_schedule_beats_the_lower_bound(problem):
    schedule, costs, comm = problem
    assert simulate(schedule, costs, comm).makespan >= analytic.makespan_lower_bound(schedule, costs, comm) * (1 - 1e-9)


def test_bound_counts_the_fill_a_rank_waits_before_its_first_input():
    # Four equal stages, 1F1B, m = 1: the bound is the critical path, and with m = 8
    # the last rank waits 3·(F + C) before it can start its 8·(F + B) of work.
    costs = StageCosts([1.0] * 4, [2.0] * 4)
    comm = CommModel(latency=0.5)
    schedule = build_schedule("1f1b", num_stages=4, num_microbatches=8)
    assert analytic.makespan_lower_bound(schedule, costs, comm) == pytest.approx(3 * 1.5 + 8 * 3.0 + 3 * 2.5)


def test_minimum_limit_is_still_reachable_with_either_objective():
    costs = StageCosts([3.0, 1.0, 1.0, 2.0])
    smallest = minimum_memory_limit(costs, [0, 1, 2, 3])
    for objective in ("makespan", "span"):
        timeline = simulate(adaptive(4, 6, costs=costs, memory_limit=smallest, objective=objective), costs)
        assert max(timeline.peak_bytes) <= smallest + 1e-9


def test_cli_takes_the_objective_for_adaptive_and_refuses_it_elsewhere(capsys):
    from pipeplan.cli import main

    argv = ["simulate", "--forward", "30,10,10,20", "-m", "8", "--json"]
    assert main([*argv, "--schedule", "adaptive", "--memory-limit", "4", "--objective", "span"]) == 0
    assert '"makespan"' in capsys.readouterr().out
    assert main([*argv, "--schedule", "1f1b", "--objective", "span"]) == 2
    assert "--objective does not apply to schedule '1f1b'" in capsys.readouterr().err
