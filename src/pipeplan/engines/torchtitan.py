"""torchtitan: the plan as a Python configuration (torchtitan today), or the last TOML release's sections.

    from pipeplan.engines.torchtitan import torchtitan_files, torchtitan_settings
    torchtitan_settings(plan)["parallelism"]["pipeline_parallel_degree"]   # 4
    torchtitan_files(plan)            # torchtitan_config.py (+ schedule.csv when the order needs one)
    torchtitan_files(plan, toml=True) # torchtitan.toml for the last TOML release (+ schedule.csv)

torchtitan at HEAD (pytorch/torchtitan b5bcd76c, 2026-08-21; ``torchtitan/config/configs.py``,
``trainer.py``, ``distributed/pipeline_parallel.py``, ``distributed/activation_checkpoint.py``)
is configured by a Python function returning ``Trainer.Config``, picked with ``--module``
``--config``. Its ``ParallelismConfig`` holds ``pipeline_parallel_degree``,
``module_fqns_per_model_part`` (the module paths of each stage, in stage order),
``pipeline_parallel_schedule`` (a torch schedule class; ``ZBVZeroBubble``/``DualPipeV``
place stages in a V, any other loops stage ``s`` onto rank ``s mod P``),
``pipeline_parallel_schedule_csv`` (a path: ``_PipelineScheduleRuntime._load_csv``),
``num_pp_microbatches``, ``tensor_parallel_degree``, ``enable_sequence_parallel``,
``data_parallel_shard_degree`` (FSDP over that many ranks; ``-1`` the leftover ranks),
``data_parallel_replicate_degree`` (DDP; both > 1: HSDP) and ``fsdp_reshard_after_forward``.
``TrainingConfig.num_tokens_per_microbatch_per_dp_rank`` is a microbatch in tokens;
``num_tokens_per_train_step`` defaults to that × microbatches × dp. The
``activation_checkpoint`` field is ``FullAC.Config()``, ``SelectiveAC.Config()`` (a per-op
policy: saves every other matmul, not Megatron's attention-only recompute) or ``None``.

The last TOML release (e347b1e5e, 2026-02-15; torchtitan removed the TOML files on
2026-02-23) has ``[parallelism]`` with ``pipeline_parallel_microbatch_size``,
``[training] local_batch_size``/``global_batch_size`` and ``[activation_checkpoint] mode``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInputError
from ..plan import Plan
from ..schedule import Schedule
from ..schedules.patterns import loop_placement, v_placement
from ._common import ExportFile, recompute_notes, strongest_recompute, to_plan
from ._names import LayerName, stage_fqns
from .pipelining import plan_schedule, torch_schedule_csv
from .record import Engine, Files, Runs

__all__ = ["TORCHTITAN_COMMIT", "TORCHTITAN_TOML_COMMIT", "torchtitan_schedule_name", "torchtitan_degrees",
           "torchtitan_settings", "torchtitan_config_py", "torchtitan_toml", "torchtitan_files", "torchtitan_notes", "ENGINE"]

TORCHTITAN_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
TORCHTITAN_TOML_COMMIT = "e347b1e5e"
_TORCH_SCHEDULE_NAMES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B", "zb-v": "ZBVZeroBubble"}
_CSV = "schedule.csv"


def torchtitan_schedule_name(plan: Plan | Sequence[int]) -> tuple[str, bool]:
    """``(pipeline_parallel_schedule, needs_csv)``: torch's class name, or a carrier for a CSV order.

    1F1B, GPipe, interleaved 1F1B and ZB-V have torch classes of their own. Any
    other order (ZB-H1/H2, adaptive) runs from a CSV; the name then only tells
    torchtitan how to place stages: ``ZBVZeroBubble`` for a V, ``Interleaved1F1B``
    for a loop, ``1F1B`` for one stage per rank.
    """
    plan = to_plan(plan)
    if plan.schedule in _TORCH_SCHEDULE_NAMES:
        return _TORCH_SCHEDULE_NAMES[plan.schedule], False
    if plan.one_stage_per_rank:
        return "1F1B", True
    if plan.placement == loop_placement(plan.pp, plan.num_stages // plan.pp):
        return "Interleaved1F1B", True
    if plan.num_stages == 2 * plan.pp and plan.placement == v_placement(plan.pp, 2):
        return "ZBVZeroBubble", True
    raise InvalidInputError(
        f"torchtitan places stages in a loop or a V; placement {list(plan.placement)} is neither "
        "(use the torch export)"
    )


def torchtitan_degrees(plan: Plan | Sequence[int], *, gpus_per_node: int = 8) -> dict[str, Any]:
    """``data_parallel_shard_degree``, ``data_parallel_replicate_degree``, ``fsdp_reshard_after_forward``.

    ddp: shard 1, replicate dp; fsdp: shard dp; hsdp: shard over the data-parallel
    ranks inside a node (``gpus_per_node / tp``, at most dp), replicate across nodes;
    zero1/zero2 (no torchtitan mode): FSDP that keeps parameters gathered after the
    forward (``"never"``), the closest (see :func:`torchtitan_notes`).
    """
    plan = to_plan(plan)
    if plan.dp_mode == "ddp":
        return {"data_parallel_shard_degree": 1, "data_parallel_replicate_degree": plan.dp}
    if plan.dp_mode == "hsdp":
        shard = max(1, min(plan.dp, gpus_per_node // plan.tp))
        if plan.dp % shard:
            raise InvalidInputError(f"hsdp: dp {plan.dp} does not divide into node groups of {shard} ranks")
        return {"data_parallel_shard_degree": shard, "data_parallel_replicate_degree": plan.dp // shard}
    degrees: dict[str, Any] = {"data_parallel_shard_degree": plan.dp, "data_parallel_replicate_degree": 1}
    if plan.dp_mode in ("zero1", "zero2"):
        degrees["fsdp_reshard_after_forward"] = "never"
    return degrees


def torchtitan_settings(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                        gpus_per_node: int = 8) -> dict[str, dict[str, Any]]:
    """The values the export sets, by torchtitan config section (``schedule.csv`` beside the config)."""
    plan = to_plan(plan)
    name, needs_csv = torchtitan_schedule_name(plan)
    parallelism: dict[str, Any] = {
        "pipeline_parallel_degree": plan.pp,
        "pipeline_parallel_schedule": name,
        "pipeline_parallel_schedule_csv": _CSV if needs_csv else "",
        "module_fqns_per_model_part": stage_fqns(plan, names),
        "num_pp_microbatches": plan.num_microbatches,
        "tensor_parallel_degree": plan.tp,
        "enable_sequence_parallel": bool(plan.sequence_parallel and plan.tp > 1),
        **torchtitan_degrees(plan, gpus_per_node=gpus_per_node),
    }
    return {"parallelism": parallelism, "activation_checkpoint": {"mode": strongest_recompute(plan)},
            "batch": {"micro_batch_size": plan.micro_batch_size, "tokens_per_sample": plan.tokens_per_sample}}


def torchtitan_notes(plan: Plan | Sequence[int]) -> list[str]:
    """What the torchtitan export approximates of ``plan``."""
    plan = to_plan(plan)
    notes = recompute_notes(plan, "torchtitan")
    if strongest_recompute(plan) == "selective":
        notes.append("torchtitan's selective recompute is a per-op policy (saves every other matmul), not the "
                     "attention-only recompute pipeplan timed: memory and time differ")
    if plan.dp_mode in ("zero1", "zero2"):
        notes.append(f"torchtitan has no {plan.dp_mode}: exported as FSDP keeping parameters gathered after the "
                     "forward (fsdp_reshard_after_forward 'never', ZeRO-2's memory), which also shards the "
                     "parameters between steps")
    return notes


_CONFIG_TEMPLATE = '''"""pipeplan: this plan as a torchtitan configuration (torchtitan {commit}, Python configs).

