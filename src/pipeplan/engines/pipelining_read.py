"""Reads pipeplan's torch export (``split_spec.py`` + ``schedule.csv``) back, and names the schedule a CSV holds.

    from pipeplan.engines.pipelining_read import read_torch_export, read_schedule_csv, recognise_schedule
    config = read_torch_export(Path("out/"))      # RunConfig: pp, virtual_stages, layers_per_stage, schedule, ...
    config.value("schedule")                      # 'zb-v': schedule.csv is what pipeplan's zb-v writes
    recognise_schedule(read_schedule_csv(Path("out/schedule.csv")))    # 'zb-v', or None for an order of its own

``split_spec.py`` is read with :mod:`ast` (nothing in it runs): ``STAGE_TO_RANK`` (the
placement: pp = its largest rank + 1, virtual stages = stages ÷ pp), ``LAYERS_PER_STAGE``
(pipeplan's layer counts, written by the export for this reader), ``MODULE_FQNS_PER_STAGE``
(one layer per path where ``LAYERS_PER_STAGE`` is absent) and ``DATA_PARALLEL`` (the mode the
stages are wrapped for: ``fully_shard`` for fsdp/hsdp), ``COMPILE`` (``True``: torch.compile
priced, read as the ``compile`` knob ``on``) and ``DDP_OPTIONS`` (``DistributedDataParallel``'s keyword
arguments: ``bucket_cap_mb`` and ``find_unused_parameters``, the knobs ``--bucket-cap-mb`` and
``--find-unused-parameters``; absent: torch's defaults, 25 MiB and off). ``schedule.csv`` is torch's
``_PipelineScheduleRuntime._load_csv`` format (one row per rank, ``{stage}{F|B|I|W}{microbatch}``):
its microbatches give ``num_microbatches``, and :func:`recognise_schedule` compares it with
every fixed generator of :mod:`pipeplan.schedules` for the same ranks, stages and
microbatches; an order none of them writes is ``"csv"``.
"""

from __future__ import annotations

import ast
import csv
import io
import re
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from ..schedule import Schedule
from .run_config import RunConfig, Setting

__all__ = ["read_schedule_csv", "recognise_schedule", "read_torch_export", "CSV_SCHEDULE"]

#: The schedule a CSV order gets when no generator of pipeplan's writes it (an order of its own).
CSV_SCHEDULE = "csv"
_CELL = re.compile(r"^(\d+)([FBIW])(\d+)$")


def read_schedule_csv(path: Path) -> Schedule:
    """The order in ``path`` (torch's compact CSV: one row per rank, one action per cell).

    Raises:
        InvalidInputError: a cell that is no ``{stage}{F|B|I|W}{microbatch}`` action, a stage on
            two ranks, or an empty file (one line naming the cell).
    """
    text = path.read_text()
    rows = [[cell.strip() for cell in row if cell.strip()] for row in csv.reader(io.StringIO(text))]
    if not any(rows):
        raise InvalidInputError(f"{path}: no actions (one row per rank of {{stage}}{{F|B|I|W}}{{microbatch}})")
    owner: dict[int, int] = {}
    orders: list[list[tuple[str, int, int]]] = []
    for rank, row in enumerate(rows):
        order = []
        for cell in row:
            match = _CELL.match(cell)
            if match is None:
                raise InvalidInputError(f"{path}: row {rank + 1}: {cell!r} is no action (write {{stage}}{{F|B|I|W}}"
                                        "{microbatch}, e.g. 0F0)")
            stage, kind, microbatch = int(match[1]), match[2], int(match[3])
            if owner.setdefault(stage, rank) != rank:
                raise InvalidInputError(f"{path}: stage {stage} runs on rows {owner[stage] + 1} and {rank + 1}")
            order.append((kind, stage, microbatch))
        orders.append(order)
    stages = max(owner) + 1
    missing = sorted(set(range(stages)) - set(owner))
    if missing:
        raise InvalidInputError(f"{path}: stage {missing[0]} has no action (stages 0..{stages - 1} expected)")
    microbatches = 1 + max(mb for order in orders for _, _, mb in order)
    try:
        return Schedule(orders, [owner[s] for s in range(stages)], microbatches, name=CSV_SCHEDULE)
    except (ValueError, InvalidInputError) as error:
        raise InvalidInputError(f"{path}: {error}") from None


