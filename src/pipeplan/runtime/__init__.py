"""Run any pipeplan :class:`~pipeplan.schedule.Schedule` on real processes (torch.distributed).

    from pipeplan.runtime import PipelineRuntime, spawn
    def work(rank, world_size):
        return PipelineRuntime(stages, schedule, loss_fn).step(inputs, targets).loss
    spawn(work, 2)          # CPU gloo processes on this machine; RuntimeFailure if a rank fails

Modules: :mod:`.executor` (one rank's order), :mod:`.p2p` (message sequencing),
:mod:`.grid` (pp × dp groups), :mod:`.recorder` (the measured Timeline),
:mod:`.launch` (spawn / torchrun), :mod:`.faults` (failure propagation),
:mod:`.calibrate` (message and core-sharing timings), :mod:`.measure` (the profiler),
:mod:`.loop` (profile -> partition -> run -> compare). Needs torch.
"""

from __future__ import annotations

from .executor import PipelineRuntime, StepResult
from .faults import FaultMonitor
from .grid import ProcessGrid
from .launch import MIN_TIMEOUT, RunInterrupted, check_timeout, default_backend, in_torchrun, init_from_env, spawn

__all__ = [
    "MIN_TIMEOUT",
    "FaultMonitor",
    "RunInterrupted",
    "check_timeout",
    "PipelineRuntime",
    "ProcessGrid",
    "StepResult",
    "default_backend",
    "in_torchrun",
    "init_from_env",
    "spawn",
]
