"""The min-max instance the partitioner solves: stage values from prefix sums, and its feasibility test.

    >>> import numpy as np
    >>> from pipeplan.partition.problem import MinMaxProblem
    >>> prefix = np.cumsum([0.0, 4, 1, 1, 1, 1, 4])               # cumulative layer times, 0 first
    >>> MinMaxProblem([prefix] * 3, extra=np.zeros(3)).min_bottleneck()   # (optimal slowest stage, its bounds)
    (4.0, [0, 1, 5, 6])

Stage ``k`` on layers ``[s, e)`` costs ``prefixes[k][e] - prefixes[k][s] + extra[k]``;
``limits`` (optional) cap each stage's last end per start (memory). Shared by the
solver (:mod:`.solver`), the exact tie-breaks (:mod:`.ties`) and the per-rank
memory search (:mod:`.memory`).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

import numpy as np

__all__ = ["MinMaxProblem", "monotone_limit"]


def monotone_limit(
    prefix: np.ndarray, starts: np.ndarray, extra: float, threshold: float, last: int
) -> np.ndarray:
    """Largest ``e`` in ``[s, last]`` with ``(prefix[e] - prefix[s]) + extra <= threshold``.

    Returns ``s`` itself where not even one layer fits. The comparison is exactly
    the one used for stage values, so a search result off by rounding is corrected.
    """
    base = prefix[starts]
    ends = np.searchsorted(prefix, base + (threshold - extra), side="right") - 1
    ends = np.minimum(np.maximum(ends, starts), last)  # np.clip(ends, starts, last), without its wrapper
    while True:
        over = (ends > starts) & ((prefix[ends] - base) + extra > threshold)
        if not over.any():
            break
        ends[over] -= 1
    while True:
        nxt = np.minimum(ends + 1, last)
        under = (nxt > ends) & ((prefix[nxt] - base) + extra <= threshold)
        if not under.any():
            break
        ends[under] += 1
    return ends


def _limit_one(prefix: list[float], start: int, extra: float, threshold: float, last: int) -> int:
    """:func:`monotone_limit` for one start, in plain floats (the same comparisons; no array overhead)."""
    base = prefix[start]
    end = min(max(bisect_right(prefix, base + (threshold - extra)) - 1, start), last)
    while end > start and (prefix[end] - base) + extra > threshold:
        end -= 1
    while end < last and (prefix[end + 1] - base) + extra <= threshold:
        end += 1
    return end


class MinMaxProblem:
    """A min-max instance: per-stage prefix sums and extras, and optional memory limits.

    Stage ``k`` on layers ``[s, e)`` has value ``(prefix[k][e] - prefix[k][s]) +
    extra[k]``; ``mem_limit[k][s]`` is the last end ``e`` whose memory fits.
    """

    def __init__(
        self,
        prefixes: Sequence[np.ndarray],
        extra: np.ndarray,
        mem_limit: Sequence[np.ndarray] | None = None,
    ) -> None:
        self.prefixes = list(prefixes)
        self._prefix_lists = [p.tolist() for p in self.prefixes]  # for one start at a time
        self.extra = np.asarray(extra, dtype=float)
        self.num_layers = len(self.prefixes[0]) - 1
        self.num_stages = len(self.extra)
        self.mem_limit = mem_limit
        singles: dict[int, np.ndarray] = {}
        for prefix in self.prefixes:
            if id(prefix) not in singles:
                singles[id(prefix)] = np.diff(prefix)
        self.singles = [singles[id(p)] for p in self.prefixes]
        # plain-float copies for the one-start-at-a-time fast path (the same doubles, no array overhead)
        single_lists: dict[int, list[float]] = {}
        self._single_lists = [single_lists.setdefault(id(p), singles[id(p)].tolist()) for p in self.prefixes]
        self._extra_list: list[float] = self.extra.tolist()
        self._limit_lists: dict[int, tuple[list[int], list[int]]] = {}
        self._limit_arrays: dict[int, tuple[list[int], list[int]]] = {}

    @property
    def prefix(self) -> np.ndarray:
        return self.prefixes[0]

    def stage_value(self, k: int, s: int, e: int) -> float:
        prefix = self.prefixes[k]
        return float((prefix[e] - prefix[s]) + self.extra[k])

    def values(self, bounds: Sequence[int]) -> list[float]:
        return [self.stage_value(k, bounds[k], bounds[k + 1]) for k in range(self.num_stages)]

    # ------------------------------------------------------------ feasibility
    def check(self, threshold: float) -> tuple[bool, list[int] | None, float]:
        """Is there a partition with every stage <= ``threshold`` (and fitting memory)?

        Returns ``(feasible, bounds, next_value)``: a witness when feasible, and
        otherwise the smallest threshold above this one at which the answer
        can change (a valid lower bound on the optimum).
        """
        result = self._check_intervals(threshold)
        if result is None:
            result = self._check_bitmap(threshold)
        return result

    def _ends(self, k: int, starts: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """End limit per start for stage k, and whether time (not memory/room) binds."""
        hi_end = self.num_layers - (self.num_stages - 1 - k)
        if len(starts) == 1:
            by_time = np.array([_limit_one(self._prefix_lists[k], int(starts[0]), float(self.extra[k]), threshold,
                                           self.num_layers)])
        else:
            by_time = monotone_limit(self.prefixes[k], starts, self.extra[k], threshold, self.num_layers)
        other = np.full(len(starts), hi_end)
        if self.mem_limit is not None:
            other = np.minimum(other, self.mem_limit[k][starts])
        return np.minimum(by_time, other), by_time < other

    def _limits_of(self, k: int) -> tuple[list[int], list[int]]:
        """Stage ``k``'s memory limits as a list, and the starts where not even one layer fits (cached)."""
        found = self._limit_lists.get(k)
        if found is None:
            assert self.mem_limit is not None
            array = self.mem_limit[k]
            shared = self._limit_arrays.get(id(array))  # stages sharing one array (held in mem_limit) share its lists
            if shared is None:
                limits = np.asarray(array)
                too_full = np.flatnonzero(limits < np.arange(1, len(limits) + 1))
                shared = self._limit_arrays[id(array)] = (limits.tolist(), too_full.tolist())
            found = self._limit_lists[k] = shared
        return found

    def _check_intervals(self, threshold: float) -> tuple[bool, list[int] | None, float] | None:
        """Fast path: every single layer in the reachable range fits; ranges stay intervals.

        In plain floats and ints, one start per stage: the same comparisons and
        stage values as :meth:`_ends` and :meth:`stage_value`.
        """
        num_stages, num_layers = self.num_stages, self.num_layers
        upper = [0]  # upper[k]: farthest reachable start of stage k
        next_value = math.inf
        for k in range(num_stages):
            low, high = k, upper[-1]
            extra = self._extra_list[k]
            if max(self._single_lists[k][low : high + 1]) + extra > threshold:
                return None
            limits = None
            if self.mem_limit is not None:
                limits, too_full = self._limits_of(k)
                at = bisect_left(too_full, low)
                if at < len(too_full) and too_full[at] <= high:  # a start in range where not one layer fits
                    return None
            prefix = self._prefix_lists[k]
            by_time = _limit_one(prefix, high, extra, threshold, num_layers)
            other = num_layers - (num_stages - 1 - k)
            if limits is not None:
                other = min(other, limits[high])
            end = min(by_time, other)
            if by_time < other and end < num_layers:
                next_value = min(next_value, (prefix[end + 1] - prefix[high]) + extra)
            upper.append(end)
        if upper[-1] < num_layers:
            return False, None, next_value
        bounds = [num_layers]
        for k in range(num_stages - 1, 0, -1):
            bounds.append(min(bounds[-1] - 1, upper[k]))
        bounds.append(0)
        bounds.reverse()
        return True, bounds, next_value

    def _check_bitmap(self, threshold: float) -> tuple[bool, list[int] | None, float]:
        """The general check: the reachable starts of each stage as a set (any start may fail to fit a layer).

        In plain floats and ints, start by start: the same comparisons as
        :meth:`_ends` (:func:`_limit_one` is :func:`monotone_limit` for one start)
        and the same stage values, so the same answer as the array form.
        """
        num_stages, num_layers = self.num_stages, self.num_layers
        reach = [0]
        steps: list[tuple[list[int], list[int]]] = []
        next_value = math.inf
        for k in range(num_stages):
            prefix, extra = self._prefix_lists[k], self._extra_list[k]
            room = num_layers - (num_stages - 1 - k)
            limits = None if self.mem_limit is None else self._limits_of(k)[0]
            kept_starts: list[int] = []
            kept_ends: list[int] = []
            delta = [0] * (num_layers + 2)
            for s in reach:
                by_time = _limit_one(prefix, s, extra, threshold, num_layers)
                other = room if limits is None else min(room, limits[s])
                end = by_time if by_time < other else other
                if by_time < other and end < num_layers:
                    value = (prefix[end + 1] - prefix[s]) + extra
                    if value < next_value:
                        next_value = value
                if end > s:
                    kept_starts.append(s)
                    kept_ends.append(end)
                    delta[s + 1] += 1
                    delta[end + 1] -= 1
            steps.append((kept_starts, kept_ends))
            reach = []
            running = 0
            for position in range(num_layers + 1):
                running += delta[position]
                if running > 0:
                    reach.append(position)
        if not reach or reach[-1] != num_layers:
            return False, None, next_value
        bounds = [num_layers]
        for k in range(num_stages - 1, 0, -1):
            kept_starts, kept_ends = steps[k]
            end = bounds[-1]
            for index in range(len(kept_starts) - 1, -1, -1):
                if kept_starts[index] + 1 <= end <= kept_ends[index]:
                    bounds.append(kept_starts[index])
                    break
        bounds.append(0)
        bounds.reverse()
        return True, bounds, next_value

    # ------------------------------------------------------------------ solve
    def lower_bound(self) -> float:
        """A value at most the optimum (nudged down so rounding cannot lift it above)."""
        if all(p is self.prefixes[0] for p in self.prefixes):
            total = float(self.prefix[-1] - self.prefix[0] + self.extra.sum())
            bound = max(
                total / self.num_stages,
                float(self.singles[0].max() + self.extra.min()),
                float(self.extra.max()),
            )
        else:
            bound = float(self.extra.max())
        return bound - abs(bound) * 1e-9

    def min_bottleneck(self) -> tuple[float, list[int]] | None:
        """The optimal bottleneck and a witness, or ``None`` if memory rules out every partition."""
        feasible, bounds, _ = self.check(math.inf)
        if not feasible:
            return None
        assert bounds is not None
        hi = max(self.values(bounds))
        best = bounds
        lo = self.lower_bound()
        if all(p is self.prefixes[0] for p in self.prefixes):
            # mean + heaviest layer + largest extra: greedy fits under it without memory limits
            guess = lo + float(self.singles[0].max() + self.extra.max())
            if guess < hi:
                feasible, bounds, next_value = self.check(guess)
                if feasible:
                    assert bounds is not None
                    hi, best = max(self.values(bounds)), bounds
                else:
                    lo = max(lo, next_value)
        # Alternate a probe at the lower bound (often the optimum itself once the
        # bound has jumped to a candidate) with a bisection probe (halves the gap).
        probe_low = True
        while lo < hi:
            middle = lo + (hi - lo) / 2.0
            threshold = lo if probe_low or not lo < middle < hi else middle
            feasible, bounds, next_value = self.check(threshold)
            if feasible:
                assert bounds is not None
                value = max(self.values(bounds))
                if value < hi:
                    hi, best = value, bounds
                if threshold == lo:
                    break
            else:
                lo = max(lo, next_value)
            probe_low = not probe_low
        return hi, best

    # ------------------------------------------------------------ tie-breaks
    def optimal_pairs(self, bottleneck: float) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """For each stage, the allowed ``(start, lowest end, highest end)`` on optimal partitions."""
        num_stages, num_layers = self.num_stages, self.num_layers
        forward = [np.zeros(num_layers + 1, dtype=bool) for _ in range(num_stages + 1)]
        forward[0][0] = True
        limits = []
        for k in range(num_stages):
            starts = np.flatnonzero(forward[k])
            ends, _ = self._ends(k, starts, bottleneck)
            ok = ends > starts
            starts, ends = starts[ok], ends[ok]
            limits.append((starts, ends))
            delta = np.bincount(starts + 1, minlength=num_layers + 2) - np.bincount(
                ends + 1, minlength=num_layers + 2
            )
            forward[k + 1] = np.cumsum(delta)[: num_layers + 1] > 0
        backward = np.zeros(num_layers + 1, dtype=bool)
        backward[num_layers] = True
        pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [None] * num_stages  # type: ignore[list-item]
        for k in range(num_stages - 1, -1, -1):
            starts, ends = limits[k]
            good = backward & forward[k + 1]
            count = np.concatenate([[0], np.cumsum(good)])
            has = count[ends + 1] - count[starts + 1] > 0
            starts, ends = starts[has], ends[has]
            # lowest useful end: the first good position after the start
            good_positions = np.flatnonzero(good)
            first = good_positions[np.searchsorted(good_positions, starts + 1)]
            pairs[k] = (starts, first, ends)
            backward = np.zeros(num_layers + 1, dtype=bool)
            backward[starts] = True
        return pairs
