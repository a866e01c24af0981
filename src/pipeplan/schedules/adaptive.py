"""A schedule built for the given stage costs, placement, memory limit and objective.

Fixed templates (1F1B, ZB-H1, interleaved, ...) assume equal stages. This
generator instead list-schedules the actual costs
(:mod:`~pipeplan.schedules.list_scheduler`): it plays the step forward in time and,
whenever a rank is free, starts the most urgent action whose inputs have arrived
and whose activations fit the rank's memory limit. A split backward lets ``W``
passes fill the gaps. Several priority rules are tried, and so is every fixed
template that applies to the placement; the few best orders under the objective
that fit the limit (simulated with the same costs and communication) are then
repaired by :func:`~pipeplan.schedules.refine.refine` and the best result kept, so
it is never worse than any candidate, the templates that fit included::

    from pipeplan import StageCosts, simulate
    from pipeplan.schedules.adaptive import adaptive
    costs = StageCosts(forward=[30, 10, 10, 20])
    schedule = adaptive(4, 8, costs=costs, memory_limit=4)    # at most 4 microbatches per rank
    simulate(schedule, costs).makespan

Objectives: ``"makespan"`` (the step's end; what counts when the optimizer step
waits for every rank) and ``"span"`` (the largest per-rank span, the zero-bubble
paper's metric; what counts when each rank starts its optimizer step as soon as
its own part is done). Orders are compared on the objective with a relative
tolerance, then on the other metric, then on peak bytes.

``effort="fast"`` tries the templates and only the few list rules that won on
chunked placements (several stages per rank), without the repair: the planner
uses it there, where the full set costs seconds per order
(``benchmarks/planner.py``).

Memory is in the costs' bytes (``activation_bytes``, ``weight_stash_bytes``); with
the default costs every stage's activations count 1 per microbatch, so the limit
is a count of in-flight (stage, microbatch) pairs per rank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .._validation import positive_float, positive_int
from ..costs import CommModel, StageCosts
from ..errors import DeadlockError, InfeasiblePlanError, InvalidInputError
from ..schedule import Action, Schedule
from ..simulate import simulate
from ..timeline import Timeline
from .list_scheduler import FORWARD_KEYS, forward_windows, list_schedule, sequential_schedule
from .refine import Objective, objective_value, refine
from .gpipe import gpipe
from .interleaved import interleaved
from .one_f_one_b import one_f_one_b
from .patterns import loop_placement, v_placement
from .zb_v import zb_v
from .zero_bubble import zb_h1, zb_h2

__all__ = [
    "ADAPTIVE_BYTES_PER_ACTION",
    "adaptive",
    "adaptive_candidates",
    "best_candidate",
    "Candidate",
    "minimum_memory_limit",
    "list_schedule",
    "sequential_schedule",
]

_TOLERANCE = 1e-9

#: Memory its build needs per action: it builds and simulates ~15 candidate orders, measured
#: 3,371 B per action by ``benchmarks/action_memory.py`` (docs/simulator.md), rounded up.
ADAPTIVE_BYTES_PER_ACTION = 3800


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
        if placement == loop_placement(num_ranks, virtual):
            out.append(
                ("interleaved", interleaved(num_stages, num_microbatches, virtual_stages=virtual, backward=backward))  # type: ignore[arg-type]
            )
    if backward == "split" and num_stages == 2 * num_ranks and placement == v_placement(num_ranks):
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
    effort: str = "full",
) -> list[Candidate]:
    """Every order :func:`adaptive` considers before repair, each simulated with ``costs`` and ``comm``.

    Same arguments as :func:`adaptive`. Templates come first, then the
    list-scheduling rules that did not deadlock, then, only if none of those
    fits (or all deadlock on rendezvous sends), :func:`sequential_schedule`.
    """
    num_stages, num_microbatches, costs, comm, memory_limit, ranks = _check(
        num_stages, num_microbatches, costs, comm, memory_limit, placement, backward
    )
    bound = math.inf if memory_limit is None else memory_limit * (1 + _TOLERANCE) + _TOLERANCE
    candidates: list[Candidate] = []

    def consider(label: str, schedule: Schedule) -> None:
        try:
            timeline = simulate(schedule, costs, comm, validate=False)
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
    windows = forward_windows(costs, ranks, comm, backward, memory_limit)
    actions = num_stages * num_microbatches * (3 if backward == "split" else 2)
    for kind_order, forward_key, window_name, reserve, defer in _rules(ranks, num_stages, memory_limit, effort,
                                                                       actions):
        if window_name not in windows or (defer and backward != "split"):
            continue  # the same window as another for these costs; nothing to defer
        window = windows[window_name]
        built = list_schedule(
            num_microbatches, costs, ranks, comm=comm, backward=backward,
            memory_limit=memory_limit, kind_order=kind_order, forward_key=forward_key,
            reserve=reserve, forward_window=window, defer_weights=defer,
        )
        if built is not None:
            mode = "reserve" if reserve else "free"
            consider(f"list:{kind_order}/{forward_key}/{mode}/{window_name}{'/defer' if defer else ''}", built)
    if not any(c.fits for c in candidates):
        consider("sequential", sequential_schedule(num_stages, num_microbatches, ranks, backward=backward))
    return candidates


#: ``effort="fast"``: four rules that on the planner's 67 chunked layouts of the presets,
#: under its memory limits, come within 0.2 % of the best of every rule, 0.01 % on
#: average (``python benchmarks/adaptive_rules.py --planner``; 0.8 % and 0.03 % with
#: the whole memory as the limit, where three rules came within only 3.5 %)
_FAST_RULES = (("FBW", "microbatch", "count"), ("BFW", "microbatch", "count"),
               ("FBW", "microbatch", "double"), ("BFW", "microbatch", "open"))


#: Above this many actions ``effort="full"`` tries :data:`_LARGE_RULES` (one stage per rank)
#: or the fast rules and the ``zb`` window (chunked placements) instead of every rule.
LARGE_ACTIONS = 6000

#: On 6 problems at P = 32, m = 128 (uniform 1.5B-row costs and random unequal ones, limits
#: p and 2p microbatches; ``python benchmarks/adaptive_rules.py --large``) these rules and
#: the templates hold every problem's best order of all rules, on both objectives.
_LARGE_RULES = (("BFW", "microbatch", "double"), ("FBW", "microbatch", "double"),
                ("FBW", "microbatch", "zb"), ("BFW", "microbatch", "open"), ("FBW", "microbatch", "cost"))


#: One stage per rank: the smallest set of rules found (greedy cover) that holds the best
#: order of every rule on 107 problems of ``benchmarks/adaptive_rules.py --cover``
#: (issue 23's 80-problem corpus and the one-stage-per-rank problems of the rules corpus),
#: both objectives, before the repair: ``(kind order, window, reserve)``.
_ONE_PER_RANK_RULES = (("BFW", "open", False), ("FBW", "cost", False), ("FBW", "fill", False),
                       ("FBW", "count", False), ("ALT", "count", True), ("ALT", "double", False),
                       ("FBW", "zb", False), ("FBW", "double", False))

#: Several stages per rank: the rules of before issue 23 (B > F > W and F > B > W, every
#: forward key, the open, count, double and cost windows, both memory policies) and the two
#: rules of the cover on its 53 chunked problems that are not among them.
_CHUNKED_EXTRA = (("FBW", "deepest", "zb", True), ("ALT", "shallowest", "open", False))


def _rules(
    ranks: tuple[int, ...], num_stages: int, memory_limit: float | None, effort: str = "full",
    num_actions: int = 0,
) -> list[tuple[str, str, str, bool, bool]]:
    """The list-scheduling rules tried: ``(kind order, forward key, window, reserve, defer W)``.

    One stage per rank: :data:`_ONE_PER_RANK_RULES` (a rank's forwards are all of one
    stage, so the forward tie-breaks agree); several: the rules listed at
    :data:`_CHUNKED_EXTRA`. Above :data:`LARGE_ACTIONS`, :data:`_LARGE_RULES` or the
    fast rules and the ``zb`` window. Without a limit reservation changes nothing
    (those rules run free, once). ``effort="fast"``: :data:`_FAST_RULES` without
    reservation, and the first of them with it when there is a limit. No rule defers
    ``W`` (``list_schedule(defer_weights=True)``): it never won alone on the rules corpus.
    """
    one_per_rank = len(set(ranks)) == num_stages
    if effort == "full" and num_actions > LARGE_ACTIONS:
        if one_per_rank:
            return [(kind, key, window, False, False) for kind, key, window in _LARGE_RULES]
        return _rules(ranks, num_stages, memory_limit, "fast") + [("FBW", "microbatch", "zb", False, False)]
    if effort == "fast":  # each rule free, and the first one reserving where a limit binds
        fast = [(kind, key, window, False, False) for kind, key, window in _FAST_RULES]
        return fast + [(*_FAST_RULES[0], True, False)] if memory_limit is not None else fast
    if one_per_rank:
        rules = [(kind, "microbatch", window, reserve) for kind, window, reserve in _ONE_PER_RANK_RULES]
    else:
        rules = [(kind, key, window, reserve) for kind in ("BFW", "FBW") for key in FORWARD_KEYS
                 for window in ("open", "count", "double", "cost") for reserve in (True, False)]
        rules += list(_CHUNKED_EXTRA)
    out: list[tuple[str, str, str, bool, bool]] = []
    for kind, key, window, reserve in rules:
        rule = (kind, key, window, reserve and memory_limit is not None, False)
        if rule not in out:
            out.append(rule)
    return out


def _check(
    num_stages: int,
    num_microbatches: int,
    costs: StageCosts | None,
    comm: CommModel | None,
    memory_limit: float | None,
    placement: Sequence[int] | None,
    backward: str,
) -> tuple[int, int, StageCosts, CommModel, float | None, tuple[int, ...]]:
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
    if not isinstance(comm, CommModel):
        raise InvalidInputError(f"comm must be a CommModel, got {type(comm).__name__}")
    comm.boundary_times(num_stages)  # raises on a boundary_bytes list of the wrong length
    if memory_limit is not None:
        smallest = minimum_memory_limit(costs, ranks)
        if memory_limit < smallest * (1 - _TOLERANCE):
            raise InfeasiblePlanError(
                f"memory_limit = {memory_limit:g} bytes per rank fits no order; the smallest limit that "
                f"works is {smallest:g} (one microbatch's activations on every stage of the fullest rank)"
            )
    return num_stages, num_microbatches, costs, comm, memory_limit, ranks


def _rank_key(candidate: Candidate, objective: Objective) -> tuple[float, float, float]:
    timeline = candidate.timeline
    other: Objective = "span" if objective == "makespan" else "makespan"
    return (
        objective_value(timeline, objective),
        objective_value(timeline, other),
        float(max(timeline.peak_bytes)),
    )


def best_candidate(candidates: Sequence[Candidate], objective: Objective = "makespan") -> Candidate:
    """The fitting candidate that is best under ``objective``.

    Compared on the objective up to a relative tolerance of 1e-9, then on the other
    metric (makespan or span) up to the same tolerance, then on peak bytes per rank.
    """
    pool = [c for c in candidates if c.fits]
    for level in range(3):
        target = min(_rank_key(c, objective)[level] for c in pool)
        slack = _TOLERANCE * max(1.0, abs(target))
        pool = [c for c in pool if _rank_key(c, objective)[level] <= target + slack]
    return pool[0]


#: How many of the best distinct fitting orders are repaired (the best of the results wins).
#: Repairing only the best one lost to the zero-bubble heuristic where a second-best order
#: repaired better (issue 23). ``python benchmarks/adaptive_rules.py --repairs`` (60 problems,
#: both objectives): k = 2 improves 7 of 120 results on k = 1, k = 4 14 (by up to 1.6 %),
#: at 1.4x and 2.4x the CPU time.
REPAIRS = 4


def repair_count(num_actions: int) -> int:
    """How many candidates :func:`adaptive` repairs for an order of ``num_actions`` actions.

    :data:`REPAIRS`, fewer on large orders (each repair costs up to
    :func:`~pipeplan.schedules.refine.default_evaluations` simulations): about 12,000
    actions' worth, at least one. At P = 32, m = 128 repairing the three best orders
    bettered none of 6 problems' best (``benchmarks/adaptive_rules.py --large``).
    """
    return max(1, min(REPAIRS, 12_000 // max(1, num_actions)))


def _distinct_best(candidates: Sequence[Candidate], objective: Objective, count: int) -> list[Candidate]:
    """The ``count`` best fitting candidates under ``objective``, one per distinct order."""
    ranked = sorted((c for c in candidates if c.fits), key=lambda c: _rank_key(c, objective))
    out: list[Candidate] = []
    seen: set[tuple[tuple[Action, ...], ...]] = set()
    for candidate in ranked:
        orders = tuple(tuple(order) for order in candidate.schedule.orders)
        if orders not in seen:
            seen.add(orders)
            out.append(candidate)
            if len(out) == count:
                break
    return out


def _repaired_best(candidates: Sequence[Candidate], costs: StageCosts, comm: CommModel | None,
                   memory_limit: float | None, objective: Objective, evaluations: int | None) -> Schedule:
    """Repair the best few distinct fitting orders and return the best result.

    The result is never worse under ``objective`` (then the other metric) than any
    candidate: the best candidate is among those repaired, and repair never worsens.
    """
    count = 1 if evaluations == 0 else repair_count(candidates[0].schedule.num_actions)
    pool = _distinct_best(candidates, objective, count)
    repaired = []
    for candidate in pool:
        schedule, timeline = refine(candidate.schedule, costs, comm, memory_limit=memory_limit,
                                    objective=objective, max_evaluations=evaluations, timeline=candidate.timeline)
        repaired.append(Candidate(candidate.label, schedule, timeline, True))
    return best_candidate([*repaired, *candidates], objective).schedule  # ties: the leanest of all


def adaptive(
    num_stages: int,
    num_microbatches: int,
    *,
    costs: StageCosts | None = None,
    comm: CommModel | None = None,
    memory_limit: float | None = None,
    placement: Sequence[int] | None = None,
    backward: str = "split",
    objective: str = "makespan",
    refine_evaluations: int | None = None,
    effort: str = "full",
) -> Schedule:
    """Build the best order found for these costs that fits the memory limit.

    Args:
        num_stages: model stages ``S`` (must match ``costs``).
        num_microbatches: microbatches per step (``m >= 1``).
        costs: per-stage costs (required).
        comm: communication model used to judge the orders (``None``: free).
        memory_limit: activation bytes each rank may hold, counted as the
            Timeline does (``activation_bytes`` until the backward, ``weight_stash_bytes``
            until ``W``); ``None`` for no limit.
        placement: stage → rank, any map that uses every rank 0..P−1; default one
            stage per rank.
        backward: ``"split"`` (``I`` and ``W`` may be scheduled apart) or ``"full"``.
            With ``"split"`` the full-backward templates are candidates too, and the
            result is a full-backward schedule when one of them is best (this
            happens with rendezvous sends, where a split rank blocks in the send of
            its ``I`` before it can run ``W``).
        objective: ``"makespan"`` or ``"span"`` (see the module doc).
        refine_evaluations: simulations the repair of each of the best orders may spend
            (default :func:`~pipeplan.schedules.refine.default_evaluations`; 0 turns it off).
        effort: ``"full"`` (every rule, then the repair) or ``"fast"`` (the
            templates and a few rules, no repair unless ``refine_evaluations`` asks).

    Returns:
        A schedule named ``"adaptive"`` that, simulated under ``costs`` and ``comm``,
        is no worse under ``objective`` than any fixed template for this placement
        that fits the limit (gpipe, 1f1b, zb-h1, zb-h2, interleaved, zb-v, whichever
        apply, with a split or full backward), and whose peak bytes per rank stay
        within the limit.

    Raises:
        InvalidInputError: missing costs, a bad placement, limit or objective.
        InfeasiblePlanError: the limit is below :func:`minimum_memory_limit`,
            the smallest that any order fits (named in the message).
    """
    if objective not in ("makespan", "span"):
        raise InvalidInputError(f"objective must be 'makespan' or 'span', got {objective!r}")
    if effort not in ("full", "fast"):
        raise InvalidInputError(f"effort must be 'full' or 'fast', got {effort!r}")
    if refine_evaluations is not None:
        refine_evaluations = positive_int("refine_evaluations", refine_evaluations, minimum=0)
    elif effort == "fast":
        refine_evaluations = 0
    candidates = adaptive_candidates(
        num_stages, num_microbatches, costs=costs, comm=comm, memory_limit=memory_limit,
        placement=placement, backward=backward, effort=effort,
    )
    if not any(c.fits for c in candidates):  # unreachable while the sequential order fits the minimum limit
        raise InfeasiblePlanError(
            f"no order of {num_microbatches} microbatches fits memory_limit = {memory_limit!r} bytes per rank "
            "without deadlocking"
        )
    chosen = _repaired_best(candidates, costs, comm, memory_limit, objective, refine_evaluations)  # type: ignore[arg-type]
    return Schedule(chosen.orders, chosen.placement, chosen.num_microbatches, name="adaptive")
