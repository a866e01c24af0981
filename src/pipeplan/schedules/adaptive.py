"""A schedule built for the given stage costs, placement and memory limit.

Fixed templates (1F1B, ZB-H1, interleaved, ...) assume equal stages. This
generator instead list-schedules the actual costs: it plays the step forward in
time and, whenever a rank is free, starts the most urgent action whose inputs
have arrived and whose activations fit the rank's memory limit. A split backward
lets ``W`` passes fill the gaps. Several priority rules are tried, and so is every
fixed template that applies to the placement; the fastest order that fits the
limit (simulated with the same costs and communication) wins, so the result is
never slower than the best template that fits::

    from pipeplan import StageCosts, simulate
    from pipeplan.schedules.adaptive import adaptive
    costs = StageCosts(forward=[30, 10, 10, 20])
    schedule = adaptive(4, 8, costs=costs, memory_limit=4)    # at most 4 microbatches per rank
    simulate(schedule, costs).makespan

Memory is in the costs' bytes (``activation_bytes``, ``weight_stash_bytes``); with
the default costs every stage's activations count 1 per microbatch, so the limit
is a count of in-flight (stage, microbatch) pairs per rank.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from .._validation import positive_float, positive_int
from ..costs import CommModel, StageCosts
from ..errors import DeadlockError, InfeasiblePlanError, InvalidInputError
from ..schedule import Action, Kind, Schedule, kinds_for, message_for
from ..simulate import simulate
from ..timeline import Timeline
from .gpipe import gpipe
from .interleaved import interleaved
from .one_f_one_b import one_f_one_b
from .zb_v import zb_v, zb_v_placement
from .zero_bubble import zb_h1, zb_h2

__all__ = [
    "adaptive",
    "adaptive_candidates",
    "Candidate",
    "minimum_memory_limit",
    "list_schedule",
    "sequential_schedule",
]

_TOLERANCE = 1e-9


class Candidate(NamedTuple):
    """One order the adaptive generator considered, with its simulated timeline.

    ``label`` names it: a template (``"1f1b"``, ``"zb-h1"``, ``"interleaved"``...) or
    a list-scheduling rule (``"list:BFW/microbatch/reserve/cost"``: kind order,
    forward tie-break, memory policy, forward window).
    ``fits`` tells whether its peak bytes on every rank stay within the limit.
    """

    label: str
    schedule: Schedule
    timeline: Timeline
    fits: bool


def minimum_memory_limit(costs: StageCosts, placement: Sequence[int]) -> float:
    """The smallest per-rank limit any order can fit: ``max_r Σ_{s on r} activation_bytes[s]``.

    Whatever the order, when a rank ends the forward of its deepest stage for some
    microbatch, that microbatch's activations are alive on all of the rank's
    stages (their backwards need that stage's backward first). Running one
    microbatch at a time reaches exactly this bound.
    """
    totals: dict[int, float] = {}
    for stage, rank in enumerate(placement):
        totals[rank] = totals.get(rank, 0.0) + costs.activation_bytes[stage]
    return max(totals.values())


def _check_placement(placement: Sequence[int] | None, num_stages: int) -> tuple[int, ...]:
    if placement is None:
        return tuple(range(num_stages))
    if isinstance(placement, np.ndarray):
        placement = placement.tolist()
    if isinstance(placement, (str, bytes)) or not isinstance(placement, Sequence):
        raise InvalidInputError(f"placement must be a list of ranks, one per stage, got {placement!r}")
    ranks = []
    for stage, rank in enumerate(placement):
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 0:
            raise InvalidInputError(f"placement[{stage}] must be a rank (an integer >= 0), got {rank!r}")
        ranks.append(int(rank))
    if len(ranks) != num_stages:
        raise InvalidInputError(
            f"placement has {len(ranks)} entries, expected {num_stages} (one rank per stage)"
        )
    missing = sorted(set(range(max(ranks) + 1)) - set(ranks))
    if missing:
        raise InvalidInputError(
            f"placement must use every rank 0..{max(ranks)}; rank {missing[0]} holds no stage"
        )
    return tuple(ranks)


# ------------------------------------------------------------------ list scheduling
_KIND_ORDERS = {"BFW": ("B", "F", "W"), "BWF": ("B", "W", "F"), "FBW": ("F", "B", "W")}
_FORWARD_KEYS: dict[str, Callable[[int, int], tuple[int, int]]] = {
    # Oldest microbatch first, its deepest stage first (depth-first).
    "microbatch": lambda stage, mb: (mb, -stage),
    # Deepest stage first: drive microbatches towards their backward.
    "deepest": lambda stage, mb: (-stage, mb),
    # Shallowest stage first: admit microbatches early (breadth-first).
    "shallowest": lambda stage, mb: (stage, mb),
}


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
        backward: ``"split"`` or ``"full"``.
        memory_limit: bytes per rank, or ``None`` for no limit.
        kind_order: priority of kinds, ``"BFW"`` (W only fills gaps), ``"BWF"`` or ``"FBW"``.
        forward_key: tie-break among forwards: ``"microbatch"``, ``"deepest"`` or ``"shallowest"``.
        reserve: admit a microbatch (its stage-0 forward) only when every rank has
            room for all of its chunks' activations; this can never deadlock.
            Without it a forward only needs room on its own rank, which can.
        forward_window: per stage, the most microbatches that may have run its
            ``F`` but not yet its backward (``B`` or ``I``; 1F1B's ``S − s``, say). It keeps a stage
            from spending its memory on forwards early in the step, which the
            zero-bubble schedules need; ``None`` for no window.

    Returns:
        The schedule (named ``"adaptive"``), or ``None`` when the rule deadlocks
        against the memory limit.
    """
    comm = comm or CommModel()
    num_stages = costs.num_stages
    num_mb = num_microbatches
    num_ranks = max(placement) + 1
    split = backward == "split"
    boundary = comm.boundary_times(num_stages)
    limit = math.inf if memory_limit is None else float(memory_limit) * (1 + _TOLERANCE) + _TOLERANCE
    act = costs.activation_bytes
    stash = costs.weight_stash_bytes if split else (0.0,) * num_stages
    need = [0.0] * num_ranks
    for stage, rank in enumerate(placement):
        need[rank] += act[stage]
    gradient = Kind.I if split else Kind.B  # the kind that sends the gradient upstream
    # In a kind order "B" names whichever backward sends the gradient (I when split).
    kind_rank = {Kind(k) if k != "B" else gradient: index for index, k in enumerate(_KIND_ORDERS[kind_order])}
    forward_rank = _FORWARD_KEYS[forward_key]
    last = num_stages - 1

    def delay(producer: Action, consumer: Action) -> float:
        message = message_for(producer, consumer, placement)
        return 0.0 if message is None else boundary[message.boundary]

    def priority(action: Action) -> tuple[int, int, int]:
        kind, stage, mb = action
        if kind == "F":
            return (kind_rank[Kind.F], *forward_rank(stage, mb))
        return (kind_rank[kind], mb, stage)

    def duration(action: Action) -> float:
        return costs.duration(action.kind, action.stage, action.microbatch)

    enabled: list[dict[Action, float]] = [{} for _ in range(num_ranks)]
    for mb in range(num_mb):
        enabled[placement[0]][Action("F", 0, mb)] = 0.0
    free = [0.0] * num_ranks
    held = [0.0] * num_ranks
    reserved = [0.0] * num_ranks
    orders: list[list[Action]] = [[] for _ in range(num_ranks)]
    total = num_stages * num_mb * (3 if split else 2)
    scheduled = 0

    open_forwards = [0] * num_stages  # per stage: F done, B not yet

    def fits(rank: int, action: Action) -> bool:
        if action.kind != "F":
            return True
        if forward_window is not None and open_forwards[action.stage] >= forward_window[action.stage]:
            return False
        if reserve:
            if action.stage != 0:
                return True
            return all(held[q] + reserved[q] + need[q] <= limit for q in range(num_ranks))
        return held[rank] + act[action.stage] <= limit

    def decide(rank: int) -> tuple[float, Action | None]:
        options = [(ready, a) for a, ready in enabled[rank].items() if fits(rank, a)]
        if not options:
            return math.inf, None
        when = max(free[rank], min(ready for ready, _ in options))
        # Inputs arriving within float noise of ``when`` count as ready (20/3 + 10/3 != 10).
        horizon = when + _TOLERANCE * max(1.0, abs(when))
        ready_at, best = min(((ready, a) for ready, a in options if ready <= horizon), key=lambda o: priority(o[1]))
        return max(when, ready_at), best

    decisions = [decide(rank) for rank in range(num_ranks)]
    while scheduled < total:
        rank = min(range(num_ranks), key=lambda r: decisions[r][0])
        when, action = decisions[rank]
        if action is None:
            return None
        kind, stage, mb = action
        finish = when + duration(action)
        del enabled[rank][action]
        orders[rank].append(action)
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
            if stage < last:
                consumer = Action(Kind.F, stage + 1, mb)
                target = placement[stage + 1]
                enabled[target][consumer] = finish + delay(action, consumer)
                touched.add(target)
            else:
                enabled[rank][Action(gradient, stage, mb)] = finish
        elif kind == gradient:
            held[rank] -= act[stage] - stash[stage]
            open_forwards[stage] -= 1
            if split:
                enabled[rank][Action("W", stage, mb)] = finish
            if stage > 0:
                consumer = Action(gradient, stage - 1, mb)
                target = placement[stage - 1]
                enabled[target][consumer] = finish + delay(action, consumer)
                touched.add(target)
        else:
            held[rank] -= stash[stage]
        if reserve:
            touched.add(placement[0])  # admission looks at every rank's memory
        for r in touched:
            decisions[r] = decide(r)
    return Schedule(orders, placement, num_mb, name="adaptive")


def sequential_schedule(
    num_stages: int, num_microbatches: int, placement: Sequence[int], *, backward: str = "split"
) -> Schedule:
    """One microbatch at a time: its forwards down, then its backwards up (each ``W`` right after its ``I``).

    The slowest order, but it fits :func:`minimum_memory_limit` and cannot deadlock
    even with rendezvous sends (every receiver has posted before its sender sends),
    so it is the adaptive generator's last resort.
    """
    num_ranks = max(placement) + 1
    orders: list[list[Action]] = [[] for _ in range(num_ranks)]
    for mb in range(num_microbatches):
        for stage in range(num_stages):
            orders[placement[stage]].append(Action("F", stage, mb))
        for stage in reversed(range(num_stages)):
            if backward == "split":
                orders[placement[stage]] += [Action("I", stage, mb), Action("W", stage, mb)]
            else:
                orders[placement[stage]].append(Action("B", stage, mb))
    return Schedule(orders, placement, num_microbatches, name="adaptive")


def _forward_windows(
    costs: StageCosts, placement: Sequence[int], comm: CommModel, backward: str
) -> dict[str, list[int] | None]:
    """Forward windows to try (see :func:`list_schedule`), by name, duplicates dropped.

    ``count``: 1F1B's ``S − s``; ``double``: ZB-H2's ``2(S − s) − 1``; ``cost``:
    ``1 + ⌈R_s / T⌉``, where ``R_s`` is the shortest time from the end of
    ``F(s, mb)`` to the start of its backward (the rest of the forward, the
    backward back up, the messages) and ``T`` the busiest rank's work per
    microbatch, the steady-state period: just enough forwards to keep stage ``s``
    busy while the first gradient comes back.
    """
    num_stages = costs.num_stages
    split = backward == "split"
    boundary = comm.boundary_times(num_stages)
    pieces = kinds_for("split" if split else "full")
    gradient = Kind.I if split else Kind.B
    work: dict[int, float] = {}
    for stage, rank in enumerate(placement):
        work[rank] = work.get(rank, 0.0) + sum(costs.duration(kind, stage, 0) for kind in pieces)
    period = max(work.values())
    cost_window = []
    for stage in range(num_stages):
        round_trip = 0.0
        for later in range(stage + 1, num_stages):
            round_trip += costs.duration(Kind.F, later, 0) + costs.duration(gradient, later, 0)
            if message_for(Action(Kind.F, later - 1, 0), Action(Kind.F, later, 0), placement) is not None:
                round_trip += 2 * boundary[later - 1]
        cost_window.append(1 + math.ceil(round_trip / period - _TOLERANCE))
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


# ------------------------------------------------------------------ templates
def _templates(
    num_stages: int, num_microbatches: int, placement: tuple[int, ...], backward: str
) -> list[tuple[str, Schedule]]:
    """Every fixed template whose placement is ``placement``."""
    out: list[tuple[str, Schedule]] = []
    num_ranks = max(placement) + 1
    if placement == tuple(range(num_stages)):
        out.append(("gpipe", gpipe(num_stages, num_microbatches, backward=backward)))  # type: ignore[arg-type]
        out.append(("1f1b", one_f_one_b(num_stages, num_microbatches, backward=backward)))  # type: ignore[arg-type]
        if backward == "split":
            out.append(("zb-h1", zb_h1(num_stages, num_microbatches)))
            out.append(("zb-h2", zb_h2(num_stages, num_microbatches)))
    if num_stages % num_ranks == 0 and num_stages > num_ranks:
        virtual = num_stages // num_ranks
        if placement == tuple(s % num_ranks for s in range(num_stages)):
            out.append(
                ("interleaved", interleaved(num_stages, num_microbatches, virtual_stages=virtual, backward=backward))  # type: ignore[arg-type]
            )
    if backward == "split" and num_stages == 2 * num_ranks and placement == tuple(zb_v_placement(num_ranks)):
        out.append(("zb-v", zb_v(num_stages, num_microbatches)))
    return out


def adaptive_candidates(
    num_stages: int,
    num_microbatches: int,
    *,
    costs: StageCosts | None = None,
    comm: CommModel | None = None,
    memory_limit: float | None = None,
    placement: Sequence[int] | None = None,
    backward: str = "split",
) -> list[Candidate]:
    """Every order :func:`adaptive` considers, each simulated with ``costs`` and ``comm``.

    Same arguments as :func:`adaptive`. Templates come first, then the
    list-scheduling rules that did not deadlock, then, only if none of those
    fits (or all deadlock on rendezvous sends), :func:`sequential_schedule`.
    """
    num_stages = positive_int("num_stages", num_stages)
    num_microbatches = positive_int("num_microbatches", num_microbatches)
    if costs is None:
        raise InvalidInputError(
            "the adaptive schedule needs costs=StageCosts(...) (it builds the order for those costs)"
        )
    if not isinstance(costs, StageCosts):
        raise InvalidInputError(f"costs must be a StageCosts, got {type(costs).__name__}")
    costs.check_shape(num_stages, num_microbatches)
    if backward not in ("split", "full"):
        raise InvalidInputError(f"backward must be 'split' or 'full' for the adaptive schedule, got {backward!r}")
    if memory_limit is not None:
        memory_limit = positive_float("memory_limit", memory_limit, unit="bytes", allow_inf=True)
    ranks = _check_placement(placement, num_stages)
    comm = comm or CommModel()
    comm.boundary_times(num_stages)  # raises on a boundary_bytes list of the wrong length
    if memory_limit is not None:
        smallest = minimum_memory_limit(costs, ranks)
        if memory_limit < smallest * (1 - _TOLERANCE):
            raise InfeasiblePlanError(
                f"memory_limit = {memory_limit:g} bytes per rank fits no order; the smallest limit that "
                f"works is {smallest:g} (one microbatch's activations on every stage of the fullest rank)"
            )
    bound = math.inf if memory_limit is None else memory_limit * (1 + _TOLERANCE) + _TOLERANCE

    candidates: list[Candidate] = []

    def consider(label: str, schedule: Schedule) -> None:
        try:
            timeline = simulate(schedule, costs, comm)
        except DeadlockError:  # rendezvous sends that wait on each other
            return
        candidates.append(Candidate(label, schedule, timeline, max(timeline.peak_bytes) <= bound))

    for label, schedule in _templates(num_stages, num_microbatches, ranks, backward):
        consider(label, schedule)
    if backward == "split":
        # A full backward sends its gradient only after the weight part; under blocking
        # sends that can beat any split order, so the full templates are a floor too.
        for label, schedule in _templates(num_stages, num_microbatches, ranks, "full"):
            consider(f"{label} (full backward)", schedule)
    kind_orders = ("BFW", "BWF", "FBW") if backward == "split" else ("BFW", "FBW")
    # With one stage per rank a rank's forwards are all of one stage: the tie-breaks agree.
    forward_keys = list(_FORWARD_KEYS) if len(set(ranks)) < num_stages else ["microbatch"]
    windows = _forward_windows(costs, ranks, comm, backward)
    for kind_order in kind_orders:
        for forward_key in forward_keys:
            for window_name, window in windows.items():
                for reserve in (True, False):
                    if reserve and memory_limit is None:
                        continue  # without a limit reservation changes nothing
                    built = list_schedule(
                        num_microbatches, costs, ranks, comm=comm, backward=backward,
                        memory_limit=memory_limit, kind_order=kind_order, forward_key=forward_key,
                        reserve=reserve, forward_window=window,
                    )
                    if built is not None:
                        mode = "reserve" if reserve else "free"
                        consider(f"list:{kind_order}/{forward_key}/{mode}/{window_name}", built)
    if not any(c.fits for c in candidates):
        consider("sequential", sequential_schedule(num_stages, num_microbatches, ranks, backward=backward))
    return candidates


def adaptive(
    num_stages: int,
    num_microbatches: int,
    *,
    costs: StageCosts | None = None,
    comm: CommModel | None = None,
    memory_limit: float | None = None,
    placement: Sequence[int] | None = None,
    backward: str = "split",
) -> Schedule:
    """Build the fastest order found for these costs that fits the memory limit.

    Args:
        num_stages: model stages ``S`` (must match ``costs``).
        num_microbatches: microbatches per step (``m >= 1``).
        costs: per-stage costs (required).
        comm: communication model used to judge the orders (``None``: free).
        memory_limit: activation bytes each rank may hold, counted as the
            Timeline does (``activation_bytes`` until ``B`` or ``I``, ``weight_stash_bytes``
            until ``W``); ``None`` for no limit.
        placement: stage → rank, any map that uses every rank 0..P−1; default one
            stage per rank.
        backward: ``"split"`` (``I`` and ``W`` may be scheduled apart) or ``"full"`` (``B``).
            With ``"split"`` the full-backward templates are candidates too, and the
            result is a full-backward schedule when one of them is fastest (this
            happens with rendezvous sends, where a split rank blocks in the send of
            its ``I`` before it can run ``W``).

    Returns:
        A schedule named ``"adaptive"`` whose simulated makespan under ``costs``
        and ``comm`` is no longer than that of any fixed template for this
        placement that fits the limit (gpipe, 1f1b, zb-h1, zb-h2, interleaved,
        zb-v, whichever apply, with a split or full backward), and whose peak bytes
        per rank stay within the limit.

    Raises:
        InvalidInputError: missing costs, a bad placement or limit.
        InfeasiblePlanError: the limit is below :func:`minimum_memory_limit`,
            the smallest that any order fits (named in the message).
    """
    candidates = adaptive_candidates(
        num_stages, num_microbatches, costs=costs, comm=comm, memory_limit=memory_limit,
        placement=placement, backward=backward,
    )
    fitting = [c for c in candidates if c.fits]
    if not fitting:  # unreachable while the sequential order fits the minimum limit; kept as a guard
        raise InfeasiblePlanError(
            f"no order of {num_microbatches} microbatches fits memory_limit = {memory_limit!r} bytes per rank "
            "without deadlocking"
        )
    fastest = min(c.timeline.makespan for c in fitting)
    # Among the orders as fast as the fastest (up to float noise), keep the leanest.
    tied = [c for c in fitting if c.timeline.makespan <= fastest * (1 + _TOLERANCE) + _TOLERANCE]
    best = min(tied, key=lambda c: max(c.timeline.peak_bytes))
    chosen = best.schedule
    return Schedule(chosen.orders, chosen.placement, chosen.num_microbatches, name="adaptive")