From torchtitan's root, with this folder on the path:
    PYTHONPATH={{this folder}}:$PYTHONPATH NGPU={gpus} MODULE=torchtitan_config CONFIG=pipeplan_config ./run_train.sh
pipeplan_config() is your configuration (PIPEPLAN_BASE_MODULE / PIPEPLAN_BASE_CONFIG, default below) with the
plan applied by apply_plan(); schedule.csv, when the plan needs one, is read from this folder.
"""
import importlib
import os

BASE_MODULE = os.environ.get("PIPEPLAN_BASE_MODULE", "torchtitan.models.llama3.config_registry")
BASE_CONFIG = os.environ.get("PIPEPLAN_BASE_CONFIG", "llama3_debugmodel")
HERE = os.path.dirname(os.path.abspath(__file__))

PARALLELISM = {parallelism}
MICRO_BATCH_SIZE = {micro}  # samples per microbatch
TOKENS_PER_SAMPLE = {tokens}  # None: the configuration's max_context_length
RECOMPUTE = {recompute!r}  # "none", "selective" (torchtitan's per-op policy) or "full"


def apply_plan(config):
    """Set the plan's parallelism, batch and recompute on a torchtitan Trainer.Config; returns it."""
    for key, value in PARALLELISM.items():
        if key == "pipeline_parallel_schedule_csv" and value:
            value = os.path.join(HERE, value)
        setattr(config.parallelism, key, value)
    tokens = TOKENS_PER_SAMPLE or config.training.max_context_length
    config.training.num_tokens_per_microbatch_per_dp_rank = MICRO_BATCH_SIZE * tokens
    config.training.num_tokens_per_train_step = -1  # microbatch tokens x microbatches x dp: one step, no accumulation
    if RECOMPUTE == "none":
        config.activation_checkpoint = None
    else:
        from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

        config.activation_checkpoint = FullAC.Config() if RECOMPUTE == "full" else SelectiveAC.Config()
    return config


