"""Turn a :class:`~pipeplan.plan.Plan` into the files Megatron-LM, DeepSpeed, torchtitan and torch run.

    from pipeplan.planner.export import export_files, megatron_line
    megatron_line([3, 11, 11, 7])          # '--pipeline-model-parallel-size 4 --num-layers 32 ...'
    for file in export_files(plan, "torch"):   # split_spec.py, schedule.csv
        print(file.name, len(file.text))

Every function takes a Plan (a :class:`~pipeplan.partition.PartitionResult` and a
:class:`~pipeplan.partition.placement.ChunkPlacement` are Plans; a list of layers per
stage becomes one stage per rank) and, optionally, the model's own layer names
(:class:`~pipeplan.models.engine_names.LayerName`: module paths and Megatron roles;
default: guessed from the plan's layer names). An engine that cannot run a plan
raises :class:`~pipeplan.errors.InvalidInputError` naming the export that can;
:func:`export_notes` lists what an export approximates. One module per engine:
:mod:`.megatron`, :mod:`.deepspeed`, :mod:`.torchtitan`, :mod:`.pipelining` (torch);
docs/exports.md shows the files and how to launch them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import InvalidInputError
from ...plan import Plan
from ...schedule import Schedule
from ._common import ExportFile, to_plan
from ._names import LayerName
from .deepspeed import (
    DEEPSPEED_SCHEDULES,
    deepspeed_config,
    deepspeed_files,
    deepspeed_notes,
    deepspeed_parts,
    deepspeed_snippet,
)
from .megatron import (
    MEGATRON_SCHEDULES,
    megatron_args,
    megatron_files,
    megatron_layout,
    megatron_line,
    megatron_mapping,
    megatron_notes,
)
from .pipelining import plan_schedule, torch_actions, torch_files, torch_schedule_csv, torch_split_snippet, torch_split_spec
from .torchtitan import (
    torchtitan_config_py,
    torchtitan_degrees,
    torchtitan_files,
    torchtitan_notes,
    torchtitan_schedule_name,
    torchtitan_settings,
    torchtitan_toml,
)

__all__ = [
    "ExportFile", "LayerName",
    "megatron_args", "megatron_line", "megatron_layout", "megatron_mapping", "megatron_files",
    "deepspeed_parts", "deepspeed_snippet", "deepspeed_config", "deepspeed_files",
    "torchtitan_toml", "torchtitan_config_py", "torchtitan_settings", "torchtitan_degrees",
    "torchtitan_schedule_name", "torchtitan_files",
    "torch_split_spec", "torch_split_snippet", "torch_schedule_csv", "torch_actions", "torch_files",
    "plan_schedule", "export_files", "export_plan", "export_notes", "plan_exports", "export_refusal",
    "ENGINES", "EXPORT_TARGETS", "ENGINE_SCHEDULES", "ENGINE_DP_MODES",
]

ENGINES = ("megatron", "deepspeed", "torchtitan", "torch")
#: what ``--export`` takes: the engines, and torchtitan's last TOML release
EXPORT_TARGETS = ENGINES + ("torchtitan-toml",)

#: the schedules each engine runs (``None``: any, from the schedule CSV)
ENGINE_SCHEDULES: dict[str, tuple[str, ...] | None] = {
    "megatron": MEGATRON_SCHEDULES, "deepspeed": DEEPSPEED_SCHEDULES, "torchtitan": None, "torchtitan-toml": None,
    "torch": None,
}

#: the data-parallel modes each engine's export runs with a pipeline (``None``: every mode; DeepSpeed
#: at pp 1 also runs zero2 and fsdp). For ``SearchResult.best_for``'s fallback search.
ENGINE_DP_MODES: dict[str, tuple[str, ...] | None] = {
    "megatron": ("ddp", "zero1"), "deepspeed": ("ddp", "zero1"), "torchtitan": None, "torchtitan-toml": None,
    "torch": None,
}


def export_files(plan: Plan | Sequence[int], engine: str, names: Sequence[LayerName] | None = None, *,
                 schedule: Schedule | None = None, gpus_per_node: int = 8) -> list[ExportFile]:
    """Every file ``engine`` (one of :data:`EXPORT_TARGETS`) needs to run ``plan``.

    Args:
        plan: the plan.
        engine: ``megatron``, ``deepspeed``, ``torchtitan``, ``torchtitan-toml`` or ``torch``.
        names: the model's layer names (module paths, roles), one per layer.
        schedule: the order the CSV files carry (default the plan's own: its timeline's,
            or its fixed schedule rebuilt).
        gpus_per_node: GPUs per node (torchtitan's HSDP shard degree).

    Raises:
        InvalidInputError: an unknown engine, or a plan the engine cannot run.
    """
    plan = to_plan(plan)
    if engine == "megatron":
        return megatron_files(plan, names)
    if engine == "deepspeed":
        return deepspeed_files(plan)
    if engine in ("torchtitan", "torchtitan-toml"):
        files = torchtitan_files(plan, names, toml=engine == "torchtitan-toml", gpus_per_node=gpus_per_node)
        if schedule is not None:
            files = [ExportFile(f.name, torch_schedule_csv(schedule)) if f.name == "schedule.csv" else f for f in files]
        return files
    if engine == "torch":
        return torch_files(plan, names, schedule=schedule)
    raise InvalidInputError(f"engine must be one of {', '.join(EXPORT_TARGETS)}, got {engine!r}")


def export_plan(plan: Plan | Sequence[int], engine: str, names: Sequence[LayerName] | None = None, **options: Any) -> str:
    """The export as one text: Megatron's shell-quoted line; for the others each file after a ``# ==> name <==`` line.

    Raises:
        InvalidInputError: an unknown engine, or a plan the engine cannot run.
    """
    if engine == "megatron":
        return megatron_line(to_plan(plan), names) + "\n"
    files = export_files(plan, engine, names, **options)
    return "".join(f"# ==> {file.name} <==\n{file.text}" for file in files)


def export_notes(plan: Plan | Sequence[int], engine: str) -> list[str]:
    """What an export approximates for ``plan`` (empty when it is exact)."""
    notes = {"megatron": megatron_notes, "deepspeed": deepspeed_notes, "torchtitan": torchtitan_notes,
             "torchtitan-toml": torchtitan_notes}
    if engine == "torch":
        return []
    if engine not in notes:
        raise InvalidInputError(f"engine must be one of {', '.join(EXPORT_TARGETS)}, got {engine!r}")
    return notes[engine](plan)


def plan_exports(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None) -> dict[str, dict[str, Any]]:
    """Every engine's export of ``plan``: ``{"text", "files": {name: text}, "notes"}``, or ``{"error"}`` where it cannot.

    A model Megatron-LM has no port of gets ``"mapping"`` (:func:`megatron_mapping`) beside its error.
    """
    out: dict[str, dict[str, Any]] = {}
    for engine in ENGINES:
        try:
            files = export_files(plan, engine, names)
            out[engine] = {"text": export_plan(plan, engine, names), "files": {f.name: f.text for f in files},
                           "notes": export_notes(plan, engine)}
        except InvalidInputError as error:
            out[engine] = {"error": str(error)}
            if engine == "megatron" and "no port" in str(error):
                out[engine]["mapping"] = megatron_mapping(plan, names)
    return out


def export_refusal(plan: Plan | Sequence[int], engine: str, names: Sequence[LayerName] | None = None) -> str:
    """Why ``engine`` cannot run ``plan`` (the export's one-line error), or ``""`` when it can."""
    try:
        export_files(plan, engine, names)
    except InvalidInputError as error:
        return str(error)
    return ""
