"""Exact tie-breaks among min-max partitions that stay fast when many partitions tie.

:func:`pipeplan.partition.partition_layers` first finds the optimal bottleneck
``T``; these routines then choose among the partitions whose slowest stage is
``T``. When ``T`` is set by one part of the model (an indivisible layer, a fixed
extra) the others have a lot of room and the number of (start, end) pairs on some
optimal partition grows like ``S·L·L/S``; walking them all took 40 s for 10,000
layers into 128 stages. Here, on 8 layers of time 1 into 3 stages with 6 more on stage 0
(so ``T = 7``, and stages 1 and 2 have room)::

    >>> import numpy as np
    >>> from pipeplan.partition.problem import MinMaxProblem
    >>> from pipeplan.partition.ties import StageWindows, lexicographic_bounds, variance_bounds
    >>> problem = MinMaxProblem([np.arange(9.0)] * 3, np.array([6.0, 0, 0]))   # prefix sums of 8 ones
    >>> bottleneck, witness = problem.min_bottleneck()
    >>> bottleneck, witness, problem.values(witness)
    (7.0, [0, 1, 7, 8], [7.0, 6.0, 1.0])
    >>> windows = StageWindows(problem, bottleneck)        # per stage: first start for each end
    >>> variance_bounds(problem, windows)                  # min Σ stage², monotone divide and conquer
    [0, 1, 5, 8]
    >>> lexicographic_bounds(problem, windows, witness)   # sorted stage times, level by level
    [0, 1, 5, 8]

How it works (``v(k, s, e)`` is stage ``k`` on layers ``[s, e)``):

* **Windows.** For stage ``k`` the last end that fits (time ``<= T``, memory,
  room for the later stages) is non-decreasing in the start, so for each end
  ``e`` the starts that fit are one interval ``[first_start[e], e - 1]``.
* **Variance** minimises ``Σ v²`` by a dynamic program over ends. ``v²`` is a
  convex function of an interval sum, so the cost matrix is Monge (also with the
  infeasible entries, which form a staircase) and the best start is
  non-decreasing in the end: divide and conquer evaluates ``O(L log L)`` starts
  per stage instead of every pair, all nodes of one recursion level at once in
  numpy.
* **Lexicographic** (the stage times sorted slowest first, smallest
  lexicographically) works in levels. Level one: every optimal partition has some
  stages at ``T``; a min-count dynamic program over the windows (range minima,
  sparse tables) gives the fewest, ``c₁``, and keeps only the (stage, position)
  nodes that lie on a partition with exactly ``c₁``. One such partition is
  traced back and each run of stages between its ``T`` stages re-solved min-max;
  its largest other stage ``q`` bounds the next value: the lexicographic
  optimum's other stages are at most ``q`` (it minimises that value among
  partitions with ``c₁`` stages at ``T``). The (start, end)
  pairs with value ``T`` or ``<= q`` between kept nodes are then listed, and each
  further level finds the smallest possible next value (a bottleneck pass over
  the list), the fewest stages at it (a count pass) and keeps the pairs on such
  partitions. Every level keeps the optimum in the list and every partition left
  shares the values fixed so far, so once the list is short an exact dynamic
  program over sorted tuples finishes it.

Both are exact in exact arithmetic (the property tests compare them with brute
force on integer costs); with real-valued costs stage values are the rounded
prefix differences every part of the solver uses.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

import numpy as np

from .problem import MinMaxProblem, monotone_limit

__all__ = ["StageWindows", "Listing", "variance_bounds", "lexicographic_bounds", "sorted_tuple_program",
           "LEVEL_PAIR_BUDGET"]

# Below this many listed pairs the sorted-tuple dynamic program (about 1 µs a
# pair) finishes the lexicographic tie-break; above it another level is peeled.
LEVEL_PAIR_BUDGET = 60_000
# Listing more pairs than this would need too much memory: the caller falls back
# to the exact pair-by-pair dynamic program over all optimal pairs.
LISTING_LIMIT = 6_000_000


def _limit(problem: Any, k: int, threshold: float, *, time_only: bool) -> np.ndarray:
    """Last end per start (``0..L``) for stage ``k`` at ``threshold``; non-decreasing."""
    starts = np.arange(problem.num_layers + 1)
    if time_only:
        return monotone_limit(problem.prefixes[k], starts, problem.extra[k], threshold, problem.num_layers)
    return problem._ends(k, starts, threshold)[0]


class StageWindows:
    """Per stage, which starts fit each end at the optimal bottleneck.

    Attributes:
        last_end: ``last_end[k][s]``, the last end stage ``k`` may have from ``s``.
        below_end: ``below_end[k][s]``, the last end whose time is strictly below the bottleneck.
        first_start: ``first_start[k][e]``, the first start that fits end ``e``.
        first_below: ``first_below[k][e]``, the first start whose time to ``e`` is below the bottleneck.
    """

    def __init__(self, problem: Any, bottleneck: float) -> None:
        self.bottleneck = bottleneck
        below = float(np.nextafter(bottleneck, -math.inf))
        num_layers = problem.num_layers
        positions = np.arange(num_layers + 1)
        cache: dict[tuple[int, float, int], tuple[np.ndarray, ...]] = {}
        self.last_end: list[np.ndarray] = []
        self.below_end: list[np.ndarray] = []
        self.first_start: list[np.ndarray] = []
        self.first_below: list[np.ndarray] = []
        for k in range(problem.num_stages):
            memory = problem.mem_limit[k] if problem.mem_limit is not None else None
            key = (id(problem.prefixes[k]), float(problem.extra[k]), id(memory))
            if key not in cache:
                by_time = _limit(problem, k, bottleneck, time_only=True)
                last = by_time if memory is None else np.minimum(by_time, memory)
                strict = _limit(problem, k, below, time_only=True)
                cache[key] = (
                    last,
                    strict,
                    np.searchsorted(last, positions, side="left"),
                    np.searchsorted(strict, positions, side="left"),
                )
            last, strict, first, first_below = cache[key]
            # room for the later stages: stage k ends at most at L - (S - 1 - k)
            room = num_layers - (problem.num_stages - 1 - k)
            self.last_end.append(np.minimum(last, room))
            self.below_end.append(strict)
            self.first_start.append(np.where(positions <= room, first, num_layers + 1))
            self.first_below.append(first_below)


    def reaching(self) -> list[np.ndarray]:
        """``reaching[k][p]``: stages ``0..k-1`` can cover ``[0, p)`` within the bottleneck."""
        num_layers = len(self.last_end[0]) - 1
        positions = np.arange(num_layers + 1)
        node = np.zeros(num_layers + 1, dtype=bool)
        node[0] = True
        out = [node]
        for first in self.first_start:
            reach = np.concatenate([[0], np.cumsum(node)])
            low = np.minimum(first, positions)
            node = reach[positions] - reach[low] > 0
            out.append(node)
        return out

    def pair_count(self) -> int:
        """How many (stage, start, end) pairs lie between positions on some optimal partition."""
        reaching, finishing = self.reaching(), self.finishing()
        total = 0
        for k, first in enumerate(self.first_start):
            ends = np.flatnonzero(reaching[k + 1] & finishing[k + 1])
            valid = np.concatenate([[0], np.cumsum(reaching[k] & finishing[k])])
            low = np.minimum(first[ends], ends)
            total += int((valid[ends] - valid[low]).sum())
        return total

    def finishing(self) -> list[np.ndarray]:
        """``finishing[k][p]``: stages ``k..S-1`` can cover ``[p, L)`` within the bottleneck."""
        num_stages = len(self.last_end)
        num_layers = len(self.last_end[0]) - 1
        positions = np.arange(num_layers + 1)
        node = np.zeros(num_layers + 1, dtype=bool)
        node[num_layers] = True
        out = [node]
        for k in range(num_stages - 1, -1, -1):
            reach = np.concatenate([[0], np.cumsum(node)])
            last = np.maximum(self.last_end[k], positions)
            node = reach[last + 1] - reach[positions + 1] > 0
            out.append(node)
        out.reverse()
        return out


# ------------------------------------------------------------------- variance
def variance_bounds(problem: Any, windows: StageWindows) -> list[int]:
    """Bounds of an optimal partition with the smallest sum of squared stage times."""
    num_layers, num_stages = problem.num_layers, problem.num_stages
    finishes = windows.finishing()
    cost = np.full(num_layers + 1, math.inf)
    cost[0] = 0.0
    pointers: list[np.ndarray] = []
    for k in range(num_stages):
        cost, pointer = _variance_stage(problem, windows, k, cost, finishes[k + 1])
        pointers.append(pointer)
    return _walk_back(pointers, num_layers)


def _variance_stage(
    problem: Any, windows: StageWindows, k: int, cost: np.ndarray, finishes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One stage of the min Σv² program by level-synchronous divide and conquer."""
    num_layers = problem.num_layers
    prefix, extra = problem.prefixes[k], float(problem.extra[k])
    first = windows.first_start[k]
    finite = np.concatenate([[0], np.cumsum(np.isfinite(cost))])
    ends = np.arange(1, num_layers + 1)
    lows = first[1:]
    has = (lows < ends) & (finite[ends] - finite[np.minimum(lows, ends)] > 0) & finishes[1:]
    columns = ends[has]
    new_cost = np.full(num_layers + 1, math.inf)
    pointer = np.full(num_layers + 1, -1)
    if len(columns) == 0:
        return new_cost, pointer
    def best_starts(column: np.ndarray, low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Smallest cost and the latest start achieving it, per column, starts in ``[low, high]``."""
        a = np.maximum(low, first[column])
        b = np.minimum(high, column - 1)
        counts = b - a + 1
        offsets = np.cumsum(counts) - counts
        segment = np.repeat(np.arange(len(column)), counts)
        starts = np.repeat(a - offsets, counts) + np.arange(int(counts.sum()))
        value = (prefix[column[segment]] - prefix[starts]) + extra
        total = cost[starts] + value * value
        best = np.minimum.reduceat(total, offsets)
        latest = np.maximum.reduceat(np.where(total == best[segment], starts, -1), offsets)
        return best, latest

    # segments of columns [left, right] (indices into ``columns``) whose best start lies in [low, high]
    left = np.array([0])
    right = np.array([len(columns) - 1])
    low = np.array([0])
    high = np.array([num_layers])
    while len(left):
        widths = high - low + 1
        spans = right - left + 1
        levels_left = math.log2(int(spans.max()) + 1)
        if int((spans * widths).sum()) <= 2.0 * levels_left * int(widths.sum() + len(widths)):
            # the rest at once: every column of every segment over the segment's range
            owner = np.repeat(np.arange(len(left)), spans)
            index = np.repeat(left - (np.cumsum(spans) - spans), spans) + np.arange(int(spans.sum()))
            best, where = best_starts(columns[index], low[owner], high[owner])
            new_cost[columns[index]] = best
            pointer[columns[index]] = where
            break
        middle = (left + right) // 2
        column = columns[middle]
        best, where = best_starts(column, low, high)
        new_cost[column] = best
        pointer[column] = where
        go_left = middle > left
        go_right = middle < right
        left, right, low, high = (
            np.concatenate([left[go_left], middle[go_right] + 1]),
            np.concatenate([middle[go_left] - 1, right[go_right]]),
            np.concatenate([low[go_left], where[go_right]]),
            np.concatenate([where[go_left], high[go_right]]),
        )
    return new_cost, pointer


def _walk_back(pointers: list[np.ndarray], num_layers: int) -> list[int]:
    bounds = [num_layers]
    for k in range(len(pointers) - 1, 0, -1):
        bounds.append(int(pointers[k][bounds[-1]]))
    bounds.append(0)
    bounds.reverse()
    return bounds


class _Cap:
    """Per stage, the starts/ends whose time is ``<= value`` (time only)."""

    def __init__(self, problem: Any, value: float) -> None:
        self.value = value
        positions = np.arange(problem.num_layers + 1)
        cache: dict[tuple[int, float], tuple[np.ndarray, np.ndarray]] = {}
        self.last_end: list[np.ndarray] = []
        self.first_start: list[np.ndarray] = []
        for k in range(problem.num_stages):
            key = (id(problem.prefixes[k]), float(problem.extra[k]))
            if key not in cache:
                last = _limit(problem, k, value, time_only=True)
                cache[key] = (last, np.searchsorted(last, positions, side="left"))
            self.last_end.append(cache[key][0])
            self.first_start.append(cache[key][1])


# ---------------------------------------------------------- range minimum
class _RangeMin:
    """Sparse table over an array: minimum of ``values[a..b]`` for many ``(a, b)`` at once."""

    def __init__(self, values: np.ndarray) -> None:
        size = len(values)
        depth = max(1, size.bit_length())
        table = np.full((depth, size), math.inf)
        table[0] = values
        for j in range(1, depth):
            width = 1 << (j - 1)
            np.minimum(table[j - 1, : size - width], table[j - 1, width:], out=table[j, : size - width])
        self.size = size
        self.flat = table.ravel()
        self.floor_log2 = np.zeros(size + 1, dtype=np.int64)
        self.floor_log2[1:] = np.log2(np.arange(1, size + 1)).astype(np.int64)

    def query(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``min(values[a..b])`` per pair; ``inf`` where ``a > b``."""
        empty = a > b
        a = np.where(empty, 0, a)
        b = np.where(empty, 0, b)
        level = self.floor_log2[b - a + 1]
        row = level * self.size
        out = np.minimum(self.flat[row + a], self.flat[row + b - (1 << level) + 1])
        out[empty] = math.inf
        return out


def _count_forward(problem: Any, windows: StageWindows, cap: _Cap | None = None) -> list[np.ndarray]:
    """``count[k][p]``: fewest stages at the bottleneck among stages ``0..k-1`` covering ``[0, p)``.

    With ``cap``, stages below the bottleneck must also be ``<= cap.value``.
    """
    num_layers = problem.num_layers
    count = np.full(num_layers + 1, math.inf)
    count[0] = 0.0
    out = [count]
    ends = np.arange(num_layers + 1)
    for k in range(problem.num_stages):
        table = _RangeMin(count)
        first, below = windows.first_start[k], windows.first_below[k]
        split = np.minimum(np.maximum(below, first), ends)
        at = table.query(first, split - 1) + 1.0
        lowest = split if cap is None else np.maximum(split, cap.first_start[k])
        under = table.query(lowest, ends - 1)
        count = np.minimum(at, under)
        out.append(count)
    return out


def _count_backward(problem: Any, windows: StageWindows, cap: _Cap | None = None) -> list[np.ndarray]:
    """``count[k][p]``: fewest stages at the bottleneck among stages ``k..S-1`` covering ``[p, L)``."""
    num_layers, num_stages = problem.num_layers, problem.num_stages
    count = np.full(num_layers + 1, math.inf)
    count[num_layers] = 0.0
    out = [count]
    starts = np.arange(num_layers + 1)
    for k in range(num_stages - 1, -1, -1):
        table = _RangeMin(count)
        last, strict = windows.last_end[k], windows.below_end[k]
        split = np.minimum(np.maximum(strict, starts), last)
        highest = split if cap is None else np.minimum(split, cap.last_end[k])
        under = table.query(starts + 1, highest)
        at = table.query(split + 1, last) + 1.0
        count = np.minimum(at, under)
        out.append(count)
    out.reverse()
    return out


# ------------------------------------------------------------ lexicographic
class Listing:
    """The (start, end, value) pairs of each stage still on a candidate partition."""

    def __init__(self, starts: list[np.ndarray], ends: list[np.ndarray], values: list[np.ndarray],
                 fixed: list[np.ndarray]) -> None:
        self.starts, self.ends, self.values, self.fixed = starts, ends, values, fixed

    @property
    def size(self) -> int:
        return sum(len(s) for s in self.starts)

    def keep(self, masks: list[np.ndarray]) -> None:
        for k, mask in enumerate(masks):
            self.starts[k] = self.starts[k][mask]
            self.ends[k] = self.ends[k][mask]
            self.values[k] = self.values[k][mask]
            self.fixed[k] = self.fixed[k][mask]


def lexicographic_bounds(problem: Any, windows: StageWindows, witness: list[int]) -> list[int] | None:
    """Bounds of the optimal partition with lexicographically smallest sorted stage times.

    Returns ``None`` when the pairs to list would exceed :data:`LISTING_LIMIT`
    (the caller then runs the pair-by-pair program).
    """
    num_layers, num_stages = problem.num_layers, problem.num_stages
    bottleneck = windows.bottleneck
    counts = _count_forward(problem, windows)
    fewest = float(counts[num_stages][num_layers])
    if fewest == num_stages:
        return list(witness)  # every optimal partition has all stages at the bottleneck
    # A partition with the fewest stages at the bottleneck whose other stages are
    # as fast as possible between those: its slowest other stage bounds the optimum's.
    balanced = _rebalanced_between_top_stages(problem, windows, counts)
    values = problem.values(balanced)
    at_top = sum(1 for v in values if v == bottleneck)
    cap = None
    if at_top == fewest:
        highest_other = max(v for v in values if v != bottleneck)
        if highest_other <= 0.0:
            return balanced  # the other stages cannot go below zero
        cap = _Cap(problem, highest_other)
    forward = _count_forward(problem, windows, cap)
    backward = _count_backward(problem, windows, cap)
    listing = _list_pairs(problem, windows, forward, backward, fewest, cap)
    if listing is None:
        return None
    while listing.size > LEVEL_PAIR_BUDGET:
        if not _peel_level(listing, num_layers):
            break
    return sorted_tuple_program(listing, num_layers)


def _rebalanced_between_top_stages(problem: Any, windows: StageWindows, counts: list[np.ndarray]) -> list[int]:
    """One partition with the fewest bottleneck stages, the runs between them re-solved min-max.

    The runs' optima stay below the bottleneck (the traced partition has no
    bottleneck stage there), so the result keeps the fewest bottleneck stages.
    """
    num_layers, num_stages = problem.num_layers, problem.num_stages
    bounds = [num_layers]
    at_top = []
    for k in range(num_stages - 1, -1, -1):
        end = bounds[-1]
        starts = np.arange(windows.first_start[k][end], end)
        top = starts < windows.first_below[k][end]
        ok = np.flatnonzero(counts[k][starts] + top == counts[k + 1][end])
        # of the starts that keep the fewest bottleneck stages, the one whose stage
        # time is nearest an even share of what is left (so a floating bottleneck
        # stage lands where both sides keep enough stages)
        prefix = problem.prefixes[k]
        share = (prefix[end] - prefix[0]) / (k + 1)
        gap = np.abs((prefix[end] - prefix[starts[ok]]) + problem.extra[k] - share)
        pick = int(ok[np.argmin(gap)])
        bounds.append(int(starts[pick]))
        at_top.append(bool(top[pick]))
    bounds.reverse()
    at_top.reverse()
    out = list(bounds)
    k = 0
    while k < num_stages:
        if at_top[k]:
            k += 1
            continue
        last = k
        while last + 1 < num_stages and not at_top[last + 1]:
            last += 1
        low, high = bounds[k], bounds[last + 1]
        sliced: dict[int, np.ndarray] = {}
        prefixes = [sliced.setdefault(id(problem.prefixes[j]), problem.prefixes[j][low : high + 1])
                    for j in range(k, last + 1)]
        limits = None
        if problem.mem_limit is not None:
            limits = [np.minimum(problem.mem_limit[j][low : high + 1], high) - low for j in range(k, last + 1)]
        run = MinMaxProblem(prefixes, problem.extra[k : last + 1], limits)
        solved = run.min_bottleneck()
        assert solved is not None  # the traced partition fits
        out[k : last + 2] = [low + b for b in solved[1]]
        k = last + 1
    return out


def _list_pairs(problem: Any, windows: StageWindows, forward: list[np.ndarray], backward: list[np.ndarray],
                fewest: float, cap: _Cap | None) -> Listing | None:
    """Pairs at the bottleneck or ``<= cap`` on a partition with ``fewest`` bottleneck stages."""
    num_stages = problem.num_stages
    on_path = [np.flatnonzero(forward[k] + backward[k] == fewest) for k in range(num_stages + 1)]
    capped = windows.first_below if cap is None else cap.first_start
    plans = []
    total = 0
    for k in range(num_stages):
        ends = on_path[k + 1]
        ends = ends[ends > 0]
        first = windows.first_start[k][ends]
        split = np.minimum(np.maximum(windows.first_below[k][ends], first), ends)
        free = np.maximum(np.maximum(capped[k][ends], split), first)
        top_count = split - first
        free_count = np.maximum(ends - free, 0)
        total += int(top_count.sum() + free_count.sum())
        if total > LISTING_LIMIT:
            return None
        plans.append((ends, first, top_count, free, free_count))
    starts_out, ends_out, values_out, fixed_out = [], [], [], []
    for k, (ends, first, top_count, free, free_count) in enumerate(plans):
        block_start = np.stack([first, free], axis=1).ravel()
        block_count = np.stack([top_count, free_count], axis=1).ravel()
        block_top = np.tile([True, False], len(ends))
        n = int(block_count.sum())
        offsets = np.cumsum(block_count) - block_count
        starts = np.repeat(block_start, block_count) + (np.arange(n) - np.repeat(offsets, block_count))
        e = np.repeat(np.repeat(ends, 2), block_count)
        top = np.repeat(block_top, block_count)
        tight = forward[k][starts] + top + backward[k + 1][e] == fewest
        starts, e, top = starts[tight], e[tight], top[tight]
        value = (problem.prefixes[k][e] - problem.prefixes[k][starts]) + problem.extra[k]
        starts_out.append(starts)
        ends_out.append(e)
        values_out.append(value)
        fixed_out.append(top)
    return Listing(starts_out, ends_out, values_out, fixed_out)


def _relax(listing: Listing, edge_values: list[np.ndarray], num_layers: int, *, reverse: bool,
           bottleneck: bool) -> list[np.ndarray]:
    """Best value per node over paths from the start (or, ``reverse``, to the end).

    ``bottleneck`` takes the largest edge value along a path (else the sum); the
    best is the smallest.
    """
    num_stages = len(listing.starts)
    node = np.full(num_layers + 1, math.inf)
    node[num_layers if reverse else 0] = -math.inf if bottleneck else 0.0
    out = [node]
    order = range(num_stages - 1, -1, -1) if reverse else range(num_stages)
    for k in order:
        source, target = (listing.ends[k], listing.starts[k]) if reverse else (listing.starts[k], listing.ends[k])
        candidate = np.maximum(node[source], edge_values[k]) if bottleneck else node[source] + edge_values[k]
        node = np.full(num_layers + 1, math.inf)
        np.minimum.at(node, target, candidate)
        out.append(node)
    if reverse:
        out.reverse()
    return out


def _peel_level(listing: Listing, num_layers: int) -> bool:
    """Fix the next value of the sorted optimum and its count; ``False`` if nothing is left free."""
    num_stages = len(listing.starts)
    free = [np.where(listing.fixed[k], -math.inf, listing.values[k]) for k in range(num_stages)]
    forward = _relax(listing, free, num_layers, reverse=False, bottleneck=True)
    level = float(forward[num_stages][num_layers])
    if level == -math.inf:
        return False
    backward = _relax(listing, free, num_layers, reverse=True, bottleneck=True)
    listing.keep([
        np.maximum(np.maximum(forward[k][listing.starts[k]], free[k]), backward[k + 1][listing.ends[k]]) <= level
        for k in range(num_stages)
    ])
    counted = [(~listing.fixed[k] & (listing.values[k] == level)).astype(float) for k in range(num_stages)]
    ahead = _relax(listing, counted, num_layers, reverse=False, bottleneck=False)
    behind = _relax(listing, counted, num_layers, reverse=True, bottleneck=False)
    fewest = ahead[num_stages][num_layers]
    masks = [
        ahead[k][listing.starts[k]] + counted[k] + behind[k + 1][listing.ends[k]] == fewest
        for k in range(num_stages)
    ]
    for k in range(num_stages):
        listing.fixed[k] = listing.fixed[k] | (counted[k] > 0)
    listing.keep(masks)
    return True


def sorted_tuple_program(listing: Listing, num_layers: int) -> list[int]:
    """Exact lexicographic program over the listed pairs (negated sorted tuples; larger is better)."""
    best: dict[int, tuple[tuple[float, ...], int]] = {0: ((), -1)}
    pointers: list[dict[int, int]] = []
    for k in range(len(listing.starts)):
        current: dict[int, tuple[tuple[float, ...], int]] = {}
        for s, e, v in zip(listing.starts[k].tolist(), listing.ends[k].tolist(), listing.values[k].tolist()):
            entry = best.get(s)
            if entry is None:
                continue
            vector = entry[0]
            key = -v
            at = bisect.bisect_right(vector, key)
            merged = vector[:at] + (key,) + vector[at:]
            old = current.get(e)
            if old is None or merged > old[0] or (merged == old[0] and s > old[1]):
                current[e] = (merged, s)
        pointers.append({e: value[1] for e, value in current.items()})
        best = current
    bounds = [num_layers]
    for k in range(len(pointers) - 1, 0, -1):
        bounds.append(pointers[k][bounds[-1]])
    bounds.append(0)
    bounds.reverse()
    return bounds
