"""torchtitan's schedule names (torch's classes) and pipeplan's, one table both ways.

    from pipeplan.engines._torchtitan_schedules import TORCH_SCHEDULE_NAMES, pipeplan_schedule_name
    TORCH_SCHEDULE_NAMES["zb-v"]              # 'ZBVZeroBubble': what the torchtitan export writes
    pipeplan_schedule_name("interleaved1f1b") # 'interleaved': what the torchtitan reader reads
    pipeplan_schedule_name("DualPipeV")       # None: a torch schedule pipeplan has no generator for

The export (:mod:`.torchtitan`) and the reader (:mod:`.torchtitan_config`, its fields in
:mod:`._torchtitan_fields`) both read this table.
"""

from __future__ import annotations

from ..errors import InvalidInputError

__all__ = ["TORCH_SCHEDULE_NAMES", "TORCH_SCHEDULE_CLASSES", "pipeplan_schedule_name"]

#: pipeplan's schedule → torch's class name, for the schedules with a torch class of their own.
TORCH_SCHEDULE_NAMES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B", "zb-v": "ZBVZeroBubble"}
#: Every name torch's get_schedule_class takes, case-insensitively (torch/distributed/pipelining/schedules.py,
#: torch 2.13, get_schedule_class's schedule_map): what torchtitan's pipeline_parallel_schedule may name.
TORCH_SCHEDULE_CLASSES = ("1F1B", "Interleaved1F1B", "GPipe", "LoopedBFS", "InterleavedZeroBubble",
                          "PipelineScheduleSingle", "PipelineScheduleMulti", "ZBVZeroBubble", "DualPipeV")


def pipeplan_schedule_name(torch_name: str) -> str | None:
    """pipeplan's schedule for torch's class ``torch_name`` (case-insensitive, as torch looks it up); ``None``: none.

    Raises:
        InvalidInputError: a name torch's ``get_schedule_class`` does not take.
    """
    known = {name.lower(): name for name in TORCH_SCHEDULE_CLASSES}
    if torch_name.lower() not in known:
        raise InvalidInputError(f"pipeline_parallel_schedule {torch_name!r} is no torch schedule (torchtitan takes "
                                f"{', '.join(TORCH_SCHEDULE_CLASSES)})")
    ours = {theirs.lower(): mine for mine, theirs in TORCH_SCHEDULE_NAMES.items()}
    return ours.get(torch_name.lower())
