"""The DeepSpeed export run through DeepSpeed's own code, and the plan it is written for when DeepSpeed cannot run plan 1.

The runtime tests (fixture ``deepspeed``: they skip, saying why, where DeepSpeed is not
installed; ``pip install -e .[engines]`` installs it) write the export of a plan, start 2
gloo processes with :func:`pipeplan.runtime.spawn` (bounded: a rank that hangs fails the
test) and in each load the written files as they are (``tests/_deepspeed_worker.py``):
``deepspeed_train.py`` calls ``deepspeed.initialize`` on the plain model with
``ds_config.json`` (pp 1), ``pipeline_module.py``'s ``PlannedPipelineModule`` goes through
``deepspeed.initialize`` and one ``train_batch`` (pp 2). DeepSpeed must report the plan's
ZeRO stage, micro batch, accumulation and global batch, and the gradients it holds before
its optimizer steps must be one process's over the same samples (bf16, so to bf16's
resolution: every microbatch's gradient is computed alike, the sums differ in order).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pipeplan import engines
from pipeplan.engines import export_files
from pipeplan.engines.deepspeed import deepspeed_parts, zero_stage
from pipeplan.errors import InvalidInputError
from pipeplan.plan import Plan
from pipeplan.planner import SearchOptions, search

from _planner_models import gpt_workload, make_cluster

#: bf16 keeps 8 significant bits: a gradient may differ from one process's by this share of the largest one
_BF16 = 2.0 ** -6


@pytest.fixture(scope="module")
def deepspeed() -> Any:
    """DeepSpeed on its CPU accelerator, imported once here so the forked ranks share the import (tens of seconds)."""
    os.environ["DS_ACCELERATOR"] = "cpu"
    module = pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (pip install -e .[engines])")
    import deepspeed.pipe  # noqa: F401
    import deepspeed.runtime.pipe.engine  # noqa: F401
    import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: F401  # ZeRO's optimizer check imports it (torch._dynamo)
    return module


def _write(plan: Plan, folder: Path) -> list[str]:
    files = export_files(plan, "deepspeed")
    for file in files:
        (folder / file.name).write_text(file.text)
    return [file.name for file in files]


def _close(got: dict[str, Any], expected: dict[str, Any]) -> None:
    assert set(got) == set(expected)
    for name, grad in expected.items():
        scale = float(grad.abs().max())
        assert float((got[name] - grad).abs().max()) <= _BF16 * scale, name


def _plain(mode: str) -> Plan:
    return Plan(pp=1, dp=2, layers_per_stage=(4,), placement=(0,), micro_batch_size=2, num_microbatches=2,
                dp_mode=mode)


@pytest.mark.parametrize("mode", ["ddp", "zero1", "zero2", "fsdp"])
def test_without_a_pipeline_deepspeed_initialize_trains_the_plain_model_as_one_process(deepspeed, mode, tmp_path):
    from pipeplan.runtime import spawn
    import _deepspeed_worker as worker

    plan = _plain(mode)
    assert _write(plan, tmp_path) == ["ds_config.json", "deepspeed_train.py"]  # no one-stage PipelineModule
    ranks = spawn(worker.plain_rank, 2, str(tmp_path), plan.micro_batch_size, plan.num_microbatches, timeout=120)
    loss, expected = worker.reference(plan.num_layers, plan.global_batch, plan.num_microbatches * plan.dp)
    for rank in ranks:
        assert rank["zero_stage"] == zero_stage(mode)
        assert (rank["micro_batch"], rank["accumulation"], rank["train_batch"]) == (2, 2, plan.global_batch)
        assert rank["bf16"]
        _close(rank["grads"], expected)
    assert sum(rank["loss"] for rank in ranks) / 2 == pytest.approx(loss, rel=_BF16)


def test_pipeline_module_takes_the_written_partition_and_trains_as_one_process(deepspeed, tmp_path):
    from pipeplan.runtime import spawn
    import _deepspeed_worker as worker

    plan = Plan(pp=2, dp=1, layers_per_stage=(1, 3), placement=(0, 1), micro_batch_size=2, num_microbatches=4)
    assert _write(plan, tmp_path) == ["ds_config.json", "pipeline_module.py"]
    ranks = spawn(worker.pipeline_rank, 2, str(tmp_path), plan.micro_batch_size, plan.num_microbatches,
                  timeout=120)
    loss, expected = worker.reference(plan.num_layers, plan.global_batch, plan.num_microbatches)
    got: dict[str, Any] = {}
    for rank, result in enumerate(ranks):
        assert result["parts"] == deepspeed_parts(plan) == [0, 1, 4]  # not DeepSpeed's own split (2, 2)
        assert result["layers_held"] == plan.layers_per_stage[rank]
        assert (result["zero_stage"], result["micro_batch"], result["accumulation"]) == (0, 2, 4)
        assert result["loss"] == pytest.approx(loss, rel=_BF16)
        got.update(result["grads"])
    _close(got, expected)


# ------------------------------------------------------------- without DeepSpeed installed
def test_zero_stage_reads_the_mode_records():
    assert [zero_stage(mode) for mode in ("ddp", "zero1", "zero2", "fsdp", "hsdp")] == [0, 1, 2, 3, None]
    runs = engines.get("deepspeed").runs
    assert runs.dp_modes_with_pipeline == ("ddp", "zero1")
    assert runs.dp_modes_without_pipeline == ("ddp", "zero1", "zero2", "fsdp")


@pytest.mark.parametrize("mode", ["ddp", "zero1", "zero2", "fsdp"])
def test_a_plan_without_a_pipeline_gets_the_plain_model_files(mode):
    plan = Plan(pp=1, dp=4, layers_per_stage=(8,), placement=(0,), micro_batch_size=2, num_microbatches=8,
                dp_mode=mode, recompute=("full",))
    files = {file.name: file.text for file in export_files(plan, "deepspeed")}
    assert set(files) == {"ds_config.json", "deepspeed_train.py"}
    config = json.loads(files["ds_config.json"])
    assert config["zero_optimization"] == {"stage": zero_stage(mode)} and config["bf16"] == {"enabled": True}
    assert config["train_batch_size"] == 2 * 8 * 4 == plan.global_batch
    assert config["gradient_clipping"] > 0
    compile(files["deepspeed_train.py"], "deepspeed_train.py", "exec")
    assert "deepspeed.initialize(model=model" in files["deepspeed_train.py"]
    assert any("deepspeed.checkpointing.checkpoint" in note for note in engines.get("deepspeed").notes(plan))


def test_hsdp_is_refused_naming_torchtitan():
    with pytest.raises(InvalidInputError, match="no ZeRO stage for 'hsdp'.*torchtitan"):
        export_files(_plain("hsdp"), "deepspeed")


@pytest.mark.parametrize("memory,modes", [(4e9, ("ddp", "zero1", "zero2", "fsdp", "hsdp")),  # 8e9 before the rail rule
                                          (3e9, ("zero1", "zero2", "fsdp", "hsdp"))])
def test_the_fallback_is_the_fastest_plan_deepspeed_runs(memory, modes):
    """Plan 1 (ZB-H2 on 8 ranks) is no DeepSpeed plan; the plan written instead is the fastest of every plan
    DeepSpeed runs, ZeRO-2 at pp 1 included (it must not become ZeRO-1)."""
    from pipeplan.planner.engine_choice import engine_choice

    workload, cluster = gpt_workload(num_layers=8), make_cluster(8, memory, gpus_per_node=4)
    result = search(workload, cluster, 32, SearchOptions(top=1, dp_modes=modes))
    engine = engines.get("deepspeed")
    assert engine.refusal(result.best)
    choice = engine_choice(result, "deepspeed")
    everything = search(workload, cluster, 32, SearchOptions(top=100_000, dp_modes=modes))
    runs = [plan for plan in everything.plans if not engine.refusal(plan)]
    assert choice.index is None and not engine.refusal(choice.plan)
    assert choice.plan.step_time == pytest.approx(runs[0].step_time)
    assert (choice.plan.pp, choice.plan.dp_mode) == (runs[0].pp, runs[0].dp_mode)
    assert choice.why == engine.refusal(result.best)
    assert choice.changes[-1].startswith("step ") and any(c.startswith("schedule ") for c in choice.changes)
    assert choice.to_dict()["plan"]["dp_mode"] == choice.plan.dp_mode


def test_plan_prints_the_plan_deepspeed_runs_instead_as_a_row(run_cli, tmp_path):
    argv = ("plan", "--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "64", "--pp", "2", "--top", "1",
            "--schedules", "zb-h1,1f1b")
    status, out, err = run_cli(*argv, "--export", "deepspeed")
    assert status == 0, err
    assert "deepspeed cannot run plan 1: DeepSpeed's pipeline engine runs its own 1F1B-like schedule" in out
    assert "deepspeed runs instead" in out and "│ instead │" in out
    changed = next(line for line in out.splitlines() if line.startswith("changed from plan 1: "))
    assert "schedule zb-h1 → 1f1b" in changed and changed.split("; ")[-1].startswith("step ")
    status, out, err = run_cli(*argv, "--export", "deepspeed", "--json")
    assert status == 0, err
    chosen = json.loads(out)["export"]
    assert chosen["plan_index"] is None and chosen["plan"]["schedule"] == "1f1b"
    assert "ds_config.json" in chosen["plan"]["exports"]["deepspeed"]["files"]
    assert "schedule zb-h1 → 1f1b" in chosen["changes"]
    assert chosen["why"].startswith("DeepSpeed's pipeline engine runs its own 1F1B-like schedule")


def test_a_fixed_partition_keeps_the_fallback_from_searching_without_a_pipeline(run_cli):
    # --partition 25,25 fixes pp = 2: the pp = 1 search for ZeRO-2 cannot apply, and the refusal is DeepSpeed's.
    status, out, err = run_cli("plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--partition",
                               "25,25", "--dp-modes", "zero2", "--export", "deepspeed", "--top", "1")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "deepspeed runs only 1f1b" in err and "zero2" in err and "--partition has 2 stages" not in err


def _train_schedule_makespan(micro_batches: int, stages: int, forward: float, backward: float) -> float:
    """DeepSpeed's own TrainSchedule instruction streams, each send/receive a blocking rendezvous of its pair."""
    from deepspeed.runtime.pipe import schedule as ds_schedule

    streams = [[type(cmd).__name__ for step in ds_schedule.TrainSchedule(micro_batches=micro_batches, stages=stages,
                                                                         stage_id=s).steps() for cmd in step]
               for s in range(stages)]
    channel = {"SendActivation": lambda s: ("act", s, s + 1), "RecvActivation": lambda s: ("act", s - 1, s),
               "SendGrad": lambda s: ("grad", s, s - 1), "RecvGrad": lambda s: ("grad", s + 1, s)}
    position, clock, waiting = [0] * stages, [0.0] * stages, {}
    moved = True
    while moved:
        moved = False
        for s in range(stages):
            while position[s] < len(streams[s]):
                op = streams[s][position[s]]
                if op in channel:
                    key = channel[op](s)
                    other = waiting.get(key)
                    if other is None or other[0] == s:  # its pair has not come yet: wait
                        waiting[key] = (s, clock[s])
                        break
                    del waiting[key]
                    clock[s] = clock[other[0]] = max(other[1], clock[s])
                    position[other[0]] += 1
                clock[s] += {"ForwardPass": forward, "BackwardPass": backward}.get(op, 0.0)
                position[s] += 1
                moved = True
    assert all(p == len(ops) for p, ops in zip(position, streams))  # no deadlock
    return max(clock)


@pytest.mark.parametrize(("micro_batches", "stages"), [(8, 4), (128, 12), (240, 35)])
def test_deepspeeds_train_schedule_costs_what_1f1b_costs(micro_batches, stages):
    # docs/engines.md ("DeepSpeed", beside a pipeline): the schedule adds nothing over 1F1B on equal stages
    pytest.importorskip("deepspeed")
    assert _train_schedule_makespan(micro_batches, stages, 1.0, 3.0) == (micro_batches + stages - 1) * 4.0
