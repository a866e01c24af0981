"""Local repair of a split-backward order: move ``W`` passes to where they cost nothing.

A list scheduler decides on what it knows at the moment a rank falls idle, so it
sometimes starts a ``W`` that then delays a forward or an input-gradient backward
arriving a moment later, or runs a ``W`` early that the rank will miss later, when
it sits idle waiting for gradients. :func:`refine` repairs both, the two rules of
the zero-bubble paper's automatic scheduler turned into moves on any order:

* a ``W`` immediately followed by an action it delayed moves behind that action;
* an idle gap pulls in the next later ``W`` whose backward already ran.

A move is kept when the simulated objective (``"makespan"`` or ``"span"``, the
largest per-rank span) improves beyond float noise and every rank stays within the
memory limit. Moving ``W`` passes never changes what crosses ranks, so the order
stays valid; under rendezvous sends a move that deadlocks is dropped::

    from pipeplan.schedules.refine import refine
    better, timeline = refine(schedule, costs, comm, memory_limit=16.0, objective="span")
"""

from __future__ import annotations

import math
from typing import Literal

from ..costs import CommModel, StageCosts
from ..errors import DeadlockError
from ..schedule import Action, Kind, Schedule
from ..simulate import simulate
from ..timeline import Timeline

__all__ = ["refine", "Objective", "objective_value", "default_evaluations"]

Objective = Literal["makespan", "span"]
"""``"makespan"``: the step's end. ``"span"``: the largest per-rank span (first start to
last end on one rank), the zero-bubble paper's metric, which counts when the optimizer
step of a rank need not wait for the others."""

_TOLERANCE = 1e-9


def objective_value(timeline: Timeline, objective: Objective) -> float:
    """The value ``objective`` minimises on ``timeline``."""
    return timeline.makespan if objective == "makespan" else float(timeline.spans.max())


def default_evaluations(num_actions: int) -> int:
    """How many simulations :func:`refine` may spend on an order of ``num_actions`` actions.

    About 300,000 simulated actions in all (a fraction of a second), at most 2,000
    moves, and on large orders fewer still (``4·10⁸ / actions²``: 42 at 3,072 actions,
    4 at 12,288, where 40 bettered no problem's best of 6), at least 4.
    """
    actions = max(1, num_actions)
    return max(4, min(2000, 300_000 // actions, 400_000_000 // actions**2))


def _key(timeline: Timeline, objective: Objective) -> tuple[float, float]:
    other: Objective = "span" if objective == "makespan" else "makespan"
    return objective_value(timeline, objective), objective_value(timeline, other)


def _improves(new: tuple[float, float], old: tuple[float, float]) -> bool:
    slack = _TOLERANCE * max(1.0, abs(old[0]))
    if new[0] < old[0] - slack:
        return True
    return new[0] <= old[0] + slack and new[1] < old[1] - _TOLERANCE * max(1.0, abs(old[1]))


def _moves(orders: list[list[Action]], timeline: Timeline, objective: Objective) -> list[tuple[int, int, int]]:
    """Candidate moves ``(rank, from, to)``, the ranks that set the objective first."""
    ranked = []
    for rank, order in enumerate(orders):
        begin, end = int(timeline.rank_offsets[rank]), int(timeline.rank_offsets[rank + 1])
        starts = timeline.start[begin:end]
        ends = timeline.end[begin:end]
        moves = []
        done_backward: set[tuple[int, int]] = set()
        for position, action in enumerate(order):
            if action.kind is Kind.I:
                done_backward.add((action.stage, action.microbatch))
            if position + 1 < len(order) and action.kind is Kind.W and order[position + 1].kind is not Kind.W:
                if starts[position + 1] <= ends[position] * (1 + _TOLERANCE) + _TOLERANCE:
                    moves.append((rank, position, position + 1))
            if position + 1 < len(order) and starts[position + 1] > ends[position] * (1 + _TOLERANCE) + _TOLERANCE:
                for later in range(position + 2, len(order)):
                    candidate = order[later]
                    if candidate.kind is Kind.W and (candidate.stage, candidate.microbatch) in done_backward:
                        moves.append((rank, later, position + 1))
                        break
        weight = float(ends[-1]) if objective == "makespan" else float(ends[-1] - starts[0])
        ranked.append((weight, moves))
    ranked.sort(key=lambda item: -item[0])
    return [move for _, moves in ranked for move in moves]


def refine(
    schedule: Schedule,
    costs: StageCosts,
    comm: CommModel | None = None,
    *,
    memory_limit: float | None = None,
    objective: Objective = "makespan",
    max_evaluations: int | None = None,
    timeline: Timeline | None = None,
) -> tuple[Schedule, Timeline]:
    """Improve ``schedule`` by first-improvement ``W`` moves (see the module doc).

    Args:
        schedule: a valid order; full-backward and forward-only orders are returned as they are.
        costs, comm: what the moves are judged on (``comm`` ``None``: free messages).
        memory_limit: bytes per rank no kept order may exceed (``None``: no limit).
        objective: ``"makespan"`` or ``"span"``; ties on it are broken by the other.
        max_evaluations: simulations to spend; default :func:`default_evaluations`.
        timeline: ``schedule`` simulated with ``costs`` and ``comm``, if already at hand.

    Returns:
        The best order found (named as ``schedule``) and its simulated timeline; never
        worse than ``schedule`` under ``objective``.
    """
    comm = comm or CommModel()
    if timeline is None:
        timeline = simulate(schedule, costs, comm)
    if not schedule.split_backward:
        return schedule, timeline
    budget = default_evaluations(schedule.num_actions) if max_evaluations is None else max_evaluations
    bound = math.inf if memory_limit is None else memory_limit * (1 + _TOLERANCE) + _TOLERANCE
    orders = [list(order) for order in schedule.orders]
    kept = schedule
    best = _key(timeline, objective)
    evaluations = 0
    improved = True
    while improved and evaluations < budget:
        improved = False
        for rank, source, target in _moves(orders, timeline, objective):
            if evaluations >= budget:
                break
            order = orders[rank][:]
            order.insert(target, order.pop(source))
            candidate = Schedule(
                [order if r == rank else orders[r] for r in range(len(orders))],
                schedule.placement, schedule.num_microbatches, name=schedule.name,
            )
            evaluations += 1
            try:
                trial = simulate(candidate, costs, comm, validate=False)
            except DeadlockError:
                continue
            key = _key(trial, objective)
            # memory only for a move that would be kept (peak_bytes costs about as much as the simulation)
            if _improves(key, best) and max(trial.peak_bytes) <= bound:
                orders[rank] = order
                kept, timeline, best, improved = candidate, trial, key, True
                break
    return kept, timeline
