"""Memory per rank for the partitioner: stage bytes, rank sums, and the infeasibility report.

    from pipeplan.partition.memory import RankMemoryModel, memory_prefixes, tied_layers
    tied = tied_layers(profile, 16.0)                                  # None without tied layers
    prefixes = memory_prefixes(params, activations, 16.0, inflight, tied=tied)   # per stage: cumulative bytes
    RankMemoryModel(MinMaxProblem(prefixes, extra_bytes), placement, "zb-v", 8, 16.0, tied=tied).rank_memory(bounds)

Stage ``k`` on layers ``[s, e)`` holds ``bytes_per_param × params`` plus
``inflight[k] × activation_bytes`` plus its fixed extra bytes (bytes, per
rank's share of the model). A rank holds the sum of its stages. When ranks hold
several stages, :class:`RankMemoryModel` finds partitions that fit per rank: by
listing every partition (up to :data:`EXHAUSTIVE_LIMIT`) or by searching splits
of each rank's capacity over its stages.

Tied layers (:attr:`~pipeplan.layers.LayerProfile.tied_to`, a tied LM head and
its embedding) hold one table per rank, as many ranks as hold one of them. Stage
0 always starts at layer 0, so its prefix counts a tied group once (at its
largest member in it) for every partition. A rank's total counts it once too when
every layer of the group sits on a stage no partition moves (the first or last
layer: a tied LM); a rank holding several such stages subtracts the extra copies
(a constant of the placement, so per-stage capacities stay exact). A group
elsewhere is charged a copy per stage that holds one of its layers (never less
than it holds).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..errors import InfeasiblePlanError
from ..layers import LayerProfile
from ..units import GIB, format_gib
from .problem import MinMaxProblem, monotone_limit

__all__ = ["EXHAUSTIVE_LIMIT", "RankMemoryModel", "TiedLayers", "gib", "memory_limits", "memory_prefixes",
           "rank_totals", "tied_layers"]

# Splits of the rank capacities the per-rank memory search starts from.
SHARE_STARTS = 6
# With several stages per rank and at most this many partitions, the per-rank
# memory problem is solved exactly by listing them all (numpy).
EXHAUSTIVE_LIMIT = 200_000


class TiedLayers(NamedTuple):
    """Groups of layers sharing one table (:attr:`LayerProfile.tied_groups`) and each layer's static bytes."""

    groups: tuple[tuple[int, ...], ...]
    layer_bytes: np.ndarray


def tied_layers(profile: LayerProfile, per_param: float) -> TiedLayers | None:
    """``profile``'s tied groups with ``per_param × params`` bytes per layer; ``None`` when nothing is tied."""
    if not profile.tied_groups:
        return None
    return TiedLayers(profile.tied_groups, np.asarray(profile.params, dtype=float) * per_param)


def memory_prefixes(
    params: np.ndarray, activations: np.ndarray, per_param: float, inflight: Sequence[int], *,
    tied: TiedLayers | None = None,
) -> list[np.ndarray]:
    """Per stage, cumulative bytes ``per_param × params + inflight[k] × activations`` (0 first).

    With ``tied``, stage 0's prefix counts each tied group once (module doc).
    """
    static = params * per_param
    base = np.concatenate([[0.0], np.cumsum(static)])
    act = np.concatenate([[0.0], np.cumsum(activations)])
    cache: dict[int, np.ndarray] = {}
    prefixes = [cache.setdefault(count, base + count * act) for count in inflight]
    if tied is not None and prefixes:
        first = static + inflight[0] * np.asarray(activations, dtype=float)
        for group in tied.groups:
            largest = 0.0
            for index in group:  # a copy adds only what it holds beyond the largest before it
                first[index] -= min(static[index], largest)
                largest = max(largest, static[index])
        prefixes[0] = np.concatenate([[0.0], np.cumsum(first)])
    return prefixes


def memory_limits(memory_problem: MinMaxProblem, capacities: Sequence[float]) -> list[np.ndarray]:
    """Per stage, the last end whose memory fits ``capacities[k]`` from each start."""
    starts = np.arange(memory_problem.num_layers + 1)
    # stages with the same prefix (the same in-flight count), extra bytes and capacity have the same limits:
    # one array for them all (read-only to every user)
    found: dict[tuple[int, float, float], np.ndarray] = {}
    limits = []
    for k, prefix in enumerate(memory_problem.prefixes):
        key = (id(prefix), float(memory_problem.extra[k]), float(capacities[k]))
        limit = found.get(key)
        if limit is None:
            limit = found[key] = monotone_limit(prefix, starts, memory_problem.extra[k], capacities[k],
                                                memory_problem.num_layers)
        limits.append(limit)
    return limits


