"""The schedule registry: each name's ScheduleInfo agrees with the schedule it builds."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipeplan import limits
from pipeplan.errors import InvalidInputError
from pipeplan.schedule import Kind
from pipeplan.schedules import (
    check_schedule_size,
    planned_schedules,
    SCHEDULES,
    ScheduleInfo,
    backward_mode,
    build_schedule,
    register_schedule,
    schedule_info,
    schedule_options,
)
from pipeplan.schedules.adaptive import ADAPTIVE_BYTES_PER_ACTION
from pipeplan.schedules.gpipe import gpipe
from pipeplan.schedules.inflight import build_with_costs, inflight_per_stage
from pipeplan.schedules.interleaved import interleaved
from pipeplan.schedules.patterns import loop_placement, v_placement


def _counted_inflight(schedule) -> tuple[int, ...]:
    """Per stage, the most microbatches between a forward and its last backward piece, walking the orders."""
    peak = [0] * schedule.num_stages
    for order in schedule.orders:
        live = [0] * schedule.num_stages
        for action in order:
            if action.kind == "F":
                live[action.stage] += 1
                peak[action.stage] = max(peak[action.stage], live[action.stage])
            elif action.kind in ("B", "W"):
                live[action.stage] -= 1
    return (0,) * schedule.num_stages if schedule.forward_only else tuple(peak)


def _built(name: str, pp: int, virtual: int, micro: int):
    info = schedule_info(name)
    stages = info.stages_for(pp, virtual)
    try:
        return info, build_with_costs(name, stages, micro, info.shape_options(virtual), None)
    except InvalidInputError:
        assume(False)  # a shape the generator refuses (dual-rate: m a multiple of its rate ratio, two stages)
        raise


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(SCHEDULES)), pp=st.integers(1, 4), virtual=st.integers(1, 3),
       micro=st.integers(1, 8))
def test_metadata_matches_the_built_schedule(name, pp, virtual, micro):
    info, built = _built(name, pp, virtual, micro)
    assert built.num_stages == info.stages_for(pp, virtual)
    assert built.num_ranks == pp
    assert built.placement == info.placement(pp, virtual)
    assert built.split_backward == info.split_backward
    counted = _counted_inflight(built)
    assert inflight_per_stage(name, built.num_stages, micro, **info.shape_options(virtual)) == counted
    if info.inflight_closed_form is not None:
        assert info.inflight_closed_form(built.num_stages, micro) == counted
    assert info.cost_aware == ("costs" in schedule_options(name))
    assert info.default_backward == backward_mode(name)


def test_every_entry_says_its_shape():
    shapes = {name: (schedule_info(name).layout, schedule_info(name).split_backward) for name in SCHEDULES}
    assert shapes == {
        "gpipe": ("one", False), "1f1b": ("one", False), "interleaved": ("loop", False),
        "zb-h1": ("one", True), "zb-h2": ("one", True), "zb-v": ("v", True),
        "adaptive": ("one", True), "dual-rate": ("one", False),
    }
    adaptive = schedule_info("adaptive")
    assert adaptive.cost_aware and adaptive.any_placement
    assert (adaptive.fixed_template(1), adaptive.fixed_template(3)) == ("1f1b", "interleaved")
    assert schedule_info("zb-v").fixed_template(2) == "zb-v"
    assert [schedule_info(n).label(2) for n in ("interleaved", "adaptive", "zb-v")] == [
        "interleaved v=2", "adaptive v=2", "zb-v"]
    assert schedule_info("adaptive").label(1) == "adaptive"
    assert schedule_info("dual-rate").updates_in_step and not schedule_info("1f1b").updates_in_step
    assert backward_mode("dual-rate") == "split"  # three kinds to count for the size check (F, B, U)


def test_patterns():
    assert loop_placement(3, 2) == (0, 1, 2, 0, 1, 2)
    assert loop_placement(3, 1) == (0, 1, 2)
    assert v_placement(3, 2) == (0, 1, 2, 2, 1, 0)
    assert v_placement(2, 3) == (0, 1, 1, 0, 0, 1)
    assert schedule_info("interleaved").shape_options(3) == {"virtual_stages": 3}
    assert schedule_info("zb-v").shape_options(3) == {}


def test_unknown_names_are_refused_like_build_schedule():
    with pytest.raises(InvalidInputError, match="schedule must be one of .*got 'nope'"):
        schedule_info("nope")
    with pytest.raises(InvalidInputError, match="schedule must be one of"):
        schedule_info(["1f1b"])  # type: ignore[arg-type]


def test_a_bare_factory_gets_the_metadata_of_its_signature(monkeypatch):
    def mine(num_stages, num_microbatches, *, costs=None, backward="full"):
        return build_schedule("1f1b", num_stages=num_stages, num_microbatches=num_microbatches, backward=backward)

    register_schedule("mine", mine)
    try:
        info = schedule_info("mine")
        assert (info.name, info.factory, info.layout, info.split_backward, info.cost_aware) == (
            "mine", mine, "one", False, True)
        assert info.stages_for(4, 3) == 4 and info.placement(4, 3) == (0, 1, 2, 3)
        assert info.inflight_closed_form is None
    finally:
        del SCHEDULES["mine"]
    with pytest.raises(InvalidInputError):
        schedule_info("mine")
    # a factory put into SCHEDULES directly is read off the new factory, not the old entry
    monkeypatch.setitem(SCHEDULES, "interleaved", gpipe)
    assert schedule_info("interleaved").layout == "one"
    monkeypatch.setitem(SCHEDULES, "interleaved", interleaved)
    # put back, it is the registered entry again (a loop), not a bare reading of the factory
    assert schedule_info("interleaved").factory is interleaved and schedule_info("interleaved").layout == "loop"


def test_an_info_registers_with_its_metadata_and_build_cost(monkeypatch):
    info = ScheduleInfo("anything", interleaved, layout="loop", build_bytes_per_action=ADAPTIVE_BYTES_PER_ACTION)
    register_schedule("looped", info)
    try:
        assert schedule_info("looped").name == "looped" and schedule_info("looped").stages_for(2, 3) == 6
        built = build_schedule("looped", num_stages=6, num_microbatches=4, **schedule_info("looped").shape_options(3))
        assert built.placement == schedule_info("looped").placement(2, 3)
        actions = limits.action_count(4, 100, "full")
        monkeypatch.setattr(limits, "available_memory", lambda: actions * limits.SCHEDULE_BYTES_PER_ACTION * 1.5)
        check_schedule_size("1f1b", num_stages=4, num_microbatches=100, backward="full")
        with pytest.raises(InvalidInputError):
            check_schedule_size("looped", num_stages=4, num_microbatches=100, backward="full")
    finally:
        del SCHEDULES["looped"]


def test_kind_predicates():
    assert [k.value for k in Kind if k.is_forward] == ["F"]
    assert [k.value for k in Kind if k.releases_activation] == ["B", "W"]
    for schedule in (build_schedule("1f1b", num_stages=3, num_microbatches=4),
                     build_schedule("zb-h1", num_stages=3, num_microbatches=4)):
        assert schedule.gradient_kind in (Kind.B, Kind.I)


def test_source_index_is_the_one_override_point_of_both_validation_paths():
    import numpy as np

    from pipeplan.schedule import Action

    dual = build_schedule("dual-rate", num_stages=3, num_microbatches=8, rate_ratio=4, vision_stages=2)
    assert dual.dependencies(Action("F", 2, 5)) == (Action("F", 1, 1),)   # step 5 reads frame 1
    assert dual.dependencies(Action("B", 1, 1)) == (Action("F", 1, 1), Action("B", 2, 7))  # the window's last step
    actions = [a for order in dual.orders for a in order]
    stage = np.array([a.stage for a in actions])
    index = np.array([a.microbatch for a in actions])
    for other in (stage - 1, stage + 1):
        inside = (other >= 0) & (other < dual.num_stages)
        vector = dual.source_index(stage[inside], other[inside], index[inside])
        assert vector.tolist() == [dual.source_index(int(s), int(o), int(i))
                                   for s, o, i in zip(stage[inside], other[inside], index[inside])]
    assert dual.expected_count() == len(dual.expected_actions())
    assert dual.validate() is dual
    plain = build_schedule("1f1b", num_stages=3, num_microbatches=4)
    assert plain.source_index(0, 1, 3) == 3 and plain.expected_count() == len(plain.expected_actions())


def test_the_planner_plans_every_schedule_but_those_whose_info_says_why_not():
    assert "dual-rate" not in planned_schedules() and "zb-v" in planned_schedules()
    assert all(schedule_info(name).not_planned is None for name in planned_schedules())
    assert "stale gradients" in (schedule_info("dual-rate").not_planned or "")
    register_schedule("unplanned", ScheduleInfo("unplanned", gpipe, not_planned="a test says so"))
    try:
        assert "unplanned" not in planned_schedules()
        from pipeplan.planner.space import SearchSpace
        with pytest.raises(InvalidInputError, match="'unplanned' is not planned: a test says so"):
            SearchSpace(num_gpus=8, global_batch=64, num_layers=8, schedules=("unplanned",))
    finally:
        del SCHEDULES["unplanned"]
