"""Exact, memory-aware partitioning of contiguous layers into pipeline stages.

The solver splits ``L`` layers into ``S`` non-empty contiguous stages so that the
slowest stage (its F + B + W time plus any fixed extra) is as fast as possible,
while every stage fits a memory capacity::

    from pipeplan.partition import partition_layers
    partition_layers([2.0] * 32, 4, first_extra=16, last_extra=8).layers_per_stage   # (3, 11, 11, 7)
    partition_layers(profile, 8, memory_capacity=80e9, num_microbatches=16).stage_memory

How it works:

1. **Bottleneck.** For a threshold ``T`` the set of layer positions where stage
   ``k`` can end is computed stage by stage over prefix sums (an interval in the
   usual case, a bitmap when a single layer does not fit some stage). Its
   answer only changes when ``T`` crosses the time of one more layer on a
   reachable stage, so the search jumps between such candidate sums, halving
   the gap when it can; it stops when the lower bound meets an achieved
   bottleneck. ``L = 10,000``, ``S = 128`` takes about 0.05 s.
2. **Tie-break.** Among partitions whose slowest stage equals the optimum (and
   that fit memory), ``tie_break="lexicographic"`` picks the one whose stage
   times, sorted from slowest to fastest, are lexicographically smallest: it
   lowers the second-slowest stage, then the third, and so on. ``"variance"``
   picks the smallest sum of squared stage times (lesson 16's smallest spread),
   ``"none"`` any optimal partition. Both are exact. With few tied (start, end)
   pairs (up to ``_PAIR_BUDGET``) a dynamic program walks every pair; with more
   (one dominant layer leaves the other stages loose: ~10⁸ pairs for 10,000
   layers into 128 stages) :mod:`pipeplan.partition_ties` works on per-stage
   windows instead (monotone divide and conquer for the variance, level-by-level
   peeling for the lexicographic order), under a second for ``L = 10,000``,
   ``S = 128`` on every case of ``benchmarks/partition_speed.py``.
3. **Memory.** Stage ``k`` holds ``bytes_per_param × params`` (parameters,
   gradients and optimizer state; 16 bytes per parameter for mixed-precision
   Adam) plus ``inflight[k] × activation_bytes`` plus its fixed extra bytes.
   ``inflight[k]`` is the peak number of microbatches whose activations stage
   ``k`` holds under the chosen schedule; it is read off the schedule's per-rank
   orders (1F1B: ``min(m, P − k)``, GPipe: ``m``). ``memory_capacity`` is per
   **rank** (GPU): a rank holds the sum of its stages' memory (zb-v and
   interleaved put two stages on each rank). With one stage per rank the solve
   is exact. With several, the per-stage solve is a relaxation: when its answer
   fits per rank it is exact; otherwise, up to ``_EXHAUSTIVE_LIMIT`` partitions
   are listed and the exact optimum taken, and beyond that a search over splits
   of each rank's capacity among its stages (each split is solved exactly)
   returns a plan that fits, with ``proven_optimal=False`` unless it meets the
   relaxation's bound. When no partition fits,
   :class:`~pipeplan.errors.InfeasiblePlanError` names the smallest capacity
   that fits (per stage; per rank when ranks share, "found to fit" when it came
   from the search) and the stage or rank that needs it.
4. **Schedule-aware.** ``objective="step_time"`` starts from the bottleneck
   optimum and moves one boundary at a time by one layer while the simulated
   step time of the schedule improves (first improvement, memory respected). That
   local search is a heuristic: it never returns a slower simulated step than
   the bottleneck optimum, but it is not proven optimal for the step time.
"""

from __future__ import annotations

import functools

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ._validation import finite_floats, non_negative_float, positive_int
from .errors import InfeasiblePlanError, InvalidInputError
from .layers import LayerProfile
from .partition_ties import Listing, StageWindows, lexicographic_bounds, sorted_tuple_program, variance_bounds

__all__ = ["PartitionResult", "partition_layers", "inflight_per_stage", "even_split", "rank_totals", "TieBreak",
           "Objective"]

TieBreak = Literal["lexicographic", "variance", "none"]
Objective = Literal["bottleneck", "step_time"]

# Up to this many (start, end) pairs on optimal partitions the tie-breaks walk
# every pair (the lexicographic one with Python tuples, about 1 µs a pair); above
# it they use the windowed algorithms of :mod:`pipeplan.partition_ties`, whose work
# does not grow with the number of tied partitions.
_PAIR_BUDGET = 100_000
# Splits of the rank capacities the per-rank memory search starts from.
_SHARE_STARTS = 6
# With several stages per rank and at most this many partitions, the per-rank
# memory problem is solved exactly by listing them all (numpy).
_EXHAUSTIVE_LIMIT = 200_000


