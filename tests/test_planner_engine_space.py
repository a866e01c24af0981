"""``--engine`` narrows the search to what the engine runs (issue 31, item 2: "the search spans only what
the chosen engine runs"), and a schedule or mode it lacks is one line naming the flag."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pipeplan import engines
from pipeplan.errors import InvalidInputError
from pipeplan.planner import Cluster, SearchOptions, Workload, search

from _planner_models import tiny_spec_workload


@pytest.fixture(scope="module")
def work() -> tuple[Workload, Cluster]:
    return tiny_spec_workload()


@pytest.mark.parametrize("name", engines.names())
def test_every_plan_is_one_the_engine_runs(work: tuple[Workload, Cluster], name: str) -> None:
    workload, cluster = work
    result = search(workload, cluster, 64, SearchOptions(engine=name, top=30, pp=2))
    runs = engines.get(name).runs
    for plan in result.plans:
        assert runs.schedules is None or plan.schedule in runs.schedules
        if plan.dp > 1:
            allowed = runs.dp_modes_with_pipeline if plan.pp > 1 else runs.dp_modes_without_pipeline
            assert allowed is None or plan.dp_mode in allowed
        assert not engines.get(name).refusal(plan), (name, plan.schedule, plan.dp_mode)


def test_without_an_engine_the_search_is_unchanged(work: tuple[Workload, Cluster]) -> None:
    workload, cluster = work
    wide = search(workload, cluster, 64, SearchOptions(top=30, pp=2))
    narrow = search(workload, cluster, 64, SearchOptions(top=30, pp=2, engine="deepspeed"))
    assert {p.schedule for p in narrow.plans} == {"1f1b"}
    assert {p.schedule for p in wide.plans} - {"1f1b"}  # the others win without the engine


def test_modes_only_without_a_pipeline_search_pp_1(work: tuple[Workload, Cluster]) -> None:
    workload, cluster = work
    result = search(workload, cluster, 64, SearchOptions(engine="deepspeed", dp_modes=("zero2",), top=5))
    assert {plan.pp for plan in result.plans} == {1}
    assert {plan.dp_mode for plan in result.plans if plan.dp > 1} == {"zero2"}
    with pytest.raises(InvalidInputError, match="only without a pipeline"):
        search(workload, cluster, 64, SearchOptions(engine="deepspeed", dp_modes=("zero2",), pp=2))


@pytest.mark.parametrize("options, flag", [
    (SearchOptions(engine="deepspeed", schedules=("zb-v",)), "--schedules zb-v: deepspeed runs only 1f1b"),
    (SearchOptions(engine="deepspeed", dp_modes=("hsdp",)), "--dp-modes hsdp: deepspeed runs only"),
    (SearchOptions(engine="nonesuch"), "engine must be one of"),
])
def test_what_the_engine_lacks_is_one_line(work: tuple[Workload, Cluster], options: SearchOptions,
                                           flag: str) -> None:
    workload, cluster = work
    with pytest.raises(InvalidInputError, match=flag):
        search(workload, cluster, 64, options)


def test_a_dropped_schedule_is_a_note(work: tuple[Workload, Cluster]) -> None:
    workload, cluster = work
    result = search(workload, cluster, 64, SearchOptions(engine="megatron", schedules=("zb-v", "1f1b"), top=3))
    assert any("megatron does not run zb-v" in note for note in result.notes)


def test_cli_refuses_a_schedule_the_engine_lacks(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    code, out, err = run_cli("plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64",
                             "--engine", "deepspeed", "--schedules", "zb-v")
    assert code == 2 and err.strip().count("\n") == 0
    assert "--schedules zb-v: deepspeed runs only 1f1b" in err
