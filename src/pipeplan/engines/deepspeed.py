"""DeepSpeed's ``ds_config.json`` and a ``PipelineModule`` with pipeplan's stage boundaries.

    from pipeplan.engines.deepspeed import deepspeed_config, deepspeed_files
    deepspeed_config(plan)    # {"train_batch_size": 64, ..., "zero_optimization": {"stage": 1}}
    deepspeed_files(plan)     # ds_config.json and pipeline_module.py

What DeepSpeed accepts (deepspeed/runtime/pipe/module.py, pipe/engine.py, runtime/constants.py):
``PipelineModule`` splits by ``partition_method`` ``"uniform"``, ``"parameters"`` or
``"type:<regex>"``; explicit boundaries are its ``parts`` list (``S + 1`` offsets into
the layer specs), which a subclass sets in ``_partition_layers`` before calling
``_set_bounds``. One stage per rank, its own 1F1B-like ``TrainSchedule``.
``train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps ×
data-parallel size`` (the pipeline engine's ``gradient_accumulation_steps`` is the
number of microbatches). ``PipelineEngine.__init__`` asserts
``zero_optimization_stage() < 2`` ("ZeRO-2 and ZeRO-3 are incompatible with pipeline
parallelism"): with ``pp > 1`` only DDP (stage 0) and ZeRO-1 run. Recompute is
``PipelineModule(activation_checkpoint_interval=1)`` (whole layers).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInputError
from ..plan import Plan
from ..schedule import Schedule
from ._common import ExportFile, one_stage_per_rank, recompute_notes, strongest_recompute, to_plan
from ._names import LayerName
from .record import Engine, Files, Runs

__all__ = ["DEEPSPEED_SCHEDULES", "ZERO_STAGES", "deepspeed_parts", "deepspeed_config", "deepspeed_snippet",
           "deepspeed_files", "deepspeed_notes", "ENGINE"]

DEEPSPEED_SCHEDULES = ("1f1b",)
#: ``zero_optimization.stage`` of each data-parallel mode (HSDP has none in this export)
ZERO_STAGES = {"ddp": 0, "zero1": 1, "zero2": 2, "fsdp": 3}


def deepspeed_parts(plan: Plan | Sequence[int], *, offset: int = 0, trailing: int = 0) -> list[int]:
    """``PipelineModule.parts``: ``S + 1`` offsets into the layer specs.

    Args:
        plan: a Plan with one stage per rank.
        offset: specs before the first profiled layer that belong to stage 0
            (an embedding spec, a lambda), not in the profile.
        trailing: specs after the last profiled layer that belong to the last stage.
    """
    plan = to_plan(plan)
    one_stage_per_rank(plan, "DeepSpeed")
    if offset < 0 or trailing < 0:
        raise InvalidInputError(f"offset and trailing must be >= 0, got {offset} and {trailing}")
    parts = [0]
    for index, count in enumerate(plan.layers_per_stage):
        parts.append(parts[-1] + count + (offset if index == 0 else 0))
    parts[-1] += trailing
    return parts


def _check_runs(plan: Plan) -> None:
    if plan.pp > 1 and plan.schedule not in DEEPSPEED_SCHEDULES:
        raise InvalidInputError(
            f"DeepSpeed's pipeline engine runs its own 1F1B-like schedule, not {plan.schedule!r}; "
            "use the torch or torchtitan export for this plan"
        )
    if plan.dp_mode not in ZERO_STAGES:
        raise InvalidInputError(
            f"pipeplan exports DeepSpeed with ZeRO stages 0-3, not {plan.dp_mode!r}; "
            "torchtitan runs HSDP (--export torchtitan)"
        )
    if plan.pp > 1 and ZERO_STAGES[plan.dp_mode] >= 2:
        raise InvalidInputError(
            f"DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only (PipelineEngine asserts stage < 2), not "
            f"{plan.dp_mode!r} (stage {ZERO_STAGES[plan.dp_mode]}); torchtitan runs pipeline + {plan.dp_mode}, "
            "or plan with pp 1"
        )
    one_stage_per_rank(plan, "DeepSpeed")


def deepspeed_config(plan: Plan | Sequence[int]) -> dict[str, Any]:
    """The DeepSpeed config JSON entries for ``plan``'s batch, ZeRO stage and recompute.

    Raises:
        InvalidInputError: a schedule other than 1F1B, or a ZeRO stage the pipeline engine refuses.
    """
    plan = to_plan(plan)
    _check_runs(plan)
    config: dict[str, Any] = {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.num_microbatches,
        "zero_optimization": {"stage": ZERO_STAGES[plan.dp_mode]},
    }
    if strongest_recompute(plan) != "none":
        config["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                              "contiguous_memory_optimization": False}
    return config


def deepspeed_snippet(plan: Plan | Sequence[int], *, offset: int = 0, trailing: int = 0) -> str:
    """``pipeline_module.py``: a ``PipelineModule`` subclass with pipeplan's boundaries."""
    plan = to_plan(plan)
    parts = deepspeed_parts(plan, offset=offset, trailing=trailing)
    interval = 1 if strongest_recompute(plan) != "none" else 0
    return (
        '"""pipeplan: a DeepSpeed PipelineModule whose stage boundaries are the plan\'s; config in ds_config.json."""\n'
        "from deepspeed.pipe import PipelineModule\n\n"
        f"PIPEPLAN_PARTS = {parts}  # stage s builds layer specs [parts[s], parts[s + 1])\n"
        f"ACTIVATION_CHECKPOINT_INTERVAL = {interval}\n\n\n"
        "class PlannedPipelineModule(PipelineModule):\n"
        '    """PipelineModule whose stage boundaries come from pipeplan."""\n\n'
        '    def _partition_layers(self, method="uniform"):\n'
        "        stage_id = self._topo.get_coord(self.global_rank).pipe\n"
        "        self.parts = list(PIPEPLAN_PARTS)\n"
        "        assert len(self.parts) == self._topo.get_dim('pipe') + 1\n"
        "        assert self.parts[-1] == len(self._layer_specs)\n"
        "        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])\n\n\n"
        f"# model = PlannedPipelineModule(layers=specs, num_stages={len(parts) - 1}, loss_fn=loss_fn,\n"
        "#                                activation_checkpoint_interval=ACTIVATION_CHECKPOINT_INTERVAL)\n"
        '# engine, *_ = deepspeed.initialize(model=model, config="ds_config.json", model_parameters=...)\n'
    )


