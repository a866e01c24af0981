"""Several chunks per rank: choose chunk boundaries and which rank holds each chunk.

Interleaved and V schedules give every rank ``v`` chunks (stages). What a rank
costs per microbatch is the sum of its chunks, so a heavy block that cannot be
split (a vision encoder counted as one layer) should share its rank with light
chunks. :func:`place_chunks` cuts the layers into ``R·v`` contiguous chunks and
assigns ``v`` of them to each of ``R`` ranks so that the slowest rank is fast::

    from pipeplan.partition.placement import place_chunks
    plan = place_chunks([40.0] + [2.0] * 30, num_ranks=4, chunks_per_rank=2)
    plan.placement, plan.rank_loads      # a Schedule-compatible stage -> rank map

Method (a heuristic; the result says how far it is from a lower bound):

1. Seeds: the exact min-max chunk boundaries (:func:`pipeplan.partition_layers`
   with ``R·v`` stages), boundaries that put every layer heavier than the
   per-chunk average into a chunk of its own, and any layers per chunk the caller
   gives (``seeds``: the planner passes its own min-max partition and the even
   split). Every later step only keeps a layout that improves on the best so far,
   so the result's largest rank load is at most every seed's.
2. Assignment of chunks to ranks: longest chunk first onto the least-loaded rank
   that still has a free slot, then swaps of chunks between the most-loaded rank
   and the others while the largest load drops. With ``pattern="interleaved"``
   (chunk ``c`` on rank ``c mod R``) or ``pattern="v"`` (ranks ``0..R-1`` then
   ``R-1..0``) the assignment is fixed instead.
3. Boundary search: each boundary in turn is moved to every position between
   its neighbours; a move is kept when it lowers (largest rank load, sum of
   squared loads). Repeats until no move helps.
4. Annealing from the best of those (seeded, so the result is deterministic):
   random moves of one boundary by one or two layers, and shifts of a run of
   consecutive boundaries by one layer, which carry a layer's worth of load from
   one chunk to a chunk far away; a worse move is kept with the Metropolis
   probability at a temperature falling to zero. Step 3 then polishes the best
   layout seen. Single-boundary moves alone stall where layers are lumpy: a rank
   that holds a heavy block plus a light prefix can only shed the prefix if every
   boundary after it moves, each move on its own making some other rank worse.

``lower_bound`` is ``max(total / R, heaviest layer + (v − 1) lightest layers)``
(extras included); ``max_load == lower_bound`` proves the result optimal (for the load;
with a ``chunk_weight`` the objective also counts the largest chunk).
"""

from __future__ import annotations

import heapq
import math
import random
from operator import mul
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .._validation import finite_floats, non_negative_float, positive_int
from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..plan import Plan
from ..schedules.patterns import loop_placement, v_placement

__all__ = ["ChunkPlacement", "place_chunks", "Pattern"]

Pattern = Literal["free", "interleaved", "v"]


