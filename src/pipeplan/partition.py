"""Contiguous layer partitioning (minimal first version; the partition issue extends it).

    from pipeplan.partition import partition_layers
    partition_layers([2.0] * 32, 4, first_extra=16, last_extra=8).layers_per_stage   # (3, 11, 11, 7)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._validation import finite_floats, non_negative_float, positive_int
from .errors import InvalidInputError

__all__ = ["PartitionResult", "partition_layers"]


@dataclass(frozen=True)
class PartitionResult:
    """Layers per stage and the resulting stage times."""

    layers_per_stage: tuple[int, ...]
    stage_times: tuple[float, ...]


def partition_layers(
    layer_costs: Sequence[float], num_stages: int, *, first_extra: float = 0.0, last_extra: float = 0.0
) -> PartitionResult:
    """Split layers into ``num_stages`` non-empty contiguous stages minimising the slowest.

    Ties are broken by the smallest sum of squared stage times (the smallest spread).
    """
    costs = np.asarray(finite_floats("layer_costs", layer_costs, allow_zero=True))
    stages = positive_int("num_stages", num_stages)
    if len(costs) < stages:
        raise InvalidInputError(f"need at least num_stages={stages} layers, got {len(costs)}")
    extra = np.zeros(stages)
    extra[0] += non_negative_float("first_extra", first_extra)
    extra[-1] += non_negative_float("last_extra", last_extra)
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    count = len(costs)
    inf = float("inf")
    # best[s][j]: (max, sum of squares) for the first j layers in s+1 stages.
    best = [[(inf, inf)] * (count + 1) for _ in range(stages)]
    cut = [[0] * (count + 1) for _ in range(stages)]
    for j in range(1, count + 1):
        t = prefix[j] + extra[0]
        best[0][j] = (t, t * t)
    for s in range(1, stages):
        for j in range(s + 1, count + 1):
            for i in range(s, j):
                prev_max, prev_sq = best[s - 1][i]
                t = prefix[j] - prefix[i] + extra[s]
                cand = (max(prev_max, t), prev_sq + t * t)
                if cand < best[s][j]:
                    best[s][j] = cand
                    cut[s][j] = i
    bounds = [count]
    for s in range(stages - 1, 0, -1):
        bounds.append(cut[s][bounds[-1]])
    bounds.append(0)
    bounds.reverse()
    sizes = tuple(bounds[k + 1] - bounds[k] for k in range(stages))
    times = tuple(float(prefix[bounds[k + 1]] - prefix[bounds[k]] + extra[k]) for k in range(stages))
    return PartitionResult(sizes, times)