def deepspeed_notes(plan: Plan | Sequence[int]) -> list[str]:
    """What the DeepSpeed export approximates of ``plan``."""
    plan = to_plan(plan)
    notes = recompute_notes(plan, "DeepSpeed")
    if strongest_recompute(plan) == "selective":
        notes.append("DeepSpeed checkpoints whole layers: selective recompute is exported as full")
    if plan.tp > 1:
        notes.append(f"DeepSpeed's PipelineModule has no tensor parallelism of its own: tp {plan.tp} needs your "
                     "model's TP layers (e.g. Megatron-DeepSpeed) and a topology with a model axis")
    return notes


def deepspeed_files(plan: Plan | Sequence[int]) -> list[ExportFile]:
    """``ds_config.json`` (batch, ZeRO stage, recompute) and ``pipeline_module.py`` (the boundaries)."""
    plan = to_plan(plan)
    config = deepspeed_config(plan)
    return [ExportFile("ds_config.json", json.dumps(config, indent=2) + "\n"),
            ExportFile("pipeline_module.py", deepspeed_snippet(plan))]


def _write(plan: Plan, target: str, names: Sequence[LayerName] | None, *, schedule: Schedule | None,
           gpus_per_node: int) -> list[ExportFile]:
    return deepspeed_files(plan)


#: DeepSpeed: its pipeline engine's 1F1B with ZeRO stage 0 or 1; without a pipeline every ZeRO stage.
ENGINE = Engine(
    "deepspeed",
    Runs(schedules=DEEPSPEED_SCHEDULES,
         dp_modes_with_pipeline=tuple(mode for mode, stage in ZERO_STAGES.items() if stage < 2),
         dp_modes_without_pipeline=tuple(ZERO_STAGES)),
    Files(targets=("deepspeed",), write=_write, notes=deepspeed_notes),
)
