"""Dual-rate pipelines: a slow vision side and a fast action side, each at its own rate.

    from pipeplan import build_schedule, simulate, StageCosts
    from pipeplan.dualrate import dual_rate_metrics
    timeline = simulate(build_schedule("dual-rate", num_stages=2, num_microbatches=64, rate_ratio=4),
                        StageCosts([30, 4], update=[1, 0.5]))
    dual_rate_metrics(timeline, batch_size=32).samples_per_s

The whole feature lives here except its schedule generator, which is one family
of the registry like every other (:mod:`pipeplan.schedules.dual_rate`, re-exported
below): :mod:`.metrics` (throughput, staleness, memory of a timeline),
:mod:`.config` and :mod:`.result` (a run's settings and outcome) — these three
torch-free — and, needing torch, :mod:`.task` (the temporal control task),
:mod:`.policy` (the vision and action networks), :mod:`.training` (task, networks,
optimizer and loss of a run), :mod:`.costs` (measured per-rank costs),
:mod:`.worker` (one rank of the dual-rate pipeline), :mod:`.synchronous` (the
baseline rank), :mod:`.reference` (the single-process replay), :mod:`.runtime`
(the launcher) and :mod:`.study` (the method comparison). Importing this package
needs numpy only.
"""

from __future__ import annotations

from ..schedules.dual_rate import DualRateSchedule, DualRateShape, check_damping, dual_rate
from .metrics import DualRateMetrics, dual_rate_metrics

__all__ = ["DualRateMetrics", "DualRateSchedule", "DualRateShape", "check_damping", "dual_rate", "dual_rate_metrics"]