def recognise_schedule(schedule: Schedule) -> str | None:
    """The name of the fixed generator of :mod:`pipeplan.schedules` that writes exactly ``schedule``'s order.

    Each generator that is not cost-aware is asked for the same stages, ranks (its
    layout's placement) and microbatches; ``None`` when none writes this order.
    """
    from ..schedules import SCHEDULES, build_schedule, schedule_info

    ranks = max(schedule.placement) + 1
    stages = len(schedule.placement)
    if stages % ranks:
        return None
    for name in SCHEDULES:
        info = schedule_info(name)
        if info.cost_aware:
            continue
        try:
            built = build_schedule(name, num_stages=stages, num_microbatches=schedule.num_microbatches,
                                   **info.shape_options(stages // ranks))
        except (InvalidInputError, ValueError, TypeError):
            continue
        if tuple(built.placement) == tuple(schedule.placement) and built.orders == schedule.orders:
            return name
    return None


def _literals(path: Path) -> dict[str, tuple[Any, str]]:
    """Module-level ``NAME = literal`` assignments of a Python file: ``{NAME: (value, source line)}``."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as error:
        raise InvalidInputError(f"{path}: not Python ({error.msg}, line {error.lineno})") from None
    found: dict[str, tuple[Any, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            found[node.targets[0].id] = (value, f"{path.name}: {node.targets[0].id} = {ast.unparse(node.value)}")
    return found


def read_torch_export(path: Path) -> RunConfig:
    """The plan a torch export folder (or its ``split_spec.py``) holds, in pipeplan's fields.

    Raises:
        InvalidInputError: no ``split_spec.py`` / ``schedule.csv``, a ``split_spec.py``
            without ``STAGE_TO_RANK``, or a CSV whose stages are not the file's.
    """
    folder = path if path.is_dir() else path.parent
    spec_path, csv_path = folder / "split_spec.py", folder / "schedule.csv"
    for needed in (spec_path, csv_path):
        if not needed.is_file():
            raise InvalidInputError(f"{folder}: no {needed.name} (give the folder pipeplan's torch export wrote)")
    facts = _literals(spec_path)
    if "STAGE_TO_RANK" not in facts:
        raise InvalidInputError(f"{spec_path}: no STAGE_TO_RANK list: not a split_spec.py pipeplan wrote")
    placement, placement_source = facts["STAGE_TO_RANK"]
    settings: dict[str, Setting] = {}
    notes: list[str] = []
    pp = max(placement) + 1
    settings["pp"] = Setting(pp, placement_source)
    settings["virtual_stages"] = Setting(len(placement) // pp, placement_source)
    if "LAYERS_PER_STAGE" in facts:
        settings["layers_per_stage"] = Setting(tuple(facts["LAYERS_PER_STAGE"][0]), facts["LAYERS_PER_STAGE"][1])
    elif "MODULE_FQNS_PER_STAGE" in facts:
        parts, source = facts["MODULE_FQNS_PER_STAGE"]
        settings["layers_per_stage"] = Setting(tuple(len(part) for part in parts), source)
        notes.append("layers per stage counted as one layer per module path (split_spec.py has no LAYERS_PER_STAGE)")
    if "DATA_PARALLEL" in facts:
        settings["dp_mode"] = Setting(facts["DATA_PARALLEL"][0], facts["DATA_PARALLEL"][1])
    if "COMPILE" in facts:
        compiled, source = facts["COMPILE"]
        if not isinstance(compiled, bool):
            raise InvalidInputError(f"{spec_path}: COMPILE must be True or False, got {compiled!r}")
        settings["compile"] = Setting("on" if compiled else "off", source)
    ignored = _ddp_options(spec_path, facts, settings)
    order = read_schedule_csv(csv_path)
    if tuple(order.placement) != tuple(placement):
        raise InvalidInputError(f"{csv_path}: its rows place stages {list(order.placement)}, split_spec.py's "
                                f"STAGE_TO_RANK {list(placement)}")
    csv_source = f"{csv_path.name}: {len(order.orders)} rows, microbatches 0..{order.num_microbatches - 1}"
    settings["num_microbatches"] = Setting(order.num_microbatches, csv_source)
    name = recognise_schedule(order)
    if name is None:
        notes.append("schedule.csv is an order none of pipeplan's fixed schedules writes: its schedule is 'csv'")
    settings["schedule"] = Setting(name or CSV_SCHEDULE, csv_source + (f" (the order pipeplan's {name} writes)"
                                                                        if name else " (an order of its own)"))
    notes.append("split_spec.py names module paths, not a model: give --preset or --spec")
    return RunConfig(engine="torch", path=str(path), settings=settings, notes=tuple(notes), ignored=ignored)


def _ddp_options(spec_path: Path, facts: dict[str, tuple[Any, str]], settings: dict[str, Setting]) -> tuple[str, ...]:
    """``DDP_OPTIONS``' priced keys into ``settings`` (``bucket_cap_mb``, ``find_unused_parameters``: the knobs
    ``--bucket-cap-mb`` and ``--find-unused-parameters``); its other keys, returned, are read but not priced.

    Raises:
        InvalidInputError: ``DDP_OPTIONS`` is no dict, ``bucket_cap_mb`` no number > 0, or
            ``find_unused_parameters`` not ``True``/``False`` (one line naming it).
    """
    if "DDP_OPTIONS" not in facts:
        return ()
    options, source = facts["DDP_OPTIONS"]
    if not isinstance(options, dict):
        raise InvalidInputError(f"{spec_path}: DDP_OPTIONS must be a dict of DistributedDataParallel's keyword "
                                f"arguments, got {options!r}")
    ignored = []
    for key, value in options.items():
        if key == "bucket_cap_mb":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise InvalidInputError(f"{spec_path}: DDP_OPTIONS bucket_cap_mb must be a number of MiB > 0, "
                                        f"got {value!r}")
            settings["bucket_cap_mb"] = Setting(value, source)
        elif key == "find_unused_parameters":
            if not isinstance(value, bool):
                raise InvalidInputError(f"{spec_path}: DDP_OPTIONS find_unused_parameters must be True or False, "
                                        f"got {value!r}")
            settings["find_unused_parameters"] = Setting("on" if value else "off", source)
        else:
            ignored.append(f"DDP_OPTIONS {key}")
    return tuple(ignored)