@dataclass(frozen=True, kw_only=True)
class ChunkPlacement(Plan):
    """Chunk boundaries plus the chunk → rank map: a :class:`~pipeplan.plan.Plan`.

    As a Plan it has ``pp`` (the number of ranks), ``dp = 1``, and ``schedule``
    ``"interleaved"`` (with ``virtual_stages``) when chunk ``s`` sits on rank
    ``s mod R``, else ``"custom"``; all derived from the fields below.

    Attributes:
        layers_per_stage: layers in each chunk, in model order (stage ``s`` is chunk ``s``).
        placement: ``placement[s]`` is the rank holding stage ``s``; usable as
            :attr:`pipeplan.Schedule.placement`.
        stage_times: F + B + W time per microbatch of each chunk (extras included).
        rank_loads: sum of the chunk times on each rank.
        lower_bound: no placement can have a smaller largest rank load.
    """

    # the Plan fields a placement derives (set in __post_init__; hash=False keeps it hashable)
    pp: int = field(init=False, repr=False)
    dp: int = field(init=False, default=1, repr=False)
    schedule: str = field(init=False, repr=False)
    schedule_options: Mapping[str, Any] = field(init=False, hash=False, repr=False)
    # the placement's own
    stage_times: tuple[float, ...]
    rank_loads: tuple[float, ...]
    lower_bound: float

    def __post_init__(self) -> None:
        ranks = len(self.rank_loads)
        looped = self.placement == loop_placement(ranks, len(self.placement) // ranks)
        object.__setattr__(self, "pp", ranks)
        object.__setattr__(self, "schedule", "interleaved" if looped else "custom")
        object.__setattr__(self, "schedule_options",
                           {"virtual_stages": len(self.placement) // ranks} if looped else {})
        super().__post_init__()

    @property
    def max_load(self) -> float:
        """The largest rank load (what the heuristic minimises)."""
        return max(self.rank_loads)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary (the placement's fields; :meth:`Plan.to_dict` gives the plan's)."""
        return {
            "layers_per_stage": list(self.layers_per_stage),
            "placement": list(self.placement),
            "stage_times": list(self.stage_times),
            "rank_loads": list(self.rank_loads),
            "max_load": self.max_load,
            "lower_bound": self.lower_bound,
        }


def fixed_pattern(pattern: Pattern, num_ranks: int, chunks_per_rank: int) -> tuple[int, ...]:
    """The stage → rank map of an ``"interleaved"`` (a loop) or ``"v"`` pattern (:mod:`pipeplan.schedules.patterns`)."""
    if pattern == "interleaved":
        return loop_placement(num_ranks, chunks_per_rank)
    if pattern == "v":
        return v_placement(num_ranks, chunks_per_rank)
    raise InvalidInputError(f"pattern must be 'free', 'interleaved' or 'v', got {pattern!r}")


def _assign_free(times: Sequence[float], num_ranks: int, chunks_per_rank: int) -> tuple[int, ...]:
    """Longest chunk first onto the least-loaded rank with a free slot, then improving swaps."""
    order = sorted(range(len(times)), key=lambda c: (-times[c], c))
    heap = [(0.0, rank) for rank in range(num_ranks)]
    slots = [chunks_per_rank] * num_ranks
    owner = [0] * len(times)
    for chunk in order:
        load, rank = heapq.heappop(heap)
        owner[chunk] = rank
        slots[rank] -= 1
        if slots[rank]:
            heapq.heappush(heap, (load + times[chunk], rank))
    loads = [0.0] * num_ranks
    for chunk, rank in enumerate(owner):
        loads[rank] += times[chunk]
    improved = True
    while improved:
        improved = False
        top = max(range(num_ranks), key=lambda r: (loads[r], -r))
        best_gain, best_pair = 0.0, None
        for a in (c for c in range(len(times)) if owner[c] == top):
            for b in range(len(times)):
                rank = owner[b]
                if rank == top:
                    continue
                delta = times[a] - times[b]
                if delta <= 0:
                    continue
                new_top, new_other = loads[top] - delta, loads[rank] + delta
                gain = loads[top] - max(new_top, new_other)
                if gain > best_gain + 1e-12 * loads[top]:
                    best_gain, best_pair = gain, (a, b)
        if best_pair is not None:
            a, b = best_pair
            rank = owner[b]
            delta = times[a] - times[b]
            loads[top] -= delta
            loads[rank] += delta
            owner[a], owner[b] = rank, top
            improved = True
    return _canonical(owner)


def _canonical(owner: Sequence[int]) -> tuple[int, ...]:
    """Renumber ranks so rank 0 holds chunk 0, the next new rank is 1, and so on."""
    names: dict[int, int] = {}
    for rank in owner:
        names.setdefault(rank, len(names))
    return tuple(names[rank] for rank in owner)


def place_chunks(
    layer_costs: Sequence[float] | LayerProfile,
    num_ranks: int,
    chunks_per_rank: int,
    *,
    first_extra: float | None = None,
    last_extra: float | None = None,
    pattern: Pattern = "free",
    chunk_weight: float = 0.0,
    seeds: Sequence[Sequence[int]] = (),
    restarts: int | None = None,
) -> ChunkPlacement:
    """Cut layers into ``num_ranks × chunks_per_rank`` chunks and place them on ranks.

    Args:
        layer_costs: a :class:`~pipeplan.layers.LayerProfile`, or one total time
            (F + B + W per microbatch, >= 0) per layer.
        num_ranks: ``R >= 1``.
        chunks_per_rank: ``v >= 1``; ``R·v`` must not exceed the number of layers.
        first_extra, last_extra: fixed time on the first / last chunk (default:
            the profile's, 0 for a list).
        pattern: ``"free"`` chooses the chunk → rank map; ``"interleaved"`` and
            ``"v"`` fix it and only move boundaries.
        chunk_weight: ``w >= 0``; minimise ``largest rank load + w × largest
            chunk`` instead of the largest rank load alone. A pipeline's fill and
            drain grow with its chunks (about ``(P − 1) ×`` a chunk for an
            interleaved order), so ``w ≈ (P − 1) / m`` trades a little balance for
            small chunks; 0 (the default) minimises the load only.
        seeds: more starting layouts, each the layers of every chunk (``R·v``
            counts >= 1 adding up to the layers). The result is no worse than any
            of them on the objective (with ``chunk_weight = 0``: its largest rank
            load is at most each seed's).
        restarts: annealing runs (step 4 of the module doc) from the local
            search's best; ``None``: the default 4; ``0``: the local search only
            (about a tenth of the time: the planner's choice for fixed templates,
            whose step it then simulates anyway).

    Returns:
        A :class:`ChunkPlacement`; ``placement`` has one entry per chunk.

    Raises:
        InvalidInputError: bad numbers, too few layers, or a seed that is not
            ``R·v`` counts >= 1 adding up to the layers.
    """
    chunk_weight = non_negative_float("chunk_weight", chunk_weight)
    ranks = positive_int("num_ranks", num_ranks)
    per_rank = positive_int("chunks_per_rank", chunks_per_rank)
    if pattern not in ("free", "interleaved", "v"):
        raise InvalidInputError(f"pattern must be 'free', 'interleaved' or 'v', got {pattern!r}")
    if isinstance(layer_costs, LayerProfile):
        times = layer_costs.total
        head = layer_costs.first_extra if first_extra is None else non_negative_float("first_extra", first_extra)
        tail = layer_costs.last_extra if last_extra is None else non_negative_float("last_extra", last_extra)
    else:
        times = np.asarray(finite_floats("layer_costs", layer_costs, allow_zero=True))
        head = 0.0 if first_extra is None else non_negative_float("first_extra", first_extra)
        tail = 0.0 if last_extra is None else non_negative_float("last_extra", last_extra)
    num_chunks = ranks * per_rank
    num_layers = len(times)
    if num_layers < num_chunks:
        raise InvalidInputError(
            f"num_ranks × chunks_per_rank = {num_chunks} chunks need at least that many layers, got {num_layers}"
        )
    prefix = np.concatenate([[0.0], np.cumsum(times)])
    extra = np.zeros(num_chunks)
    extra[0] += head
    extra[-1] += tail

    prefix_list, extra_list = prefix.tolist(), extra.tolist()  # plain floats: evaluated thousands of times

    def chunk_times(bounds: Sequence[int]) -> list[float]:
        return [prefix_list[bounds[c + 1]] - prefix_list[bounds[c]] + extra_list[c] for c in range(num_chunks)]

    fixed = None if pattern == "free" else fixed_pattern(pattern, ranks, per_rank)

    def evaluate(bounds: Sequence[int]) -> tuple[tuple[float, float], tuple[int, ...], list[float]]:
        values = chunk_times(bounds)
        owner = fixed if fixed is not None else _assign_free(values, ranks, per_rank)
        loads = [0.0] * ranks
        for chunk, rank in enumerate(owner):
            loads[rank] += values[chunk]
        top = max(loads) + chunk_weight * max(values) if chunk_weight else max(loads)
        return (top, sum(load * load for load in loads)), owner, loads

    move = None
    if fixed is not None:
        owned = [[c for c, rank in enumerate(fixed) if rank == r] for r in range(ranks)]

        def move(trial: Sequence[int], index: int, values: list[float], loads: list[float]
                 ) -> tuple[tuple[float, float], tuple[int, ...], list[float], list[float]]:
            """:func:`evaluate` of ``trial``, which moved boundary ``index`` of a layout with these values
            and loads: only chunks ``index - 1`` and ``index`` change, and only their ranks' loads (each
            summed afresh in chunk order, so every number is the one :func:`evaluate` gives)."""
            before, after = index - 1, index
            trial_values = list(values)
            trial_values[before] = prefix_list[trial[index]] - prefix_list[trial[before]] + extra_list[before]
            trial_values[after] = prefix_list[trial[index + 1]] - prefix_list[trial[index]] + extra_list[after]
            trial_loads = list(loads)
            first, second = fixed[before], fixed[after]
            load = 0.0
            for chunk in owned[first]:
                load += trial_values[chunk]
            trial_loads[first] = load
            if second != first:
                load = 0.0
                for chunk in owned[second]:
                    load += trial_values[chunk]
                trial_loads[second] = load
            top = max(trial_loads) + chunk_weight * max(trial_values) if chunk_weight else max(trial_loads)
            return (top, sum(map(mul, trial_loads, trial_loads))), fixed, trial_loads, trial_values

    starts = [_minmax_bounds(times, num_chunks, head, tail), _isolating_bounds(times, num_chunks, extra)]
    starts += [_seed_bounds(seed, num_chunks, num_layers) for seed in seeds]
    best = None
    for seed in starts:
        result = _improve(list(seed), evaluate, move, chunk_times)
        if best is None or result[0] < best[0]:
            best = result
    assert best is not None
    runs = _ANNEAL_RESTARTS if restarts is None else positive_int("restarts", restarts, minimum=0)
    if num_chunks > 2 and runs:
        start = list(best[1])
        scale = float(prefix[-1] + extra.sum()) / num_chunks
        owner = best[2]
        for restart in range(runs):
            annealed = _improve(_anneal(start, owner, prefix_list, extra_list, chunk_weight=chunk_weight,
                                        scale=scale, seed=restart), evaluate, move, chunk_times)
            if annealed[0] < best[0]:
                best = annealed
    key, bounds, owner, loads = best
    total = float(prefix[-1] + extra.sum())
    lightest = np.sort(times)[: per_rank - 1].sum() if per_rank > 1 else 0.0
    lower = max(total / ranks, float(times.max()) + float(lightest))
    values = chunk_times(bounds)
    return ChunkPlacement(
        layers_per_stage=tuple(int(bounds[c + 1] - bounds[c]) for c in range(num_chunks)),
        placement=tuple(int(r) for r in owner),
        stage_times=tuple(values),
        rank_loads=tuple(loads),
        lower_bound=lower,
    )


def _minmax_bounds(times: np.ndarray, num_chunks: int, head: float, tail: float) -> list[int]:
    from .solver import PartitionOptions, partition_layers

    options = PartitionOptions(first_extra=head, last_extra=tail, tie_break="none")
    result = partition_layers(times.tolist(), num_chunks, options)
    return list(result.boundaries)


def _seed_bounds(seed: Sequence[int], num_chunks: int, num_layers: int) -> list[int]:
    """The boundaries of a caller's layers per chunk, checked."""
    try:
        counts = [int(count) for count in seed]
    except (TypeError, ValueError):
        counts = []
    if len(counts) != num_chunks or min(counts) < 1 or sum(counts) != num_layers:
        raise InvalidInputError(
            f"seeds must be {num_chunks} layer counts >= 1 adding up to {num_layers} layers, got {list(seed)}"
        )
    return [0, *np.cumsum(counts).tolist()]


def _isolating_bounds(times: np.ndarray, num_chunks: int, extra: np.ndarray) -> list[int]:
    """Heavy layers (above the per-chunk average) alone; the rest cut evenly by time."""
    num_layers = len(times)
    average = (times.sum() + extra.sum()) / num_chunks
    cuts: set[int] = set()
    for index in np.flatnonzero(times > average):
        cuts.update((int(index), int(index) + 1))
    cuts.discard(0)
    cuts.discard(num_layers)
    prefix = np.concatenate([[0.0], np.cumsum(times)])
    targets = np.arange(1, num_chunks) * prefix[-1] / num_chunks
    for position in np.searchsorted(prefix, targets):
        if len(cuts) >= num_chunks - 1:
            break
        cuts.add(int(min(max(position, 1), num_layers - 1)))
    candidates = [p for p in range(1, num_layers) if p not in cuts]
    while len(cuts) < num_chunks - 1:
        cuts.add(candidates.pop(len(candidates) // 2))
    ordered = sorted(cuts)[: num_chunks - 1]
    return [0, *ordered, num_layers]


#: moves each annealing run tries (each costs one evaluation of the layout), and the
#: runs (seeds 0, 1, ...) from the local search's best; the best of them is kept
_ANNEAL_STEPS = 5_000
_ANNEAL_RESTARTS = 4
_SHIFTS_WIDE = (-2, -1, 1, 2)
_SHIFTS_NARROW = (-1, 1)


def _anneal(bounds: list[int], owner: Sequence[int], prefix: Sequence[float], extra: Sequence[float], *,
            chunk_weight: float, scale: float, steps: int | None = None, seed: int = 0) -> list[int]:
    """Simulated annealing over the boundaries with the chunk → rank map fixed; the best boundaries seen.

    The energy is the objective (largest rank load, plus ``chunk_weight`` × the
    largest chunk) plus a tenth of the loads' standard deviation, a gradient
    towards balance where the maximum is flat; the best layout is judged on the
    exact key (objective, sum of squared loads). ``scale`` (the mean chunk time)
    sets the starting temperature, half of it, which falls linearly to zero. A
    move changes only the chunks at its ends and between them, so each costs the
    chunks it touches plus a ``max`` over the loads and chunks.
    """
    steps = _ANNEAL_STEPS if steps is None else steps
    rng = random.Random(seed)
    last = len(bounds) - 1  # boundaries 1..last-1 move
    bounds = list(bounds)
    values = [prefix[bounds[c + 1]] - prefix[bounds[c]] + extra[c] for c in range(last)]
    loads = [0.0] * (max(owner) + 1)
    for chunk, rank in enumerate(owner):
        loads[rank] += values[chunk]
    count = len(loads)
    mean_square = (sum(loads) / count) ** 2  # the total never changes

    def measure(loads: list[float], values: list[float]) -> tuple[float, float, float]:
        top = max(loads) + chunk_weight * max(values) if chunk_weight else max(loads)
        squares = sum(map(mul, loads, loads))
        return top, squares, top + 0.1 * math.sqrt(max(squares / count - mean_square, 0.0))

    top, squares, current = measure(loads, values)
    best_key, best = (top, squares), list(bounds)
    # rng.randrange(a, b) and rng.choice(seq) draw a + below(b - a) and seq[below(len(seq))]: the same numbers
    below, uniform = rng._randbelow, rng.random  # type: ignore[attr-defined]
    span = last - 1
    for step in range(steps):
        temperature = 0.5 * scale * (1 - step / steps)
        if uniform() < 0.5:
            first = final = 1 + below(span)
            shift = _SHIFTS_WIDE[below(4)]
        else:
            first = 1 + below(span)
            final = first + below(last - first)
            shift = _SHIFTS_NARROW[below(2)]
        # boundaries first..final move together, so only the outer neighbours can collide
        if bounds[first] + shift <= bounds[first - 1] or bounds[final] + shift >= bounds[final + 1]:
            continue
        trial_values, trial_loads = list(values), list(loads)
        for chunk in range(first - 1, final + 1):
            lo = bounds[chunk] + (shift if chunk >= first else 0)
            hi = bounds[chunk + 1] + (shift if chunk + 1 <= final else 0)
            value = prefix[hi] - prefix[lo] + extra[chunk]
            trial_loads[owner[chunk]] += value - values[chunk]
            trial_values[chunk] = value
        trial_top, trial_squares, energy = measure(trial_loads, trial_values)
        if energy <= current or (temperature > 0 and uniform() < math.exp((current - energy) / temperature)):
            for index in range(first, final + 1):
                bounds[index] += shift
            values, loads, current = trial_values, trial_loads, energy
            if (trial_top, trial_squares) < best_key:
                best_key, best = (trial_top, trial_squares), list(bounds)
    return best


def _improve(bounds: list[int], evaluate: Any, move: Any = None, chunk_times: Any = None
             ) -> tuple[tuple[float, float], list[int], tuple[int, ...], list[float]]:
    """Move each boundary to its best position between its neighbours until nothing helps.

    ``move`` (with a fixed chunk → rank map): the same key, owner and loads as
    ``evaluate`` for a layout one boundary away, from the current chunk times
    (``chunk_times``) without recomputing the others.
    """
    key, owner, loads = evaluate(bounds)
    values = chunk_times(bounds) if move is not None else []
    improved = True
    while improved:
        improved = False
        for index in range(1, len(bounds) - 1):
            for position in range(bounds[index - 1] + 1, bounds[index + 1]):
                if position == bounds[index]:
                    continue
                trial = list(bounds)
                trial[index] = position
                if move is None:
                    trial_key, trial_owner, trial_loads = evaluate(trial)
                    trial_values = values
                else:
                    trial_key, trial_owner, trial_loads, trial_values = move(trial, index, values, loads)
                if trial_key < key:
                    key, bounds, owner, loads, values = trial_key, trial, trial_owner, trial_loads, trial_values
                    improved = True
    return key, bounds, owner, loads
