"""The torch export read back: split_spec.py (ast) and schedule.csv give the plan's pipeline, split and order.

Runs everywhere (nothing of the written files is executed);
``PYTHONPATH=src python -m pytest -q tests/test_engines_pipelining_read.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeplan import engines
from pipeplan.engines.pipelining import torch_schedule_csv
from pipeplan.engines.pipelining_read import read_schedule_csv, read_torch_export, recognise_schedule
from pipeplan.errors import InvalidInputError
from pipeplan.plan import Plan
from pipeplan.schedule import Schedule
from pipeplan.schedules import build_schedule
from pipeplan.schedules.patterns import loop_placement, v_placement

#: (schedule, pp, stages per rank): every fixed schedule of the registry the torch export writes.
SHAPES = [("1f1b", 2, 1), ("1f1b", 4, 1), ("gpipe", 4, 1), ("interleaved", 2, 2), ("interleaved", 4, 3),
          ("zb-v", 2, 2), ("zb-v", 4, 2), ("zb-h1", 4, 1), ("zb-h2", 4, 1)]


def _plan(schedule: str, pp: int, v: int, mode: str, m: int) -> Plan:
    stages = pp * v
    placement = v_placement(pp, 2) if schedule == "zb-v" else loop_placement(pp, v)
    return Plan(pp=pp, dp=4, layers_per_stage=tuple(1 + s % 3 for s in range(stages)), placement=placement,
                schedule=schedule, micro_batch_size=2, num_microbatches=m, dp_mode=mode,
                recompute=("none",) * stages)


def _export(plan: Plan, folder: Path) -> Path:
    for file in engines.export_files(plan, "torch"):
        (folder / file.name).write_text(file.text)
    return folder


@pytest.mark.parametrize("mode", ["fsdp", "hsdp", "ddp", "zero1"])
@pytest.mark.parametrize("m", [4, 8])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s}-pp{pp}-v{v}" for s, pp, v in SHAPES])
def test_export_reads_back_as_the_plan(shape, m, mode, tmp_path):
    schedule, pp, v = shape
    plan = _plan(schedule, pp, v, mode, m)
    config = engines.get("torch").read(_export(plan, tmp_path))
    got = {name: config.value(name) for name in ("pp", "virtual_stages", "layers_per_stage", "schedule",
                                                  "num_microbatches", "dp_mode")}
    assert got == dict(pp=pp, virtual_stages=v, layers_per_stage=plan.layers_per_stage, schedule=schedule,
                       num_microbatches=m, dp_mode=mode)
    assert config.source_of("pp").startswith("split_spec.py: STAGE_TO_RANK = ")
    assert config.model is None


def test_an_order_no_generator_writes_is_csv(tmp_path):
    plan = _plan("1f1b", 2, 1, "fsdp", 4)
    one_f_one_b = build_schedule("1f1b", num_stages=2, num_microbatches=4)
    # the same actions, rank 0's first two forwards swapped: a valid order of its own
    swapped = [list(order) for order in one_f_one_b.orders]
    swapped[0][0], swapped[0][1] = swapped[0][1], swapped[0][0]
    order = Schedule(swapped, one_f_one_b.placement, 4)
    for file in engines.export_files(plan, "torch", schedule=order):
        (tmp_path / file.name).write_text(file.text)
    config = read_torch_export(tmp_path)
    assert config.value("schedule") == "csv" and config.value("num_microbatches") == 4
    assert any("none of pipeplan's fixed schedules" in note for note in config.notes)


def test_recognises_each_generator_only_as_itself():
    for name, pp, v in SHAPES:
        stages = pp * v
        built = build_schedule(name, num_stages=stages, num_microbatches=8,
                               **({"virtual_stages": v} if name == "interleaved" else {}))
        assert recognise_schedule(built) == name


def test_csv_cells_that_are_no_actions_are_refused_naming_the_cell(tmp_path):
    path = tmp_path / "schedule.csv"
    path.write_text("0F0,0X1\n")
    with pytest.raises(InvalidInputError, match="row 1: '0X1' is no action"):
        read_schedule_csv(path)
    path.write_text(torch_schedule_csv(build_schedule("1f1b", num_stages=2, num_microbatches=2)))
    assert read_schedule_csv(path).num_microbatches == 2


def test_a_folder_without_the_files_is_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="no split_spec.py"):
        engines.get("torch").read(tmp_path)
    (tmp_path / "split_spec.py").write_text("x = 1\n")
    (tmp_path / "schedule.csv").write_text("0F0,0B0\n")
    with pytest.raises(InvalidInputError, match="no STAGE_TO_RANK"):
        engines.get("torch").read(tmp_path)
