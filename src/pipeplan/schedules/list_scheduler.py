"""List scheduling on the actual costs: the orders the adaptive generator starts from.

:func:`list_schedule` plays a step forward in time and, whenever a rank is free,
starts the most urgent action whose inputs have arrived and whose activations fit
the rank's memory limit. :func:`sequential_schedule` runs one microbatch at a time
(the leanest order, the last resort). :func:`forward_windows` proposes how many
forwards each stage may keep open::

    from pipeplan import StageCosts
    from pipeplan.schedules.list_scheduler import list_schedule
    schedule = list_schedule(8, StageCosts(forward=[30, 10, 10, 20]), [0, 1, 2, 3], memory_limit=4)

Memory is in the costs' bytes (``activation_bytes`` from the end of ``F`` to the end
of the backward, ``weight_stash_bytes`` from there to the end of ``W``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from ..costs import CommModel, StageCosts
from ..errors import InvalidInputError
from ..schedule import Action, Kind, Schedule, message_for

__all__ = ["list_schedule", "sequential_schedule", "forward_windows", "KIND_ORDERS", "FORWARD_KEYS"]

TOLERANCE = 1e-9
"""Relative slack for float comparisons of times and bytes (``20/3 + 10/3 != 10``)."""

KIND_ORDERS: dict[str, tuple[str, str, str]] = {
    "BFW": ("B", "F", "W"),  # W only fills gaps
    "FBW": ("F", "B", "W"),  # forwards first: admit microbatches eagerly
}
"""Priority of kinds (``B`` stands for the backward, full or input-gradient)."""

FORWARD_KEYS: dict[str, Callable[[int, int], tuple[int, int]]] = {
    # Oldest microbatch first, its deepest stage first (depth-first).
    "microbatch": lambda stage, mb: (mb, -stage),
    # Deepest stage first: drive microbatches towards their backward.
    "deepest": lambda stage, mb: (-stage, mb),
    # Shallowest stage first: admit microbatches early (breadth-first).
    "shallowest": lambda stage, mb: (stage, mb),
}
"""Tie-breaks among the forwards a rank may start (they differ only with several stages per rank)."""


def list_schedule(
    num_microbatches: int,
    costs: StageCosts,
    placement: Sequence[int],
    *,
    comm: CommModel | None = None,
    backward: str = "split",
    memory_limit: float | None = None,
    kind_order: str = "BFW",
    forward_key: str = "microbatch",
    reserve: bool = True,
    forward_window: Sequence[int] | None = None,
) -> Schedule | None:
    """Build one order by non-delay list scheduling on the actual costs.

    Time advances rank by rank: the rank that can start something earliest starts
    the action with the best priority among those whose inputs have arrived
    (messages cost ``comm``'s eager time) and whose activations fit its limit.

    Args:
        num_microbatches: microbatches per step.
        costs: per-stage costs (``costs.num_stages`` stages).
        placement: stage → rank.
        comm: communication model (eager timing is used for the decisions).
        backward: ``"split"`` (input-gradient backward and ``W`` apart) or ``"full"``.
        memory_limit: bytes per rank, or ``None`` for no limit.
        kind_order: priority of kinds, a key of :data:`KIND_ORDERS`.
        forward_key: tie-break among forwards, a key of :data:`FORWARD_KEYS`.
        reserve: admit a microbatch (its stage-0 forward) only when every rank has
            room for all of its chunks' activations; this can never deadlock.
            Without it a forward only needs room on its own rank, which can.
        forward_window: per stage, the most microbatches that may have run its
            ``F`` but not yet its backward (1F1B's ``S − s``, say); ``None`` for no window.

    Returns:
        The schedule (named ``"adaptive"``), or ``None`` when the rule deadlocks
        against the memory limit.
    """
    if kind_order not in KIND_ORDERS:
        raise InvalidInputError(f"kind_order must be one of {', '.join(KIND_ORDERS)}, got {kind_order!r}")
    if forward_key not in FORWARD_KEYS:
        raise InvalidInputError(f"forward_key must be one of {', '.join(FORWARD_KEYS)}, got {forward_key!r}")
    comm = comm or CommModel()
    num_stages = costs.num_stages
    num_mb = num_microbatches
    num_ranks = max(placement) + 1
    split = backward == "split"
    gradient = Kind.I if split else Kind.B  # the backward that sends the gradient upstream
    boundary = comm.boundary_times(num_stages)
    # Message time of the edge from each stage to its successor (0 on one rank), from the one owner.
    down_delay = [_edge_time(Action(Kind.F, s, 0), Action(Kind.F, s + 1, 0), placement, boundary)
                  for s in range(num_stages - 1)]
    up_delay = [_edge_time(Action(gradient, s + 1, 0), Action(gradient, s, 0), placement, boundary)
                for s in range(num_stages - 1)]
    limit = math.inf if memory_limit is None else float(memory_limit) * (1 + TOLERANCE) + TOLERANCE
    act = costs.activation_bytes
    stash = costs.weight_stash_bytes if split else (0.0,) * num_stages
    need = [0.0] * num_ranks
    for stage, rank in enumerate(placement):
        need[rank] += act[stage]
    kind_rank = {kind: index for index, kind in enumerate(KIND_ORDERS[kind_order])}
    rank_f, rank_b, rank_w = kind_rank["F"], kind_rank["B"], kind_rank["W"]
    forward_rank = FORWARD_KEYS[forward_key]
    last = num_stages - 1
    window = list(forward_window) if forward_window is not None else [num_mb + 1] * num_stages
    first_rank = placement[0]

    # Per rank: enabled forwards and backwards {(kind, stage, mb): (ready time, priority, key)}; W's wait
    # in a heap by (mb, stage) and are ready as soon as they are enabled (their backward
    # ran on the same rank), so they never need a ready time.
    enabled: list[dict[tuple[str, int, int], tuple[float, tuple[int, int, int], tuple[str, int, int]]]] = [
        {} for _ in range(num_ranks)
    ]
    weights: list[list[tuple[int, int]]] = [[] for _ in range(num_ranks)]
    next_admit = 1  # stage-0 forwards are admitted in microbatch order
    free = [0.0] * num_ranks
    held = [0.0] * num_ranks
    reserved = [0.0] * num_ranks
    orders: list[list[Action]] = [[] for _ in range(num_ranks)]
    total = num_stages * num_mb * (3 if split else 2)
    scheduled = 0
    open_forwards = [0] * num_stages  # per stage: F done, backward not yet
    admission_ok = True

    def admission() -> bool:
        return all(held[q] + reserved[q] + need[q] <= limit for q in range(num_ranks))

    def fits(rank: int, stage: int) -> bool:
        if open_forwards[stage] >= window[stage]:
            return False
        if reserve:
            return stage != 0 or admission_ok
        return held[rank] + act[stage] <= limit

    def decide(rank: int) -> tuple[float, tuple[str, int, int] | None]:
        # two passes over the rank's enabled actions, no list built: this runs about
        # twice per scheduled action and dominates the generator's time
        best: tuple[str, int, int] | None = None
        best_prio: tuple[int, int, int] | None = None
        entries = enabled[rank]
        heap = weights[rank]
        when = free[rank]
        if not heap:
            earliest = math.inf
            for key, entry in entries.items():
                if entry[0] < earliest and (key[0] != "F" or fits(rank, key[1])):
                    earliest = entry[0]
            if earliest == math.inf:
                return math.inf, None
            when = max(when, earliest)
        horizon = when + TOLERANCE * max(1.0, abs(when))
        ready_at = when
        for key, (ready, prio, _) in entries.items():
            if ready <= horizon and (best_prio is None or prio < best_prio) and (key[0] != "F" or fits(rank, key[1])):
                best, best_prio, ready_at = key, prio, ready
        if heap:
            mb, stage = heap[0]
            if best_prio is None or (rank_w, mb, stage) < best_prio:
                best, ready_at = ("W", stage, mb), when
        return max(when, ready_at), best

    def enable(rank: int, key: tuple[str, int, int], ready: float) -> None:
        kind, stage, mb = key
        prio = (rank_f, *forward_rank(stage, mb)) if kind == "F" else (rank_b, mb, stage)
        enabled[rank][key] = (ready, prio, key)

    kinds = {"F": Kind.F, "W": Kind.W}
    if num_mb:
        enable(first_rank, ("F", 0, 0), 0.0)
    decisions = [decide(rank) for rank in range(num_ranks)]
    # The rank that can start something first goes next (lowest rank on ties): a heap of
    # (time, rank, version) whose stale entries are skipped.
    versions = [0] * num_ranks
    agenda = [(decisions[r][0], r, 0) for r in range(num_ranks)]
    heapq.heapify(agenda)
    while scheduled < total:
        when, rank, version = heapq.heappop(agenda)
        if version != versions[rank]:
            continue
        chosen = decisions[rank][1]
        if chosen is None:
            return None
        kind, stage, mb = chosen
        real_kind = gradient if kind == "B" else kinds[kind]
        finish = when + costs.duration(real_kind, stage, mb)
        if kind == "W":
            heapq.heappop(weights[rank])
        else:
            del enabled[rank][chosen]
        orders[rank].append(Action(real_kind, stage, mb))
        scheduled += 1
        free[rank] = finish
        touched = {rank}
        if kind == "F":
            if reserve:
                if stage == 0:
                    for q in range(num_ranks):
                        reserved[q] += need[q]
                reserved[rank] -= act[stage]
            held[rank] += act[stage]
            open_forwards[stage] += 1
            if stage == 0 and next_admit < num_mb:
                enable(first_rank, ("F", 0, next_admit), finish)
                next_admit += 1
            if stage < last:
                target = placement[stage + 1]
                enable(target, ("F", stage + 1, mb), finish + down_delay[stage])
                touched.add(target)
            else:
                enable(rank, ("B", stage, mb), finish)
        elif kind == "B":
            held[rank] -= act[stage] - stash[stage]
            open_forwards[stage] -= 1
            if split:
                heapq.heappush(weights[rank], (mb, stage))
            if stage > 0:
                target = placement[stage - 1]
                enable(target, ("B", stage - 1, mb), finish + up_delay[stage - 1])
                touched.add(target)
        else:
            held[rank] -= stash[stage]
        if reserve:
            admission_ok = admission()
            touched.add(first_rank)  # admission looks at every rank's memory
        for r in touched:
            decisions[r] = decide(r)
            versions[r] += 1
            heapq.heappush(agenda, (decisions[r][0], r, versions[r]))
    return Schedule(orders, placement, num_mb, name="adaptive")


def _edge_time(producer: Action, consumer: Action, placement: Sequence[int], boundary: Sequence[float]) -> float:
    """Eager message time of one edge: the boundary's time when it crosses ranks, else 0."""
    message = message_for(producer, consumer, placement)
    return 0.0 if message is None else boundary[message.boundary]


def sequential_schedule(
    num_stages: int, num_microbatches: int, placement: Sequence[int], *, backward: str = "split"
) -> Schedule:
    """One microbatch at a time: its forwards down, then its backwards up (each ``W`` after its backward).

    The slowest order, but it fits the smallest memory limit any order fits and cannot
    deadlock even with rendezvous sends (every receiver has posted before its sender
    sends), so it is the adaptive generator's last resort.
    """
    num_ranks = max(placement) + 1
    gradient = Kind.I if backward == "split" else Kind.B
    orders: list[list[Action]] = [[] for _ in range(num_ranks)]
    for mb in range(num_microbatches):
        for stage in range(num_stages):
            orders[placement[stage]].append(Action(Kind.F, stage, mb))
        for stage in reversed(range(num_stages)):
            orders[placement[stage]].append(Action(gradient, stage, mb))
            if backward == "split":
                orders[placement[stage]].append(Action(Kind.W, stage, mb))
    return Schedule(orders, placement, num_microbatches, name="adaptive")


def forward_windows(
    costs: StageCosts, placement: Sequence[int], comm: CommModel, backward: str
) -> dict[str, list[int] | None]:
    """Forward windows to try (see :func:`list_schedule`), by name, duplicates dropped.

    ``open``: none. ``count``: 1F1B's ``S − s``. ``double``: ZB-H2's ``2(S − s) − 1``.
    ``cost``: ``1 + ⌈R_s / T⌉``, where ``R_s`` is the shortest time from the end of
    ``F(s, mb)`` to the start of its backward (the rest of the forward, the backward
    back up, the messages) and ``T`` the busiest rank's work per microbatch, the
    steady-state period: just enough forwards to keep stage ``s`` busy while the
    first gradient comes back.
    """
    num_stages = costs.num_stages
    split = backward == "split"
    gradient = Kind.I if split else Kind.B
    boundary = comm.boundary_times(num_stages)
    work: dict[int, float] = {}
    pieces = (Kind.F, gradient, Kind.W) if split else (Kind.F, gradient)
    for stage, rank in enumerate(placement):
        work[rank] = work.get(rank, 0.0) + sum(costs.duration(kind, stage, 0) for kind in pieces)
    period = max(work.values())
    cost_window = []
    for stage in range(num_stages):
        round_trip = 0.0
        for later in range(stage + 1, num_stages):
            round_trip += costs.duration(Kind.F, later, 0) + costs.duration(gradient, later, 0)
            round_trip += _edge_time(Action(Kind.F, later - 1, 0), Action(Kind.F, later, 0), placement, boundary)
            round_trip += _edge_time(Action(gradient, later, 0), Action(gradient, later - 1, 0), placement, boundary)
        cost_window.append(1 + math.ceil(round_trip / period - TOLERANCE))
    candidates: dict[str, list[int] | None] = {
        "open": None,
        "count": [num_stages - s for s in range(num_stages)],
        "double": [2 * (num_stages - s) - 1 for s in range(num_stages)],
        "cost": cost_window,
    }
    out: dict[str, list[int] | None] = {}
    for name, window in candidates.items():
        if window not in out.values():
            out[name] = window
    return out
