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

import bisect
import math

import numpy as np

from .problem import MinMaxProblem, _limit_one
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
    if windows is None and how == "lexicographic":
        return _forward_lexicographic(problem, bottleneck), how
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

def _forward_lexicographic(problem: MinMaxProblem, bottleneck: float) -> list[int]:
    """:func:`_exact_lexicographic` over :meth:`MinMaxProblem.optimal_pairs`, in plain floats, one pass.

    The program walks every (start, end) pair whose stage fits ``bottleneck`` from
    every start some earlier stage reaches, a superset of the optimal pairs; the
    extra pairs end where no later stage finishes the partition, so the entries
    the answer is traced back through (and every value and choice on them) are
    those of the exact program over the optimal pairs: the same bounds. Each
    stage value is the same rounded prefix difference (:meth:`stage_value`), and
    each end keeps the largest negated sorted tuple, the latest start on a tie,
    an order that does not depend on the order the pairs are walked in. Used
    where every pair fits :data:`PAIR_BUDGET` (:func:`_pair_ceiling`).
    """
    num_layers, num_stages = problem.num_layers, problem.num_stages
    prefixes, extras = problem._prefix_lists, problem._extra_list
    caps = [problem._limits_of(k)[0] if problem.mem_limit is not None else None for k in range(num_stages)]

    def last_end(k: int, s: int) -> int:
        """The last end of stage ``k`` from ``s`` within the bottleneck, the memory and the room (as ``_ends``)."""
        end = _limit_one(prefixes[k], s, extras[k], bottleneck, num_layers)
        end = min(end, num_layers - (num_stages - 1 - k))
        cap = caps[k]
        return end if cap is None else min(end, cap[s])

    # lowest[k]: the first end of stage k from which stage k + 1 can reach lowest[k + 1] (the last end
    # is non-decreasing in the start): no partition ends stage k earlier
    lowest = [num_layers] * num_stages
    for k in range(num_stages - 2, -1, -1):
        lo, hi = k + 1, lowest[k + 1]
        while lo < hi:
            middle = (lo + hi) // 2
            if last_end(k + 1, middle) >= lowest[k + 1]:
                hi = middle
            else:
                lo = middle + 1
        lowest[k] = lo
    best: dict[int, tuple[tuple[float, ...], int]] = {0: ((), -1)}
    pointers: list[dict[int, int]] = []
    insort = bisect.bisect_right
    for k in range(num_stages):
        prefix, extra, cap = prefixes[k], extras[k], caps[k]
        room = num_layers - (num_stages - 1 - k)
        lo_end = lowest[k]
        current: dict[int, tuple[tuple[float, ...], int]] = {}
        get = current.get
        for s, (vector, _) in best.items():
            base = prefix[s]
            # _limit_one(prefix, s, extra, bottleneck, num_layers), inline: the same comparisons
            end = min(max(insort(prefix, base + (bottleneck - extra)) - 1, s), num_layers)
            while end > s and (prefix[end] - base) + extra > bottleneck:
                end -= 1
            while end < num_layers and (prefix[end + 1] - base) + extra <= bottleneck:
                end += 1
            if end > room:
                end = room
            if cap is not None and cap[s] < end:
                end = cap[s]
            for e in range(max(s + 1, lo_end), end + 1):
                key = -((prefix[e] - base) + extra)
                at = insort(vector, key)
                merged = vector[:at] + (key,) + vector[at:]
                old = get(e)
                if old is None or merged > old[0] or (merged == old[0] and s > old[1]):
                    current[e] = (merged, s)
        pointers.append({e: value[1] for e, value in current.items()})
        best = current
    bounds = [num_layers]
    for k in range(num_stages - 1, 0, -1):
        bounds.append(pointers[k][bounds[-1]])
    bounds.append(0)
    bounds.reverse()
    return bounds


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
