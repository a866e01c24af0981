"""The planner: from a model and a cluster to the fastest pipeline plan that fits.

    from pipeplan.planner import Cluster, Workload, search
    result = search(Workload.from_spec(presets.get("pi0"), device), Cluster.of("h100-80g", 8), global_batch=256)
    result.best.schedule, result.best.layers_per_stage, result.ratio(result.best)

Modules: :mod:`pipeplan.plan` (the Plan type, re-exported here), :mod:`~pipeplan.planner.workload`
(per-layer costs per micro-batch size and recompute mode), :mod:`~pipeplan.planner.cluster`
(GPUs and links), :mod:`~pipeplan.planner.memory` (bytes per parameter and per rank),
:mod:`~pipeplan.planner.space` (what is enumerated), :mod:`~pipeplan.planner.layout`
(partitions and chunk layouts of a configuration), :mod:`~pipeplan.planner.links` (message and
all-reduce times), :mod:`~pipeplan.planner.bounds` and :mod:`~pipeplan.planner.pruning` (lower
bounds), :mod:`~pipeplan.planner.evaluate` (simulate a layout into a Plan),
:mod:`~pipeplan.planner.options` (what one search is asked), :mod:`~pipeplan.planner.search` (the search loop,
ranking, baselines), :mod:`~pipeplan.planner.advice`
(when no plan fits: the remedies that would, each searched), :mod:`~pipeplan.planner.resolution`
(step times to three significant figures, and which plans tie there).
"""

from __future__ import annotations

from ..plan import RECOMPUTE_MODES, Plan, RankMemory, Recompute, as_plan
from .bounds import step_time_lower_bound
from .cluster import Cluster, allreduce_ms
from .evaluate import evaluate_layout
from .memory import OptimizerBytes
from .records import Rejection, SearchStats
from .options import DEFAULT_HEADROOM, SearchOptions
from .search import SearchResult, search
from .space import Config, SearchSpace
from .workload import Workload

__all__ = [
    "DEFAULT_HEADROOM",
    "Cluster",
    "Config",
    "OptimizerBytes",
    "Plan",
    "RECOMPUTE_MODES",
    "RankMemory",
    "Recompute",
    "Rejection",
    "SearchOptions",
    "SearchResult",
    "SearchSpace",
    "SearchStats",
    "Workload",
    "allreduce_ms",
    "as_plan",
    "evaluate_layout",
    "search",
    "step_time_lower_bound",
]
