"""The engines pipeplan plans for, one module each, and the registry: name → :class:`Engine`.

    from pipeplan import engines
    engines.names()                               # ('megatron', 'deepspeed', 'torchtitan', 'torch')
    engines.get("deepspeed").runs.schedules       # ('1f1b',)
    for file in engines.export_files(plan, "torch"):   # split_spec.py, schedule.csv
        print(file.name, len(file.text))

One module per engine: :mod:`.megatron` (Megatron-LM), :mod:`.deepspeed`,
:mod:`.torchtitan`, :mod:`.pipelining` (plain torch: ``torch.distributed.pipelining``,
FSDP2). Each holds its export, the rules of what the engine accepts, and its
:class:`Engine` record (:mod:`.record`); a new engine is one module and one entry in
``_ENGINES`` below. Nothing outside this package branches on an engine's name.

Every export takes a Plan (a :class:`~pipeplan.partition.PartitionResult` and a
:class:`~pipeplan.partition.placement.ChunkPlacement` are Plans; a list of layers per
stage becomes one stage per rank) and, optionally, the model's own layer names
(:class:`LayerName`: module paths and Megatron roles; default: guessed from the plan's
layer names). An engine that cannot run a plan raises
:class:`~pipeplan.errors.InvalidInputError` naming the export that can;
:meth:`Engine.notes` lists what an export approximates. docs/exports.md shows the files
and how to launch them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError
from ..plan import Plan
from ..schedule import Schedule
from . import deepspeed, megatron, pipelining, torchtitan
from ._common import ExportFile, to_plan
from ._names import LayerName, gpt_roles, invented_note, layer_names_in_reference, reference_of
from .record import Engine, ExportWriter, Files, Knob, Knobs, NumberKnob, Pricing, Runs
from .run_config import FIELDS, RunConfig, Setting

__all__ = [
    "Engine", "Runs", "Files", "ExportWriter", "Knob", "Knobs", "NumberKnob", "Pricing", "ExportFile", "LayerName",
    "get", "names", "targets", "by_target",
    "export_files", "export_plan", "plan_exports",
    "layer_names_in_reference", "reference_of", "gpt_roles", "invented_note",
    "RunConfig", "Setting", "FIELDS",
]

#: The registry, in the order tables and ``--export`` list the engines.
_ENGINES: tuple[Engine, ...] = (
    megatron.ENGINE,
    deepspeed.ENGINE,
    torchtitan.ENGINE,
    pipelining.ENGINE,
)
_BY_NAME = {engine.name: engine for engine in _ENGINES}
_BY_TARGET = {target: engine for engine in _ENGINES for target in engine.files.targets}


def names() -> tuple[str, ...]:
    """Every engine's name, in registry order."""
    return tuple(_BY_NAME)


def targets() -> tuple[str, ...]:
    """What ``--export`` takes: every engine's name, then the other files they write (``torchtitan-toml``)."""
    return names() + tuple(target for target in _BY_TARGET if target not in _BY_NAME)


def get(name: str) -> Engine:
    """The engine called ``name``.

    Raises:
        InvalidInputError: an unknown name.
    """
    if name not in _BY_NAME:
        raise InvalidInputError(f"engine must be one of {', '.join(names())}, got {name!r}")
    return _BY_NAME[name]


def by_target(target: str) -> Engine:
    """The engine that writes the export ``target`` (one of :func:`targets`).

    Raises:
        InvalidInputError: an unknown target.
    """
    if target not in _BY_TARGET:
        raise InvalidInputError(f"engine must be one of {', '.join(targets())}, got {target!r}")
    return _BY_TARGET[target]


def export_files(plan: Plan | Sequence[int], target: str, names: Sequence[LayerName] | None = None, *,
                 schedule: Schedule | None = None, gpus_per_node: int = 8,
                 knobs: Mapping[str, str] | None = None) -> list[ExportFile]:
    """Every file the engine of ``target`` (one of :func:`targets`) needs to run ``plan``.

    Args:
        plan: the plan.
        target: ``megatron``, ``deepspeed``, ``torchtitan``, ``torchtitan-toml``, ``torch``, ...
        names: the model's layer names (module paths, roles), one per layer.
        schedule: the order the CSV files carry (default the plan's own: its timeline's,
            or its fixed schedule rebuilt).
        gpus_per_node: GPUs per node (torchtitan's HSDP shard degree).
        knobs: the knobs given (name → value): those the engine's files carry are written.

    Raises:
        InvalidInputError: an unknown target, or a plan the engine cannot run.
    """
    return by_target(target).export(plan, target, names, schedule=schedule, gpus_per_node=gpus_per_node,
                                    knobs=knobs)


def _text(files: Sequence[ExportFile]) -> str:
    """The files as one text: each after a ``# ==> name <==`` line, one with a printed form (Megatron's line) as that."""
    return "".join(file.printed if file.printed is not None else f"# ==> {file.name} <==\n{file.text}"
                   for file in files)


def export_plan(plan: Plan | Sequence[int], target: str, names: Sequence[LayerName] | None = None, *,
                schedule: Schedule | None = None, gpus_per_node: int = 8) -> str:
    """The export as one text: Megatron's shell-quoted line; for the others each file after a ``# ==> name <==`` line.

    Raises:
        InvalidInputError: an unknown target, or a plan the engine cannot run.
    """
    return _text(export_files(plan, target, names, schedule=schedule, gpus_per_node=gpus_per_node))


def plan_exports(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                 knobs: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Every engine's export of ``plan``: ``{"text", "files": {name: text}, "notes"}``, or ``{"error"}`` where it cannot.

    ``knobs``: the knobs given (name → value); each engine writes those its files carry (torchtitan's ``compile``).

    Beside an error stands what the engine gives instead (:attr:`Files.instead`: Megatron-LM's
    ``"mapping"`` for a model it has no port of).
    """
    plan = to_plan(plan)
    out: dict[str, dict[str, Any]] = {}
    for engine in _ENGINES:
        try:
            files = engine.export(plan, names=names, knobs=knobs)
        except InvalidInputError as error:
            out[engine.name] = {"error": str(error), **engine.files.instead(plan, names)}
            continue
        out[engine.name] = {"text": _text(files), "files": {f.name: f.text for f in files}, "notes": engine.notes(plan, names)}
    return out
