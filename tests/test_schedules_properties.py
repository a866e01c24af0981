"""Properties every schedule generator shares, over P in 1..16, m in 1..64 and v in 1..4.

Each generator that accepts a shape must return a complete, valid order whose peak
in-flight count equals the bound in its docstring, and whose simulated step is
never shorter than :func:`pipeplan.analytic.makespan_lower_bound`.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipeplan import SCHEDULES, StageCosts, analytic, build_schedule, simulate
from pipeplan.schedules.interleaved import interleaved_peak_inflight
from pipeplan.schedules.zb_v import zb_v_peak_inflight
from pipeplan.schedules.zero_bubble import zb_h1_peak_inflight, zb_h2_peak_inflight

_SLACK = 1e-6


def _shape(name: str, ranks: int, virtual: int) -> tuple[int, dict]:
    """(num_stages, options) for ``name`` on ``ranks`` ranks."""
    if name == "interleaved":
        return ranks * virtual, {"virtual_stages": virtual}
    if name == "zb-v":
        return 2 * ranks, {}
    return ranks, {}


def _documented_peak(name: str, ranks: int, microbatches: int, virtual: int) -> tuple[int, ...]:
    if name == "gpipe":
        return (microbatches,) * ranks
    if name == "1f1b":
        return tuple(analytic.one_f_one_b_peak_inflight(r, ranks, microbatches) for r in range(ranks))
    if name == "interleaved":
        return tuple(interleaved_peak_inflight(r, ranks, microbatches, virtual) for r in range(ranks))
    if name == "zb-h1":
        return (zb_h1_peak_inflight(ranks, microbatches),) * ranks
    if name == "zb-h2":
        return (zb_h2_peak_inflight(ranks, microbatches),) * ranks
    if name == "zb-v":
        return tuple(zb_v_peak_inflight(r, ranks, microbatches) for r in range(ranks))
    raise AssertionError(f"no documented bound for {name}")


FIXED = ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"]


def test_every_registered_name_is_covered():
    # adaptive and dual-rate have their own property tests (test_schedules_adaptive.py, test_schedules_dual_rate.py)
    assert set(SCHEDULES) == set(FIXED) | {"adaptive", "dual-rate"}


@pytest.mark.parametrize("name", FIXED)
@settings(max_examples=100, deadline=None)
@given(
    ranks=st.integers(1, 16),
    microbatches=st.integers(1, 64),
    virtual=st.integers(1, 4),
    seed_costs=st.lists(st.floats(0.5, 4.0), min_size=3, max_size=3),
)
@example(ranks=16, microbatches=64, virtual=4, seed_costs=[1.0, 2.5, 0.5])   # the largest shape
@example(ranks=16, microbatches=1, virtual=4, seed_costs=[1.0, 2.5, 0.5])    # m < P
@example(ranks=16, microbatches=15, virtual=3, seed_costs=[3.0, 1.0, 1.0])   # m = P − 1
@example(ranks=7, microbatches=30, virtual=2, seed_costs=[1.0, 1.0, 2.0])    # m not a multiple of P
def test_fixed_schedules_are_valid_complete_and_meet_their_memory_bound(name, ranks, microbatches, virtual, seed_costs):
    num_stages, options = _shape(name, ranks, virtual)
    schedule = build_schedule(name, num_stages=num_stages, num_microbatches=microbatches, **options)
    schedule.validate()
    actions = [a for order in schedule.orders for a in order]
    assert len(actions) == len(set(actions))
    assert sorted(actions) == sorted(schedule.expected_actions())
    assert schedule.num_ranks == ranks
    # Unequal costs: a three-value pattern repeated over the stages.
    forward = [seed_costs[s % 3] for s in range(num_stages)]
    costs = StageCosts(forward, [2 * f for f in forward], [f for f in forward])
    timeline = simulate(schedule, costs)
    assert timeline.peak_inflight == _documented_peak(name, ranks, microbatches, virtual)
    assert timeline.makespan >= analytic.makespan_lower_bound(schedule, costs) - _SLACK
    assert -_SLACK <= timeline.bubble_ratio < 1.0
    assert -_SLACK <= timeline.span_bubble_rate < 1.0


@settings(max_examples=40, deadline=None)
@given(
    ranks=st.integers(1, 6),
    microbatches=st.integers(1, 12),
    limit_extra=st.one_of(st.none(), st.integers(0, 6)),
    backward=st.sampled_from(["split", "full"]),
)
def test_adaptive_is_valid_complete_and_within_its_limit(ranks, microbatches, limit_extra, backward):
    costs = StageCosts([float(1 + (s * 7) % 5) for s in range(ranks)])
    limit = None if limit_extra is None else 1 + limit_extra
    schedule = build_schedule("adaptive", num_stages=ranks, num_microbatches=microbatches, costs=costs,
                              memory_limit=limit, backward=backward)
    schedule.validate()
    assert sorted(a for o in schedule.orders for a in o) == sorted(schedule.expected_actions())
    timeline = simulate(schedule, costs)
    if limit is not None:
        assert max(timeline.peak_inflight) <= limit
    assert timeline.makespan >= analytic.makespan_lower_bound(schedule, costs) - _SLACK


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "zb-h2"])
@pytest.mark.parametrize("ranks, microbatches", [(1, 1), (1, 7), (5, 1), (16, 3)])
def test_degenerate_shapes(name, ranks, microbatches):
    schedule = build_schedule(name, num_stages=ranks, num_microbatches=microbatches)
    timeline = simulate(schedule, StageCosts.uniform(ranks))
    assert timeline.peak_inflight == _documented_peak(name, ranks, microbatches, 1)
