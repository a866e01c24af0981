"""pipeplan: plan, simulate and run pipeline-parallel training for unequal stages.

    >>> import pipeplan
    >>> schedule = pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8)
    >>> timeline = pipeplan.simulate(schedule, pipeplan.StageCosts(forward=[30, 10, 10, 20]))
    >>> print(timeline.makespan, round(timeline.bubble_ratio, 3))
    750.0 0.44

Planning and simulation need numpy only; ``pipeplan.runtime`` needs torch.

Module map, in layers (each imports only its own layer and those below it;
docs/architecture.md names the owner of every concept):

* core: :mod:`.actions` (Kind, Action, Message), :mod:`.schedule` (Schedule and its
  checks), :mod:`.lowering` (its integer form), :mod:`.costs` (StageCosts,
  CommModel), :mod:`.simulate`, :mod:`.timeline`, :mod:`.analytic` (closed forms,
  bounds), :mod:`.calibration`, :mod:`.limits`, :mod:`.errors`, :mod:`.profile_format`;
* :mod:`.schedules` (one module per family and the registry), :mod:`.viz` (views);
* :mod:`.layers` (LayerProfile), :mod:`.hardware`, :mod:`.models`, :mod:`.presets`,
  :mod:`.plan` (the one Plan type), :mod:`.partition` (stages and chunks);
* :mod:`.engines` (one module per engine and the registry: what it runs, its exports);
* :mod:`.predict` (a profile's predicted step, predicted vs measured),
  :mod:`.planner` (search, baselines), :mod:`.runtime` (torch:
  executor, launch, faults, the profiler), :mod:`.dualrate` (the dual-rate pipeline);
* :mod:`.lessons` (the seed lessons' exercise APIs); :mod:`.cli` (the ``pipeplan`` verbs).
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
from .partition import PartitionOptions, partition_layers
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
    "PartitionOptions",
    "partition_layers",
    "simulate",
]