@dataclass(frozen=True)
class PartitionResult:
    """A partition of layers into stages and what it costs.

    Attributes:
        layers_per_stage: number of layers on each stage (all >= 1).
        stage_times: F + B + W time per microbatch of each stage, extras included.
        stage_memory: bytes each stage holds at its peak (see the module doc).
        placement: ``placement[s]`` is the rank holding stage ``s`` (the chosen
            schedule's placement; one stage per rank unless it has chunks).
        bottleneck: the slowest stage time (the proxy objective).
        step_time: simulated makespan of one step under ``schedule`` with
            ``num_microbatches`` (``None`` when no microbatch count was given).
        schedule: the schedule name the memory and step time refer to.
        num_microbatches: microbatches per step used for in-flight counts.
        inflight: peak in-flight microbatches per stage used for memory.
        objective: what was minimised, ``"bottleneck"`` or ``"step_time"``.
        tie_break: how ties on the bottleneck were broken (the one applied).
        profile: the layer profile the plan was made from (``None`` for a plain
            list of costs without a step time); exports read its layer names.
        proven_optimal: ``False`` only when several stages share a rank, a memory
            capacity binds per rank, and the best split of the rank capacities that
            was found has a larger bottleneck than the per-stage relaxation (the
            module doc, *Memory*). The plan always fits per rank.
    """

    @property
    def num_ranks(self) -> int:
        """Number of ranks (GPUs) the stages are placed on."""
        return max(self.placement) + 1 if self.placement else self.num_stages

    @property
    def rank_memory(self) -> tuple[float, ...]:
        """Bytes each rank holds: the sum of its stages' :attr:`stage_memory`."""
        if not self.stage_memory:
            return ()
        placement = self.placement or tuple(range(self.num_stages))
        return tuple(rank_totals(self.stage_memory, placement))

    layers_per_stage: tuple[int, ...]
    stage_times: tuple[float, ...]
    stage_memory: tuple[float, ...] = ()
    placement: tuple[int, ...] = ()
    bottleneck: float = 0.0
    step_time: float | None = None
    schedule: str = "1f1b"
    num_microbatches: int = 1
    inflight: tuple[int, ...] = ()
    objective: str = "bottleneck"
    tie_break: str = "lexicographic"
    profile: LayerProfile | None = field(default=None, repr=False, compare=False)
    proven_optimal: bool = True

    @property
    def num_stages(self) -> int:
        """Number of stages ``S``."""
        return len(self.layers_per_stage)

    @property
    def boundaries(self) -> tuple[int, ...]:
        """Layer offsets ``(0, end of stage 0, ..., L)``; stage ``s`` is ``[b[s], b[s+1])``."""
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.layers_per_stage)]))

    @property
    def layer_ranges(self) -> tuple[range, ...]:
        """The layer indices of each stage."""
        b = self.boundaries
        return tuple(range(b[k], b[k + 1]) for k in range(self.num_stages))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "layers_per_stage": list(self.layers_per_stage),
            "boundaries": list(self.boundaries),
            "stage_times": list(self.stage_times),
            "stage_memory": list(self.stage_memory),
            "placement": list(self.placement),
            "num_ranks": self.num_ranks,
            "rank_memory": list(self.rank_memory),
            "inflight": list(self.inflight),
            "bottleneck": self.bottleneck,
            "step_time": self.step_time,
            "schedule": self.schedule,
            "num_microbatches": self.num_microbatches,
            "objective": self.objective,
            "tie_break": self.tie_break,
            "proven_optimal": self.proven_optimal,
        }


# --------------------------------------------------------------------- helpers
def even_split(num_layers: int, num_stages: int) -> tuple[int, ...]:
    """Megatron-style even split: ``L // S`` each, the remainder on the first stages."""
    layers = positive_int("num_layers", num_layers)
    stages = positive_int("num_stages", num_stages)
    if layers < stages:
        raise InvalidInputError(f"need at least num_stages={stages} layers, got {layers}")
    base, extra = divmod(layers, stages)
    return tuple(base + (1 if k < extra else 0) for k in range(stages))


def inflight_per_stage(schedule: str, num_stages: int, num_microbatches: int, **options: Any) -> tuple[int, ...]:
    """Peak number of microbatches whose activations each stage holds under ``schedule``.

    Read off the schedule's per-rank orders (no costs needed: a rank runs its
    order one action at a time): a stage gains one at each ``F`` and loses one at
    its ``B`` (or at ``W`` for a split backward, whose stash lives until then).
    1F1B gives ``min(m, P − p)``, GPipe ``m``. Works for every registered schedule.
    """
    return _inflight_and_placement(schedule, num_stages, num_microbatches, **options)[0]


