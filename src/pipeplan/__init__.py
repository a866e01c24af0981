"""pipeplan: plan, simulate and run pipeline-parallel training for unequal stages.

    >>> import pipeplan
    >>> schedule = pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8)
    >>> timeline = pipeplan.simulate(schedule, pipeplan.StageCosts(forward=[30, 10, 10, 20]))
    >>> print(timeline.makespan, round(timeline.bubble_ratio, 3))
    750.0 0.44

Planning and simulation need numpy only; ``pipeplan.runtime`` needs torch.
"""

from __future__ import annotations

from . import analytic
from .lessons.scheduler import AsymmetricPipelineScheduler
from .predict.compare import Comparison, compare
from .costs import CommModel, StageCosts
from .errors import (
    DeadlockError,
    InfeasiblePlanError,
    InvalidInputError,
    InvalidScheduleError,
    PipeplanError,
    RuntimeFailure,
)
from .partition import partition_layers
from .schedule import Action, Kind, Message, Payload, Schedule
from .schedules import SCHEDULES, build_schedule
from .simulate import simulate
from .timeline import IdleCause, Timeline

__version__ = "0.1.0"

__all__ = [
    "Action",
    "AsymmetricPipelineScheduler",
    "CommModel",
    "DeadlockError",
    "IdleCause",
    "InfeasiblePlanError",
    "InvalidInputError",
    "InvalidScheduleError",
    "Kind",
    "Message",
    "Payload",
    "PipeplanError",
    "RuntimeFailure",
    "SCHEDULES",
    "Schedule",
    "StageCosts",
    "Timeline",
    "analytic",
    "build_schedule",
    "Comparison",
    "compare",
    "partition_layers",
    "simulate",
]
