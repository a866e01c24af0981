"""Choosing among the partitions whose slowest stage is optimal: the tie-break's entry point.

    from pipeplan.partition.tiebreak import tie_break
    bounds, applied = tie_break(problem, bottleneck, "lexicographic", fallback)   # problem: a MinMaxProblem

With few tied (start, end) pairs (up to :data:`PAIR_BUDGET`) an exact dynamic
program walks every pair; with more, the windowed algorithms of
:mod:`pipeplan.partition.ties` do the same job in time that does not grow with
the number of tied partitions. ``"lexicographic"`` minimises the sorted stage
times from the slowest down, ``"variance"`` the sum of squared stage times,
``"none"`` keeps ``fallback``.
"""

from __future__ import annotations

import math

import numpy as np

from .problem import MinMaxProblem
from .ties import Listing, StageWindows, lexicographic_bounds, sorted_tuple_program, variance_bounds

__all__ = ["PAIR_BUDGET", "tie_break"]

# Up to this many (start, end) pairs on optimal partitions the tie-breaks walk
# every pair (the lexicographic one with Python tuples, about 1 µs a pair); above
# it they use the windowed algorithms of :mod:`.ties`, whose work does not grow
# with the number of tied partitions.
PAIR_BUDGET = 100_000


def tie_break(problem: MinMaxProblem, bottleneck: float, how: str, fallback: list[int]) -> tuple[list[int], str]:
    """The tie-broken optimal bounds and the tie-break actually applied."""
    if how == "none" or bottleneck <= 0.0:
        return fallback, how  # at a zero bottleneck every optimal partition is all zeros
    windows = None if _pair_ceiling(problem) <= PAIR_BUDGET else StageWindows(problem, bottleneck)
    if windows is None or windows.pair_count() <= PAIR_BUDGET:
        pairs = problem.optimal_pairs(bottleneck)
        chosen = _exact_lexicographic(problem, pairs) if how == "lexicographic" else _exact_variance(problem, pairs)
        return chosen, how
    if how == "variance":
        return variance_bounds(problem, windows), how
    listed = lexicographic_bounds(problem, windows, fallback)
    return (_exact_lexicographic(problem, problem.optimal_pairs(bottleneck)) if listed is None else listed), how


def _pair_ceiling(problem: MinMaxProblem) -> int:
    """How many (stage, start, end) pairs any partition could use: at least :meth:`StageWindows.pair_count`.

    Stage ``k`` starts in ``[k, L − S + k]`` and ends after its start, at most at
    ``L − S + k + 1``: ``n (n + 1) / 2`` pairs with ``n = L − S + 1``. Where this is
    within :data:`PAIR_BUDGET` the windows need not be built to know the exact
    program applies (the same choice, without their cost).
    """
    free = problem.num_layers - problem.num_stages + 1
    return problem.num_stages * free * (free + 1) // 2

def _pair_arrays(pairs, k):
    starts, first, last = pairs[k]
    counts = last - first + 1
    s = np.repeat(starts, counts)
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    e = np.repeat(first, counts) + offsets
    return s, e

def _exact_variance(problem: MinMaxProblem, pairs) -> list[int]:
    num_layers = problem.num_layers
    cost = np.full(num_layers + 1, math.inf)
    cost[0] = 0.0
    back: list[np.ndarray] = []
    for k in range(problem.num_stages):
        s, e = _pair_arrays(pairs, k)
        value = (problem.prefixes[k][e] - problem.prefixes[k][s]) + problem.extra[k]
        total = cost[s] + value * value
        order = np.lexsort((-s, total, e))  # by end, then total, then the latest start
        e_sorted = e[order]
        keep = np.concatenate([[True], e_sorted[1:] != e_sorted[:-1]])
        chosen = order[keep]
        new_cost = np.full(num_layers + 1, math.inf)
        new_cost[e[chosen]] = total[chosen]
        pointer = np.full(num_layers + 1, -1)
        pointer[e[chosen]] = s[chosen]
        back.append(pointer)
        cost = new_cost
    bounds = [num_layers]
    for k in range(problem.num_stages - 1, 0, -1):
        bounds.append(int(back[k][bounds[-1]]))
    bounds.append(0)
    bounds.reverse()
    return bounds

def _exact_lexicographic(problem: MinMaxProblem, pairs) -> list[int]:
    """Exact lexicographic program over every pair on an optimal partition."""
    starts, ends, values = [], [], []
    for k in range(problem.num_stages):
        s, e = _pair_arrays(pairs, k)
        starts.append(s)
        ends.append(e)
        values.append((problem.prefixes[k][e] - problem.prefixes[k][s]) + problem.extra[k])
    fixed = [np.zeros(len(s), dtype=bool) for s in starts]
    return sorted_tuple_program(Listing(starts, ends, values, fixed), problem.num_layers)