def _inflight_and_placement(
    schedule: str, num_stages: int, num_microbatches: int, **options: Any
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if not options and schedule in _CLOSED_FORM_INFLIGHT:
        # The same numbers the orders give (tests check it), without building
        # S·m actions: 1F1B holds min(m, P - p), GPipe all m.
        counts = _CLOSED_FORM_INFLIGHT[schedule](num_stages, num_microbatches)
        return counts, tuple(range(num_stages))
    from .schedules import SCHEDULES

    try:
        # each value with its type: virtual_stages=True is the builder's to refuse, not a cached 1's
        key = tuple(sorted((name, type(value).__qualname__, value) for name, value in options.items()))
        hash(key)
    except TypeError:  # an unhashable option (a costs object): build it every time
        return _inflight_of_built(schedule, num_stages, num_microbatches, tuple(options.items()))
    # the factory is part of the key: a name registered again builds anew
    return _cached_inflight(schedule, SCHEDULES.get(schedule), num_stages, num_microbatches, key)


@functools.lru_cache(maxsize=512, typed=True)
def _cached_inflight(schedule: str, factory: Any, num_stages: int, num_microbatches: int,
                     options: tuple[tuple[str, str, Any], ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The counts of a fixed shape, built once (the planner asks for the same shapes hundreds of times)."""
    del factory  # only part of the key
    return _inflight_of_built(schedule, num_stages, num_microbatches,
                              tuple((name, value) for name, _, value in options))


def _inflight_of_built(schedule: str, num_stages: int, num_microbatches: int,
                       options: tuple[tuple[str, Any], ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    built = _build(schedule, num_stages, num_microbatches, dict(options), None)
    if built.num_stages != num_stages:
        raise InvalidInputError(
            f"schedule {schedule!r} built {built.num_stages} stages, expected num_stages={num_stages}"
        )
    return _inflight_from_orders(built), built.placement


def _build(schedule: str, num_stages: int, num_microbatches: int, options: dict[str, Any], costs: Any) -> Any:
    """Build a registered schedule; one that takes ``costs`` gets them (uniform when ``None``)."""
    from .costs import StageCosts
    from .schedules import build_schedule, schedule_options

    extra: dict[str, Any] = {}
    if "costs" in schedule_options(schedule) and "costs" not in options:
        extra["costs"] = costs if costs is not None else StageCosts.uniform(num_stages)
    return build_schedule(schedule, num_stages=num_stages, num_microbatches=num_microbatches, **options, **extra)


_CLOSED_FORM_INFLIGHT = {
    "1f1b": lambda stages, micro: tuple(min(micro, stages - p) for p in range(stages)),
    "gpipe": lambda stages, micro: (micro,) * stages,
}


def _inflight_from_orders(built: Any) -> tuple[int, ...]:
    release = "W" if built.split_backward else "B"
    peak = [0] * built.num_stages
    for order in built.orders:
        live: dict[int, int] = {}
        for kind, stage, _mb in order:
            if kind == "F":
                live[stage] = live.get(stage, 0) + 1
                peak[stage] = max(peak[stage], live[stage])
            elif kind == release:
                live[stage] -= 1
    if built.forward_only:
        return (0,) * built.num_stages
    return tuple(peak)


def _monotone_limit(
    prefix: np.ndarray, starts: np.ndarray, extra: float, threshold: float, last: int
) -> np.ndarray:
    """Largest ``e`` in ``[s, last]`` with ``(prefix[e] - prefix[s]) + extra <= threshold``.

    Returns ``s`` itself where not even one layer fits. The comparison is exactly
    the one used for stage values, so a search result off by rounding is corrected.
    """
    ends = np.searchsorted(prefix, prefix[starts] + (threshold - extra), side="right") - 1
    ends = np.clip(ends, starts, last)
    while True:
        over = (ends > starts) & ((prefix[ends] - prefix[starts]) + extra > threshold)
        if not over.any():
            break
        ends[over] -= 1
    while True:
        nxt = np.minimum(ends + 1, last)
        under = (nxt > ends) & ((prefix[nxt] - prefix[starts]) + extra <= threshold)
        if not under.any():
            break
        ends[under] += 1
    return ends


class _Problem:
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
        self.extra = np.asarray(extra, dtype=float)
        self.num_layers = len(self.prefixes[0]) - 1
        self.num_stages = len(self.extra)
        self.mem_limit = mem_limit
        singles: dict[int, np.ndarray] = {}
        for prefix in self.prefixes:
            if id(prefix) not in singles:
                singles[id(prefix)] = np.diff(prefix)
        self.singles = [singles[id(p)] for p in self.prefixes]

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
        by_time = _monotone_limit(self.prefixes[k], starts, self.extra[k], threshold, self.num_layers)
        other = np.full(len(starts), hi_end)
        if self.mem_limit is not None:
            other = np.minimum(other, self.mem_limit[k][starts])
        return np.minimum(by_time, other), by_time < other

    def _check_intervals(self, threshold: float) -> tuple[bool, list[int] | None, float] | None:
        """Fast path: every single layer in the reachable range fits; ranges stay intervals."""
        num_stages, num_layers = self.num_stages, self.num_layers
        upper = [0]  # upper[k]: farthest reachable start of stage k
        next_value = math.inf
        for k in range(num_stages):
            low, high = k, upper[-1]
            if self.singles[k][low : high + 1].max() + self.extra[k] > threshold:
                return None
            if self.mem_limit is not None and (
                self.mem_limit[k][low : high + 1] < np.arange(low + 1, high + 2)
            ).any():
                return None
            ends, binds = self._ends(k, np.array([high]), threshold)
            if binds[0] and ends[0] < num_layers:
                next_value = min(next_value, self.stage_value(k, high, int(ends[0]) + 1))
            upper.append(int(ends[0]))
        if upper[-1] < num_layers:
            return False, None, next_value
        bounds = [num_layers]
        for k in range(num_stages - 1, 0, -1):
            bounds.append(min(bounds[-1] - 1, upper[k]))
        bounds.append(0)
        bounds.reverse()
        return True, bounds, next_value

    def _check_bitmap(self, threshold: float) -> tuple[bool, list[int] | None, float]:
        num_stages, num_layers = self.num_stages, self.num_layers
        reach = np.zeros(num_layers + 1, dtype=bool)
        reach[0] = True
        steps: list[tuple[np.ndarray, np.ndarray]] = []
        next_value = math.inf
        for k in range(num_stages):
            starts = np.flatnonzero(reach)
            ends, binds = self._ends(k, starts, threshold)
            room = binds & (ends < num_layers)
            if room.any():
                s, e = starts[room], ends[room] + 1
                candidates = (self.prefixes[k][e] - self.prefixes[k][s]) + self.extra[k]
                next_value = min(next_value, float(candidates.min()))
            ok = ends > starts
            starts, ends = starts[ok], ends[ok]
            steps.append((starts, ends))
            delta = np.bincount(starts + 1, minlength=num_layers + 2) - np.bincount(
                ends + 1, minlength=num_layers + 2
            )
            reach = np.cumsum(delta)[: num_layers + 1] > 0
        if not reach[num_layers]:
            return False, None, next_value
        bounds = [num_layers]
        for k in range(num_stages - 1, 0, -1):
            starts, ends = steps[k]
            end = bounds[-1]
            valid = np.flatnonzero((starts + 1 <= end) & (ends >= end))
            bounds.append(int(starts[valid[-1]]))
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

    def tie_break(self, bottleneck: float, how: TieBreak, fallback: list[int]) -> tuple[list[int], str]:
        """The tie-broken optimal bounds and the tie-break actually applied."""
        if how == "none" or bottleneck <= 0.0:
            return fallback, how  # at a zero bottleneck every optimal partition is all zeros
        windows = StageWindows(self, bottleneck)
        if windows.pair_count() <= _PAIR_BUDGET:
            pairs = self.optimal_pairs(bottleneck)
            chosen = self._lexicographic(pairs) if how == "lexicographic" else self._variance(pairs)
            return chosen, how
        if how == "variance":
            return variance_bounds(self, windows), how
        listed = lexicographic_bounds(self, windows, fallback)
        return (self._lexicographic(self.optimal_pairs(bottleneck)) if listed is None else listed), how

    def _pair_arrays(self, pairs, k):
        starts, first, last = pairs[k]
        counts = last - first + 1
        s = np.repeat(starts, counts)
        offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        e = np.repeat(first, counts) + offsets
        return s, e

    def _variance(self, pairs) -> list[int]:
        num_layers = self.num_layers
        cost = np.full(num_layers + 1, math.inf)
        cost[0] = 0.0
        back: list[np.ndarray] = []
        for k in range(self.num_stages):
            s, e = self._pair_arrays(pairs, k)
            value = (self.prefixes[k][e] - self.prefixes[k][s]) + self.extra[k]
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
        for k in range(self.num_stages - 1, 0, -1):
            bounds.append(int(back[k][bounds[-1]]))
        bounds.append(0)
        bounds.reverse()
        return bounds

    def _lexicographic(self, pairs) -> list[int]:
        """Exact lexicographic program over every pair on an optimal partition."""
        starts, ends, values = [], [], []
        for k in range(self.num_stages):
            s, e = self._pair_arrays(pairs, k)
            starts.append(s)
            ends.append(e)
            values.append((self.prefixes[k][e] - self.prefixes[k][s]) + self.extra[k])
        fixed = [np.zeros(len(s), dtype=bool) for s in starts]
        return sorted_tuple_program(Listing(starts, ends, values, fixed), self.num_layers)


# ---------------------------------------------------------------- public entry
def partition_layers(
    layer_costs: Sequence[float] | LayerProfile,
    num_stages: int,
    *,
    first_extra: float | None = None,
    last_extra: float | None = None,
    first_extra_bytes: float | None = None,
    last_extra_bytes: float | None = None,
    memory_capacity: float | None = None,
    bytes_per_param: float = 16.0,
    schedule: str = "1f1b",
    num_microbatches: int | None = None,
    schedule_options: dict[str, Any] | None = None,
    objective: Objective = "bottleneck",
    tie_break: TieBreak = "lexicographic",
    rank_capacity: Literal["exact", "even"] = "exact",
) -> PartitionResult:
    """Split layers into ``num_stages`` non-empty contiguous stages, slowest stage first.

    Args:
        layer_costs: a :class:`~pipeplan.layers.LayerProfile`, or one total time
            (F + B + W per microbatch, >= 0) per layer. A plain list carries no
            memory, so only the extras' bytes count against a capacity.
        num_stages: ``S``, at most the number of layers.
        first_extra, last_extra: fixed time the first / last stage pays (default:
            the profile's, 0 for a list).
        first_extra_bytes, last_extra_bytes: fixed bytes on the first / last stage.
        memory_capacity: bytes per stage (per rank for one stage per rank); the
            result never exceeds it.
        bytes_per_param: bytes of weights, gradients and optimizer state per
            parameter (16 = mixed-precision Adam).
        schedule: registered schedule name whose in-flight microbatch counts
            (and placement) the memory model and the step time use.
        num_microbatches: microbatches per step ``m``. When given, the result
            reports the simulated step time. Default for in-flight counts: ``S``.
        schedule_options: extra keyword options for the schedule generator.
        objective: ``"bottleneck"`` (exact, the default) or ``"step_time"`` (local
            search on the simulated makespan, seeded by the bottleneck optimum).
        tie_break: ``"lexicographic"``, ``"variance"`` or ``"none"`` (module doc).
        rank_capacity: where a rank holds several stages, ``"exact"`` finds the
            fastest partition whose ranks fit (a search over capacity splits);
            ``"even"`` gives each stage an equal share of its rank's capacity and
            solves once (always fits per rank, not proven fastest; the planner's
            quick path).

    Returns:
        A :class:`PartitionResult`.

    Raises:
        InvalidInputError: bad numbers, fewer layers than stages, unknown options.
        InfeasiblePlanError: no partition fits ``memory_capacity``; the message
            gives the smallest capacity that fits and the stage that needs it.
    """
    stages = positive_int("num_stages", num_stages)
    _check_stage_count(layer_costs, stages)
    if objective not in ("bottleneck", "step_time"):
        raise InvalidInputError(f"objective must be 'bottleneck' or 'step_time', got {objective!r}")
    if rank_capacity not in ("exact", "even"):
        raise InvalidInputError(f"rank_capacity must be 'exact' or 'even', got {rank_capacity!r}")
    if tie_break not in ("lexicographic", "variance", "none"):
        raise InvalidInputError(f"tie_break must be 'lexicographic', 'variance' or 'none', got {tie_break!r}")
    per_param = non_negative_float("bytes_per_param", bytes_per_param)
    capacity = None if memory_capacity is None else _positive("memory_capacity", memory_capacity, "bytes")
    extras = {
        "first_extra": first_extra,
        "last_extra": last_extra,
        "first_extra_bytes": first_extra_bytes,
        "last_extra_bytes": last_extra_bytes,
    }
    given = {key: non_negative_float(key, value) for key, value in extras.items() if value is not None}
    if isinstance(layer_costs, LayerProfile):
        given_profile = layer_costs.with_extras(**given) if given else layer_costs
        profile: LayerProfile | None = given_profile
        times = given_profile.total
        params = np.asarray(given_profile.params)
        activations = np.asarray(given_profile.activation_bytes)
        extra_time, extra_bytes = given_profile.stage_extras(stages)
    else:
        times = np.asarray(finite_floats("layer_costs", layer_costs, allow_zero=True))
        params = activations = np.zeros(len(times))
        profile = None
        extra_time = np.zeros(stages)
        extra_bytes = np.zeros(stages)
        extra_time[0] += given.get("first_extra", 0.0)
        extra_time[-1] += given.get("last_extra", 0.0)
        extra_bytes[0] += given.get("first_extra_bytes", 0.0)
        extra_bytes[-1] += given.get("last_extra_bytes", 0.0)
    num_layers = len(times)
    if num_layers < stages:
        raise InvalidInputError(
            f"num_stages must be <= the number of layers ({num_layers}) so no stage is empty, got {stages}"
        )
    simulate_step = num_microbatches is not None or objective == "step_time"
    micro = stages if num_microbatches is None else positive_int("num_microbatches", num_microbatches)
    with np.errstate(over="ignore"):
        totals = {"layer times": times.sum() + extra_time.max(),
                  "layer bytes": (params * per_param).sum() + activations.sum() * micro
                  + extra_bytes.max()}
    for what, total in totals.items():
        if not np.isfinite(total):
            raise InvalidInputError(f"the {what} add up past the largest float; rescale them (e.g. seconds, GB)")
    options = dict(schedule_options or {})
    inflight, placement = _inflight_and_placement(schedule, stages, micro, **options)

    memory_prefixes = _memory_prefixes(params, activations, per_param, inflight)
    memory_problem = _Problem(memory_prefixes, extra_bytes)
    time_prefix = np.concatenate([[0.0], np.cumsum(times)])
    context = _Context(memory_problem, tuple(placement), schedule, micro, per_param)

    def solve(capacities: Sequence[float] | None) -> tuple[_Problem, list[int], str] | None:
        limits = None if capacities is None else _memory_limits(memory_problem, capacities)
        candidate = _Problem([time_prefix] * stages, extra_time, limits)
        solved = candidate.min_bottleneck()
        if solved is None:
            return None
        chosen, applied = candidate.tie_break(solved[0], tie_break, solved[1])
        return candidate, chosen, applied

    outcome = solve(None if capacity is None else [capacity] * stages)
    proven = True
    if capacity is not None and context.shared and rank_capacity == "even":
        if outcome is None or max(context.rank_memory(outcome[1])) > capacity:
            outcome = solve([capacity / placement.count(rank) for rank in placement])
            proven = False
        if outcome is None:
            raise InfeasiblePlanError(
                f"memory_capacity={capacity:.6g} bytes per rank fits no partition of {num_layers} layers into "
                f"{stages} stages under {schedule!r} with each rank's capacity split evenly over its stages"
            )
    elif outcome is None:
        assert capacity is not None
        raise context.infeasible(capacity)
    elif capacity is not None and context.shared and max(context.rank_memory(outcome[1])) > capacity:
        # The per-stage solve is a relaxation (its bottleneck is a lower bound); keep
        # the best split of each rank's capacity over its stages that fits per rank.
        relaxed = max(outcome[0].values(outcome[1]))
        exhaustive = context.exhaustive(time_prefix, extra_time, capacity, tie_break)
        if exhaustive is not None:
            fitting = exhaustive[0]
            relaxed = exhaustive[1]  # the exact optimum per rank
        else:
            fitting = context.fit_per_rank(time_prefix, extra_time, capacity, relaxed)
        if fitting is None:
            raise context.infeasible(capacity)
        found = solve(context.capacities_around(fitting, capacity))
        assert found is not None  # the partition found fits these capacities
        outcome = found
        proven = max(outcome[0].values(outcome[1])) == relaxed
    problem, bounds, applied = outcome

    if simulate_step and profile is None:
        profile = LayerProfile.from_costs(times.tolist())
    step_time = None
    if simulate_step:
        assert profile is not None
        step = _StepTimer(profile, schedule, stages, micro, options)
        step_time = step(bounds)
        if objective == "step_time":
            bounds, step_time = _improve_step_time(step, bounds, step_time, problem)
    sizes = tuple(int(b - a) for a, b in zip(bounds[:-1], bounds[1:]))
    stage_times = tuple(problem.values(bounds))
    return PartitionResult(
        layers_per_stage=sizes,
        stage_times=stage_times,
        stage_memory=tuple(memory_problem.values(bounds)),
        placement=tuple(placement),
        bottleneck=max(stage_times),
        step_time=step_time,
        schedule=schedule,
        num_microbatches=micro,
        inflight=tuple(inflight),
        objective=objective,
        tie_break=applied if objective == "bottleneck" else "none",
        profile=profile,
        proven_optimal=proven,
    )


def _check_stage_count(layer_costs: object, stages: int) -> None:
    """Refuse more stages than layers before any per-stage array is allocated."""
    if isinstance(layer_costs, LayerProfile):
        count = layer_costs.num_layers
    elif isinstance(layer_costs, (Sequence, np.ndarray)) and not isinstance(layer_costs, (str, bytes)):
        count = len(layer_costs)
    else:
        return  # not a list: finite_floats names the problem
    if count < stages:
        raise InvalidInputError(
            f"num_stages must be <= the number of layers ({count}) so no stage is empty, got {stages}"
        )


def _positive(field_name: str, value: object, unit: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not 0 < number < math.inf:
        raise InvalidInputError(f"{field_name} must be a finite number of {unit} > 0, got {value!r}")
    return number


def _memory_prefixes(
    params: np.ndarray, activations: np.ndarray, per_param: float, inflight: Sequence[int]
) -> list[np.ndarray]:
    base = np.concatenate([[0.0], np.cumsum(params * per_param)])
    act = np.concatenate([[0.0], np.cumsum(activations)])
    cache: dict[int, np.ndarray] = {}
    return [cache.setdefault(count, base + count * act) for count in inflight]


def _memory_limits(memory_problem: _Problem, capacities: Sequence[float]) -> list[np.ndarray]:
    """Per stage, the last end whose memory fits ``capacities[k]`` from each start."""
    starts = np.arange(memory_problem.num_layers + 1)
    return [
        _monotone_limit(prefix, starts, memory_problem.extra[k], capacities[k], memory_problem.num_layers)
        for k, prefix in enumerate(memory_problem.prefixes)
    ]


class _Context:
    """Memory per rank: which stages share a rank, and the infeasibility report."""

    def __init__(self, memory_problem: _Problem, placement: tuple[int, ...], schedule: str, micro: int,
                 per_param: float) -> None:
        self.memory_problem = memory_problem
        self.placement = placement
        self.num_ranks = max(placement) + 1
        self.shared = len(set(placement)) < len(placement)
        self.schedule, self.micro, self.per_param = schedule, micro, per_param

    def rank_memory(self, bounds: Sequence[int]) -> list[float]:
        return rank_totals(self.memory_problem.values(bounds), self.placement)

    def shares_of(self, bounds: Sequence[int]) -> list[float]:
        """Each stage's part of its rank's memory in ``bounds`` (mixed with an equal split)."""
        values = self.memory_problem.values(bounds)
        totals = rank_totals(values, self.placement)
        counts = rank_totals([1.0] * len(values), self.placement)
        return [
            0.9 * values[k] / totals[r] + 0.1 / counts[r] if totals[r] > 0 else 1.0 / counts[r]
            for k, r in enumerate(self.placement)
        ]

    def equal_shares(self) -> list[float]:
        counts = rank_totals([1.0] * len(self.placement), self.placement)
        return [1.0 / counts[r] for r in self.placement]

    def smallest_rank_capacity(self, time_limits: Sequence[np.ndarray] | None = None,
                               starts: list[list[float]] | None = None) -> tuple[float, list[int]]:
        """A partition with a small largest rank memory (stage times within ``time_limits``), and that memory.

        With shares ``w`` (summing to 1 on each rank) the exact solver minimises
        ``max_k memory_k / w_k``, and every rank then holds at most that. The
        shares are re-read from each result a few times; the best partition is kept.
        Returns ``(inf, [])`` when no partition meets ``time_limits``.
        """
        best: tuple[float, list[int]] = (math.inf, [])
        for shares in starts or self._starting_shares():
            for _ in range(3):
                scaled = _Problem([p / w for p, w in zip(self.memory_problem.prefixes, shares)],
                                  self.memory_problem.extra / np.asarray(shares), time_limits)
                solved = scaled.min_bottleneck()
                if solved is None:
                    return best
                needed = max(self.rank_memory(solved[1]))
                if needed < best[0]:
                    best = (needed, solved[1])
                shares = self.shares_of(solved[1])
        return best

    def _starting_shares(self) -> list[list[float]]:
        """Equal shares, then a few seeded random splits of each rank's capacity."""
        rng = np.random.default_rng(0)
        out = [self.equal_shares()]
        for _ in range(_SHARE_STARTS - 1):
            raw = rng.uniform(0.2, 1.0, len(self.placement))
            totals = rank_totals(raw, self.placement)
            out.append([raw[k] / totals[r] for k, r in enumerate(self.placement)])
        return out

    def fit_per_rank(self, time_prefix: np.ndarray, extra_time: np.ndarray, capacity: float,
                     lower: float) -> list[int] | None:
        """A partition that fits ``capacity`` per rank with a small slowest stage (``None``: none found).

        Bisects the slowest stage time ``T`` from ``lower`` (the per-stage
        relaxation's optimum) up: at each ``T`` it looks for a partition with every
        stage ``<= T`` whose largest rank memory fits (:meth:`smallest_rank_capacity`).
        """
        starts = np.arange(self.memory_problem.num_layers + 1)
        last = self.memory_problem.num_layers

        def attempt(threshold: float, near: Sequence[int] | None = None) -> list[int] | None:
            limits = [_monotone_limit(time_prefix, starts, extra, threshold, last) for extra in extra_time]
            # bisection probes start from the best split so far (and an equal one) only
            seeds = None if near is None else [self.shares_of(near), self.equal_shares()]
            needed, bounds = self.smallest_rank_capacity(limits, seeds)
            return bounds if needed <= capacity else None

        def slowest(bounds: Sequence[int]) -> float:
            return max(float(time_prefix[b] - time_prefix[a] + x)
                       for a, b, x in zip(bounds[:-1], bounds[1:], extra_time))

        best = attempt(lower)
        if best is not None:
            return best
        best = attempt(math.inf)
        if best is None:
            return None
        low, high = lower, slowest(best)
        for _ in range(30):
            if not low < high * (1 - 1e-9):
                break
            middle = low + (high - low) / 2
            found = attempt(middle, best)
            if found is None:
                low = middle
            else:
                best, high = found, slowest(found)
        return best

    def exhaustive(self, time_prefix: np.ndarray, extra_time: np.ndarray, capacity: float,
                   tie_break: str) -> tuple[list[int] | None, float] | None:
        """Every partition at once when there are at most :data:`_EXHAUSTIVE_LIMIT`.

        Returns ``(best bounds or None if none fits, optimal bottleneck)``, or
        ``None`` when there are too many partitions to list.
        """
        listed = self._every_partition()
        if listed is None:
            return None
        bounds, largest = listed
        times = time_prefix[bounds[:, 1:]] - time_prefix[bounds[:, :-1]] + extra_time
        fits = largest <= capacity
        if not fits.any():
            return None, math.inf
        times, bounds = times[fits], bounds[fits]
        slowest = times.max(axis=1)
        optimum = float(slowest.min())
        times, bounds = times[slowest == optimum], bounds[slowest == optimum]
        if tie_break == "lexicographic":
            ordered = -np.sort(-times, axis=1)
            pick = np.lexsort(ordered.T[::-1])[0]
        elif tie_break == "variance":
            pick = int(np.argmin((times * times).sum(axis=1)))
        else:
            pick = 0
        return [int(b) for b in bounds[pick]], optimum

    def _every_partition(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Bounds of every partition (one row each) and its largest rank memory, if few enough."""
        problem = self.memory_problem
        num_layers, num_stages = problem.num_layers, problem.num_stages
        if math.comb(num_layers - 1, num_stages - 1) > _EXHAUSTIVE_LIMIT:
            return None
        cuts = np.array(list(itertools.combinations(range(1, num_layers), num_stages - 1)), dtype=np.int64)
        cuts = cuts.reshape(-1, num_stages - 1)
        bounds = np.hstack([np.zeros((len(cuts), 1), np.int64), cuts, np.full((len(cuts), 1), num_layers)])
        memory = np.stack([problem.prefixes[k][bounds[:, k + 1]] - problem.prefixes[k][bounds[:, k]]
                           + problem.extra[k] for k in range(num_stages)], axis=1)
        largest = np.stack([memory[:, list(self.stages_of(rank))].sum(axis=1) for rank in range(self.num_ranks)],
                           axis=1).max(axis=1)
        return bounds, largest

    def stages_of(self, rank: int) -> tuple[int, ...]:
        return tuple(k for k, r in enumerate(self.placement) if r == rank)

    def smallest_listed(self) -> tuple[float, list[int]] | None:
        """The exact smallest capacity per rank and its partition, when the partitions can be listed."""
        listed = self._every_partition()
        if listed is None:
            return None
        bounds, largest = listed
        pick = int(np.argmin(largest))
        return float(largest[pick]), [int(b) for b in bounds[pick]]

    def capacities_around(self, bounds: Sequence[int], capacity: float) -> list[float]:
        """Per-stage capacities summing to ``capacity`` on each rank that ``bounds`` fits:
        each stage's memory plus an equal part of its rank's slack."""
        memory = self.memory_problem.values(bounds)
        totals = rank_totals(memory, self.placement)
        counts = rank_totals([1.0] * len(memory), self.placement)
        return [memory[k] + max(capacity - totals[r], 0.0) / counts[r] for k, r in enumerate(self.placement)]

    def infeasible(self, capacity: float) -> InfeasiblePlanError:
        problem = self.memory_problem
        where = (f"{problem.num_layers} layers into {problem.num_stages} stages under {self.schedule!r} "
                 f"with {self.micro} microbatches ({self.per_param:g} bytes per parameter)")
        if not self.shared:
            needed, bounds = problem.min_bottleneck()  # type: ignore[misc]
            values = problem.values(bounds)
            stage = int(np.argmax(values))
            return InfeasiblePlanError(
                f"memory_capacity={capacity:.6g} bytes fits no partition of {where}; the smallest capacity "
                f"that fits is {needed:.6g} bytes, needed by stage {stage} "
                f"(layers {bounds[stage]}..{bounds[stage + 1] - 1})"
            )
        listed = self.smallest_listed()
        exact = listed is not None
        needed, bounds = listed if listed is not None else self.smallest_rank_capacity()
        totals = self.rank_memory(bounds)
        rank = int(np.argmax(totals))
        stages = [k for k, r in enumerate(self.placement) if r == rank]
        held = ", ".join(f"stage {k}: layers {bounds[k]}..{bounds[k + 1] - 1}" for k in stages)
        return InfeasiblePlanError(
            f"memory_capacity={capacity:.6g} bytes per rank fits no partition of {where} on "
            f"{self.num_ranks} ranks; the smallest capacity per rank {'that fits' if exact else 'found to fit'} "
            f"is {needed:.6g} bytes, needed by rank {rank} ({held})"
        )


def rank_totals(values: Sequence[float] | np.ndarray, placement: Sequence[int]) -> list[float]:
    """Sum of ``values[s]`` over the stages ``s`` on each rank (``placement[s]`` is the rank)."""
    totals = [0.0] * (max(placement) + 1)
    for stage, rank in enumerate(placement):
        totals[rank] += float(values[stage])
    return totals


class _StepTimer:
    """Simulated makespan of a partition under one schedule (rebuilt per partition
    for schedules that take the costs, such as ``"adaptive"``)."""

    def __init__(self, profile: LayerProfile, schedule: str, num_stages: int, micro: int, options: dict[str, Any]) -> None:
        from .schedules import schedule_options

        self.profile = profile
        self.schedule = schedule
        self.num_stages = num_stages
        self.micro = micro
        self.options = options
        self.cost_aware = "costs" in schedule_options(schedule)
        self.fixed = None if self.cost_aware else _build(schedule, num_stages, micro, options, None)

    def __call__(self, bounds: Sequence[int]) -> float:
        from .simulate import simulate

        sizes = [int(b - a) for a, b in zip(bounds[:-1], bounds[1:])]
        costs = self.profile.stage_costs(sizes)
        built = self.fixed or _build(self.schedule, self.num_stages, self.micro, self.options, costs)
        return float(simulate(built, costs, validate=False).makespan)


def _improve_step_time(
    step: _StepTimer, bounds: list[int], current: float, problem: _Problem
) -> tuple[list[int], float]:
    """First-improvement hill climbing: move one boundary by one layer while it helps."""
    best = list(bounds)
    improved = True
    budget = 20 * len(bounds) * len(bounds)
    while improved and budget > 0:
        improved = False
        for index in range(1, len(best) - 1):
            for delta in (-1, 1):
                trial = list(best)
                trial[index] += delta
                if not trial[index - 1] < trial[index] < trial[index + 1]:
                    continue
                if problem.mem_limit is not None and any(
                    problem.mem_limit[k][trial[k]] < trial[k + 1] for k in (index - 1, index)
                ):
                    continue
                budget -= 1
                value = step(trial)
                if value < current * (1 - 1e-12):
                    best, current, improved = trial, value, True
                    break
            if improved:
                break
    return best, current