class RankMemoryModel:
    """Memory per rank: which stages share a rank, and the infeasibility report."""

    def __init__(self, memory_problem: MinMaxProblem, placement: tuple[int, ...], schedule: str, micro: int,
                 per_param: float, *, tied: TiedLayers | None = None) -> None:
        self.memory_problem = memory_problem
        self.placement = placement
        self.num_ranks = max(placement) + 1
        self.shared = len(set(placement)) < len(placement)
        self.schedule, self.micro, self.per_param = schedule, micro, per_param
        #: per rank, the bytes of tied copies its stages' sums count beyond one table (module doc)
        self.tied_excess = _fixed_tied_excess(tied, placement, memory_problem.num_layers)

    def rank_memory(self, bounds: Sequence[int]) -> list[float]:
        """Bytes each rank holds: its stages' sum, a tied table on fixed stages once."""
        totals = rank_totals(self.memory_problem.values(bounds), self.placement)
        return [total - excess for total, excess in zip(totals, self.tied_excess)]

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
                scaled = MinMaxProblem([p / w for p, w in zip(self.memory_problem.prefixes, shares)],
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
        for _ in range(SHARE_STARTS - 1):
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
            limits = [monotone_limit(time_prefix, starts, extra, threshold, last) for extra in extra_time]
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
        """Every partition at once when there are at most :data:`EXHAUSTIVE_LIMIT`.

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
        count = math.comb(num_layers - 1, num_stages - 1)
        if count > EXHAUSTIVE_LIMIT:
            return None
        cuts = np.array(list(itertools.combinations(range(1, num_layers), num_stages - 1)), dtype=np.int64)
        cuts = cuts.reshape(count, num_stages - 1)  # (1, 0) for one stage
        bounds = np.hstack([np.zeros((len(cuts), 1), np.int64), cuts, np.full((len(cuts), 1), num_layers)])
        memory = np.stack([problem.prefixes[k][bounds[:, k + 1]] - problem.prefixes[k][bounds[:, k]]
                           + problem.extra[k] for k in range(num_stages)], axis=1)
        largest = (np.stack([memory[:, list(self.stages_of(rank))].sum(axis=1) for rank in range(self.num_ranks)],
                            axis=1) - self.tied_excess).max(axis=1)
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
        totals = self.rank_memory(bounds)
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
                f"memory_capacity = {gib(capacity)} fits no partition of {where}; the smallest capacity "
                f"that fits is {gib(needed, up=True)}, needed by stage {stage} "
                f"(layers {bounds[stage]}..{bounds[stage + 1] - 1})",
                needed_bytes=float(needed), stage=stage, layers=((int(bounds[stage]), int(bounds[stage + 1]) - 1),),
            )
        listed = self.smallest_listed()
        exact = listed is not None
        needed, bounds = listed if listed is not None else self.smallest_rank_capacity()
        totals = self.rank_memory(bounds)
        rank = int(np.argmax(totals))
        stages = [k for k, r in enumerate(self.placement) if r == rank]
        held = ", ".join(f"stage {k}: layers {bounds[k]}..{bounds[k + 1] - 1}" for k in stages)
        return InfeasiblePlanError(
            f"memory_capacity = {gib(capacity)} per rank fits no partition of {where} on "
            f"{self.num_ranks} ranks; the smallest capacity per rank {'that fits' if exact else 'found to fit'} "
            f"is {gib(needed, up=True)}, needed by rank {rank} ({held})",
            needed_bytes=float(needed), proven=exact, rank=rank,
            layers=tuple((int(bounds[k]), int(bounds[k + 1]) - 1) for k in stages),
        )


def gib(num_bytes: float, *, up: bool = False) -> str:
    """Memory as partition's messages print it: :func:`pipeplan.units.format_gib` to 4 digits (``"15.96 GiB"``).

    ``up`` rounds up to those digits: a smallest capacity that fits must not read as less
    than it is. (A toy size below 0.01 GiB is ``format_gib``'s: the binary unit that suits it.)
    """
    value = float(num_bytes) / GIB
    if up and value >= 0.01 and math.isfinite(value):
        step = 10.0 ** (math.floor(math.log10(value)) - 3)
        value = math.ceil(value / step * (1 - 1e-12)) * step
    return format_gib(value * GIB, digits=4)


def _fixed_tied_excess(tied: TiedLayers | None, placement: Sequence[int], num_layers: int) -> np.ndarray:
    """Per rank, the bytes of a tied group its stage values count more than once, for groups on fixed stages.

    Stage 0's value holds a group's largest member in it; other stages hold every
    member in them; the rank holds the largest member on it (module doc).
    """
    excess = np.zeros(max(placement) + 1)
    if tied is None:
        return excess
    for group in tied.groups:
        by_stage: dict[int, list[float]] = {}
        for index in group:
            stage = _fixed_stage(index, num_layers, len(placement))
            if stage is None:
                break  # its stages move with the partition: a copy per stage
            by_stage.setdefault(stage, []).append(float(tied.layer_bytes[index]))
        else:
            charged, largest = np.zeros_like(excess), np.zeros_like(excess)
            for stage, held in by_stage.items():
                charged[placement[stage]] += max(held) if stage == 0 else sum(held)
                largest[placement[stage]] = max(largest[placement[stage]], *held)
            excess += charged - largest
    return excess


def _fixed_stage(index: int, num_layers: int, num_stages: int) -> int | None:
    """The stage layer ``index`` is on in every partition, or ``None`` where that depends on the partition."""
    if index == 0 or num_stages == 1:
        return 0
    if index == num_layers - 1:
        return num_stages - 1
    return index if num_stages == num_layers else None


def rank_totals(values: Sequence[float] | np.ndarray, placement: Sequence[int]) -> list[float]:
    """Sum of ``values[s]`` over the stages ``s`` on each rank (``placement[s]`` is the rank)."""
    totals = [0.0] * (max(placement) + 1)
    for stage, rank in enumerate(placement):
        totals[rank] += float(values[stage])
    return totals