def pipeplan_config():
    """The base configuration with the plan applied (what --module torchtitan_config --config pipeplan_config runs)."""
    return apply_plan(getattr(importlib.import_module(BASE_MODULE), BASE_CONFIG)())
'''


def torchtitan_config_py(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                         gpus_per_node: int = 8) -> str:
    """``torchtitan_config.py``: ``apply_plan(config)`` and ``pipeplan_config()`` for torchtitan's ``--module``."""
    plan = to_plan(plan)
    settings = torchtitan_settings(plan, names, gpus_per_node=gpus_per_node)
    parallelism = "{\n" + "".join(f"    {json.dumps(k)}: {_py(v)},\n" for k, v in settings["parallelism"].items()) + "}"
    tokens = plan.tokens_per_sample
    return _CONFIG_TEMPLATE.format(
        commit=TORCHTITAN_COMMIT[:9], gpus=plan.num_gpus, parallelism=parallelism, micro=plan.micro_batch_size,
        tokens=None if tokens is None else int(round(tokens)), recompute=settings["activation_checkpoint"]["mode"])


def _py(value: Any) -> str:
    """A Python literal for a JSON-like value (True/False, not true/false)."""
    if isinstance(value, bool):
        return repr(value)
    return json.dumps(value)


def torchtitan_toml(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                    schedule_csv: str = _CSV, gpus_per_node: int = 8) -> str:
    """The last TOML release's sections for ``plan`` (``schedule_csv``: the path written when it needs one)."""
    plan = to_plan(plan)
    settings = torchtitan_settings(plan, names, gpus_per_node=gpus_per_node)
    par = settings["parallelism"]
    lines = ["[parallelism]"]
    for key in ("pipeline_parallel_degree", "pipeline_parallel_schedule"):
        lines.append(f"{key} = {json.dumps(par[key])}")
    if par["pipeline_parallel_schedule_csv"]:
        lines.append(f"pipeline_parallel_schedule_csv = {json.dumps(schedule_csv)}")
    lines.append(f"pipeline_parallel_microbatch_size = {plan.micro_batch_size}")
    for key in ("tensor_parallel_degree", "data_parallel_shard_degree", "data_parallel_replicate_degree"):
        lines.append(f"{key} = {par[key]}")
    if "fsdp_reshard_after_forward" in par:
        lines.append(f"fsdp_reshard_after_forward = {json.dumps(par['fsdp_reshard_after_forward'])}")
    lines.append("module_fqns_per_model_part = [")
    lines += [f"    {json.dumps(part)}," for part in par["module_fqns_per_model_part"]]
    mode = settings["activation_checkpoint"]["mode"]
    lines += ["]", "", "[training]", f"local_batch_size = {plan.micro_batch_size * plan.num_microbatches}",
              f"global_batch_size = {plan.global_batch}", "", "[activation_checkpoint]", f"mode = {json.dumps(mode)}"]
    if mode == "selective":
        lines.append('selective_ac_option = "op"')
    return "\n".join(lines) + "\n"


def torchtitan_files(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                     toml: bool = False, gpus_per_node: int = 8) -> list[ExportFile]:
    """``torchtitan_config.py`` (or ``torchtitan.toml``) and, when the order needs one, ``schedule.csv``."""
    plan = to_plan(plan)
    needs_csv = torchtitan_schedule_name(plan)[1]
    files = [ExportFile("torchtitan.toml", torchtitan_toml(plan, names, gpus_per_node=gpus_per_node)) if toml else
             ExportFile("torchtitan_config.py", torchtitan_config_py(plan, names, gpus_per_node=gpus_per_node))]
    if needs_csv:
        files.append(ExportFile(_CSV, torch_schedule_csv(plan_schedule(plan))))
    return files


def _write(plan: Plan, target: str, names: Sequence[LayerName] | None, *, schedule: Schedule | None,
           gpus_per_node: int) -> list[ExportFile]:
    """``torchtitan`` (the Python configuration) or ``torchtitan-toml``; ``schedule`` replaces the CSV's order."""
    files = torchtitan_files(plan, names, toml=target == "torchtitan-toml", gpus_per_node=gpus_per_node)
    if schedule is None:
        return files
    return [ExportFile(f.name, torch_schedule_csv(schedule)) if f.name == _CSV else f for f in files]


#: torchtitan: any order (torch's classes, or a schedule CSV) on a loop or a V, every data-parallel mode
#: (ZeRO-1/2 as FSDP that keeps parameters gathered); at HEAD and in its last TOML release.
ENGINE = Engine(
    "torchtitan",
    Runs(),
    Files(targets=("torchtitan", "torchtitan-toml"), write=_write, notes=torchtitan_notes),
)
