"""The planner's names for the one plan type, which lives in the core (:mod:`pipeplan.plan`).

    from pipeplan.planner import Plan, as_plan
    plan = as_plan([3, 11, 11, 7])
    plan.pp, plan.placement                # 4, (0, 1, 2, 3)

:class:`~pipeplan.plan.Plan` sits in the core so that the partitioner, below the
planner, can return it (:class:`~pipeplan.partition.PartitionResult` and
:class:`~pipeplan.partition.placement.ChunkPlacement` are Plans); the planner's
modules import it from here.
"""

from __future__ import annotations

from ..plan import RECOMPUTE_MODES, Plan, RankMemory, Recompute, as_plan, schedule_label

__all__ = ["Plan", "RankMemory", "Recompute", "RECOMPUTE_MODES", "as_plan", "schedule_label"]
