"""Every schedule's exported CSV runs in torch's own ``_PipelineScheduleRuntime`` and gives one process's gradients.

Each case writes the torch export (``schedule.csv``) of a plan; 2 gloo processes (one pair for
every case, spawned once per module) build their stages from ``STAGE_TO_RANK`` and run
``_load_csv`` + ``step``, and each test compares every parameter's gradient with a single process
running the same microbatches.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import pipeplan
from pipeplan import build_schedule
from pipeplan.layers import LayerProfile
from pipeplan.partition.placement import place_chunks
from pipeplan.engines import export_files
from pipeplan.plan import Plan
from pipeplan.schedule import Schedule

torch = pytest.importorskip("torch")

_WIDTH, _BATCH, _SEED = 6, 8, 0


def _model(num_layers: int):
    torch.manual_seed(_SEED)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(_WIDTH, _WIDTH), torch.nn.Tanh())
                                 for _ in range(num_layers)])


def _data():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(_BATCH, _WIDTH, generator=generator), torch.randn(_BATCH, _WIDTH, generator=generator)


def _loss(output, target):
    return torch.nn.functional.mse_loss(output, target, reduction="sum")


def _worker(rank: int, world: int, rendezvous: str, jobs: list[tuple[str, str, list[int], list[int], int]]) -> None:
    """Each job (case, folder, layers per stage, placement, m): this rank's stages run the folder's CSV; its
    gradients go to ``grads{rank}.pt`` there. One process group serves every job, one job after the other."""
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    try:
        for case, folder, sizes, placement, m in jobs:
            try:
                model = _model(sum(sizes))
                bounds = [sum(sizes[:s]) for s in range(len(sizes) + 1)]
                stages = []
                for stage, owner in enumerate(placement):
                    if owner == rank:
                        module = torch.nn.Sequential(*[model[i] for i in range(bounds[stage], bounds[stage + 1])])
                        stages.append(PipelineStage(module, stage, len(sizes), torch.device("cpu")))
                schedule = _PipelineScheduleRuntime(stages, m, loss_fn=_loss, scale_grads=False)
                schedule._load_csv(os.path.join(folder, "schedule.csv"))
                inputs, target = _data()
                has_first, has_last = placement[0] == rank, placement[-1] == rank
                schedule.step(inputs if has_first else None, target=target if has_last else None)
                grads = {f"{i}.{name}": p.grad for i in range(sum(sizes)) for name, p in model[i].named_parameters()
                         if p.grad is not None}
                torch.save(grads, os.path.join(folder, f"grads{rank}.pt"))
            except Exception as error:
                raise RuntimeError(f"case {case}: {error}") from error
    finally:
        dist.destroy_process_group()


def _reference(num_layers: int, m: int) -> dict:
    model = _model(num_layers)
    inputs, target = _data()
    for x, y in zip(inputs.chunk(m), target.chunk(m)):
        _loss(model(x), y).backward()
    return {f"{i}.{name}": p.grad for i in range(num_layers) for name, p in model[i].named_parameters()}


def _cases() -> dict[str, tuple[Plan, Schedule]]:
    """(plan, schedule) of each case, by test id: the templates on 2 ranks, and an adaptive order over chunks."""
    cases = {}
    for name, virtual in (("1f1b", 1), ("interleaved", 2), ("zb-h1", 1), ("zb-v", 2)):
        num_stages = 2 * virtual
        schedule = build_schedule(name, num_stages=num_stages, num_microbatches=4,
                                  **({"virtual_stages": virtual} if name == "interleaved" else {}))
        cases[f"{name}-{virtual}"] = (Plan(pp=2, dp=1, layers_per_stage=(2,) * num_stages,
                                           placement=schedule.placement, schedule=name, num_microbatches=4),
                                      schedule)
    profile = LayerProfile.from_costs([6.0] + [2.0] * 7)
    plan = place_chunks(profile, 2, 2)
    costs = profile.stage_costs(plan.layers_per_stage)
    cases["adaptive"] = (plan, build_schedule("adaptive", num_stages=4, num_microbatches=4, costs=costs,
                                              placement=plan.placement))
    return cases


@pytest.fixture(scope="module")
def torch_differences(tmp_path_factory: pytest.TempPathFactory) -> dict[str, float]:
    """Every case's torch export run on its ranks: the largest gradient difference to one process, by case.

    All cases run in one pair of forked processes, one after the other (starting the processes, each
    importing torch, was most of each case's time)."""
    import torch.distributed.pipelining.schedules  # noqa: F401 - imported here once, not in each forked rank
    import torch.multiprocessing as mp

    root = tmp_path_factory.mktemp("torch_runs")
    cases = _cases()
    jobs = []
    for case, (plan, schedule) in cases.items():
        assert schedule.num_ranks == 2, case
        folder = root / case
        folder.mkdir()
        for file in export_files(plan, "torch", schedule=schedule):
            (folder / file.name).write_text(file.text)
        jobs.append((case, str(folder), list(plan.layers_per_stage), list(plan.placement), schedule.num_microbatches))
    # forked, not spawned: a spawned rank imported torch and this module again (most of the test's time);
    # a file rendezvous in this test's folder: no port another test (or xdist worker) could take first
    mp.start_processes(_worker, args=(2, str(root / "rendezvous"), jobs), nprocs=2, start_method="fork", join=True)
    differences = {}
    for case, (plan, schedule) in cases.items():
        got: dict = {}
        for rank in range(schedule.num_ranks):
            got.update(torch.load(root / case / f"grads{rank}.pt"))
        expected = _reference(plan.num_layers, schedule.num_microbatches)
        assert set(got) == set(expected), case
        differences[case] = max(float((got[k] - expected[k]).abs().max()) for k in expected)
    return differences


@pytest.mark.slow
@pytest.mark.parametrize("case", ["1f1b-1", "interleaved-2", "zb-h1-1", "zb-v-2"])
def test_each_schedule_csv_gives_one_process_gradients(case, torch_differences):
    assert torch_differences[case] < 1e-5


@pytest.mark.slow
def test_adaptive_order_over_chunks_gives_one_process_gradients(torch_differences):
    assert torch_differences["adaptive"] < 1e-5


@pytest.mark.parametrize("name,options", [("1f1b", {}), ("zb-h1", {}), ("interleaved", {"virtual_stages": 2}),
                                          ("zb-v", {})])
def test_exported_csv_re_imports_equal(name, options):
    schedule = build_schedule(name, num_stages=4, num_microbatches=6, **options)
    plan = Plan(pp=schedule.num_ranks, dp=1, layers_per_stage=(1,) * 4, placement=schedule.placement,
                         schedule=name, num_microbatches=6)
    text = {f.name: f.text for f in export_files(plan, "torch", schedule=schedule)}["schedule.csv"]
    again = Schedule.from_csv(text)
    assert again.orders == schedule.orders and again.placement == schedule.placement
    assert again.num_microbatches == 6
    again.validate()


def test_a_csv_with_idle_cells_simulates_in_pipeplan():
    """torch's _dump_csv writes an idle step as an empty cell; such an order reads back and simulates."""
    from pipeplan import StageCosts, simulate

    schedule = Schedule.from_csv("0F0,0F1,,0B0,0B1\n,1F0,1B0,1F1,1B1\n").validate()
    assert schedule.placement == (0, 1) and schedule.num_microbatches == 2
    timeline = simulate(schedule, StageCosts.uniform(2, forward=1.0, backward=2.0))
    assert timeline.makespan == pytest.approx(1 + 3 + 3 + 2)  # F0, then the pipeline: 1F0 1B0 1F1 1B1, then 0B1


def test_from_csv_refuses_what_is_no_schedule():
    with pytest.raises(pipeplan.InvalidInputError, match="not a torch action"):
        Schedule.from_csv("0F0,0X1\n")
    with pytest.raises(pipeplan.InvalidInputError, match="ranks 0 and 1"):
        Schedule.from_csv("0F0\n0B0\n")
    with pytest.raises(pipeplan.InvalidInputError, match="stage 1 has no actions"):
        Schedule.from_csv("0F0,2F0\n")
    blank_line = Schedule.from_csv("0F0,0B0\n1F0,1B0\n\n")
    assert blank_line.num_ranks == 2  # a trailing blank line is not a third rank
