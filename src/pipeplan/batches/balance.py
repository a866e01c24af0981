"""Assign a global batch's samples to data-parallel ranks so the slowest rank is as fast as possible.

Every rank gets the same number of samples (``n // ranks``, the first ``n % ranks``
ranks one more), as a distributed sampler gives them, so a mean loss per rank
keeps its meaning; a rank's load is the sum of its samples' costs (ms)::

    import numpy as np
    from pipeplan.batches.balance import balance, lower_bound, balance_exact
    costs = np.array([4.0, 1, 1, 2, 3, 1, 2, 2])
    result = balance(costs, ranks=2)
    result.assignment          # rank of each sample
    result.makespan            # the slowest rank's load: 8.0
    lower_bound(costs, 2)      # 8.0: no assignment of equal counts does better

:func:`balance` is the fast heuristic: sort the samples by cost, deal them out
in rounds of ``ranks`` samples (each round's costliest sample to the least
loaded rank), then swap pairs of samples between the slowest rank and another
while that lowers the slowest rank's load. **Guarantee** (proved in the
docstring of :func:`balance`): ``makespan <= total / ranks + spread`` where
``spread`` is the largest cost difference inside one round, so at most
``lower_bound + (max cost - min cost)``. :func:`balance_exact` solves small
cases exactly (branch and bound) to check the heuristic; :func:`plan_microbatches`
splits one rank's samples into microbatches and orders them for a pipeline;
:func:`pipeline_makespan` is the step of a schedule (1F1B by default) when
each (stage, microbatch) has its own cost (the simulator on
:meth:`StageCosts.per_microbatch <pipeplan.costs.StageCosts.per_microbatch>`). torch-free (numpy only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..costs import CommModel, StageCosts
from ..errors import InvalidInputError, InvalidScheduleError
from ..schedule import Schedule
from ..schedules import schedule_info
from ..simulate import simulate

__all__ = ["Balance", "balance", "balance_exact", "lower_bound", "rank_loads", "plan_microbatches",
           "MicrobatchPlan", "pipeline_makespan", "microbatch_stage_costs"]


@dataclass(frozen=True)
class Balance:
    """An assignment of samples to ranks.

    Attributes:
        assignment: per sample, its rank (``int`` array of length ``n``).
        loads: per rank, the sum of its samples' costs (ms).
    """

    assignment: np.ndarray
    loads: np.ndarray

    @property
    def makespan(self) -> float:
        """The slowest rank's load (ms): what a data-parallel step waits for."""
        return float(self.loads.max())

    def members(self, rank: int) -> np.ndarray:
        """The sample indices assigned to ``rank``, in increasing order."""
        return np.flatnonzero(self.assignment == rank)


def _check(costs: Sequence[float] | np.ndarray, ranks: int) -> np.ndarray:
    values = np.asarray(costs, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise InvalidInputError(f"costs must be a non-empty list of per-sample costs, got shape {values.shape}")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise InvalidInputError("costs must be finite and >= 0 (ms per sample)")
    if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
        raise InvalidInputError(f"ranks must be an integer >= 1, got {ranks!r}")
    return values


def _capacities(samples: int, ranks: int) -> np.ndarray:
    base, extra = divmod(samples, ranks)
    return np.array([base + (1 if r < extra else 0) for r in range(ranks)])


def rank_loads(costs: Sequence[float] | np.ndarray, assignment: Sequence[int] | np.ndarray, ranks: int) -> np.ndarray:
    """Per rank, the sum of the costs of the samples ``assignment`` gives it."""
    return np.bincount(np.asarray(assignment, dtype=int), weights=np.asarray(costs, dtype=float), minlength=ranks)


def lower_bound(costs: Sequence[float] | np.ndarray, ranks: int) -> float:
    """A lower bound on the slowest rank's load over every equal-count assignment (ms).

    The larger of: the mean load ``total / ranks``; and the costliest sample plus the
    ``c - 1`` cheapest others, where ``c = n // ranks`` is the fewest samples a rank holds
    (every rank holds at least ``c``, and some rank holds the costliest sample).
    """
    values = _check(costs, ranks)
    ordered = np.sort(values)
    fewest = values.size // ranks
    bound = float(values.sum()) / ranks
    if fewest >= 1:
        bound = max(bound, float(ordered[-1] + ordered[: fewest - 1].sum()))
    return bound


def balance(costs: Sequence[float] | np.ndarray, ranks: int, *, refine: int | None = None) -> Balance:
    """Equal-count assignment of samples to ``ranks`` with a small slowest-rank load (the heuristic).

    Rounds: sort samples by cost, costliest first; deal round ``j`` (samples
    ``j·R .. j·R + R - 1``) so its costliest sample goes to the least loaded rank,
    its next to the next least loaded, and so on. Refinement: up to ``refine``
    times (default ``4 · ranks``), swap one sample of the slowest rank with one
    of another rank where that lowers the larger of the two loads below the
    slowest load, choosing the swap that lowers it most.

    Guarantee: after the rounds, for any two ranks ``i`` (lighter before the
    round) and ``j``, their difference grows by at most that round's cost range
    if ``i`` got the costlier sample, and does not grow otherwise; so the spread
    of loads never exceeds the largest range ``d`` inside one round, and the
    slowest load is at most ``total / ranks + d``. With a last, partial round
    (``ranks`` does not divide ``n``) the rank that got its sample may exceed a
    rank that did not by that sample's cost: the bound is ``total / ranks +
    max cost``. Refinement only lowers the slowest load.
    """
    values = _check(costs, ranks)
    count = values.size
    order = np.argsort(-values, kind="stable")
    assignment = np.empty(count, dtype=int)
    loads = np.zeros(ranks)
    for start in range(0, count, ranks):
        chunk = order[start:start + ranks]
        lightest = np.argsort(loads, kind="stable")[: chunk.size]  # chunk is costliest first
        assignment[chunk] = lightest
        loads[lightest] += values[chunk]
    if ranks > 1 and count > ranks:
        _refine(values, assignment, loads, ranks, 4 * ranks if refine is None else refine)
    return Balance(assignment=assignment, loads=rank_loads(values, assignment, ranks))


def _refine(values: np.ndarray, assignment: np.ndarray, loads: np.ndarray, ranks: int, rounds: int) -> None:
    """Best-improvement swaps between the slowest rank and any other (in place)."""
    for _ in range(rounds):
        slow = int(np.argmax(loads))
        mine = np.flatnonzero(assignment == slow)
        others = np.flatnonzero(assignment != slow)
        if mine.size == 0 or others.size == 0:
            return
        # delta[i, j] = cost(mine i) - cost(other j): moving it off the slow rank.
        delta = values[mine][:, None] - values[others][None, :]
        other_loads = loads[assignment[others]][None, :]
        new_slow = loads[slow] - delta
        new_other = other_loads + delta
        worst = np.maximum(new_slow, new_other)
        worst = np.where(delta > 0, worst, np.inf)
        flat = int(np.argmin(worst))
        i, j = divmod(flat, others.size)
        if not worst[i, j] < loads[slow] - 1e-12:
            return
        a, b = mine[i], others[j]
        partner = assignment[b]
        change = values[a] - values[b]
        assignment[a], assignment[b] = partner, slow
        loads[slow] -= change
        loads[partner] += change


def balance_exact(costs: Sequence[float] | np.ndarray, ranks: int, *, max_samples: int = 14) -> Balance:
    """The equal-count assignment with the smallest slowest-rank load (branch and bound; small cases only).

    Raises:
        InvalidInputError: more than ``max_samples`` samples (the search is exponential).
    """
    values = _check(costs, ranks)
    if values.size > max_samples:
        raise InvalidInputError(f"balance_exact takes at most {max_samples} samples, got {values.size}")
    order = np.argsort(-values, kind="stable")
    capacity = _capacities(values.size, ranks)
    start = balance(values, ranks)
    best = [start.makespan, start.assignment.copy()]
    loads = np.zeros(ranks)
    room = capacity.copy()
    chosen = np.empty(values.size, dtype=int)

    def search(position: int, current_max: float) -> None:
        if current_max >= best[0] - 1e-12:
            return
        if position == values.size:
            best[0] = current_max
            best[1] = chosen.copy()
            return
        sample = order[position]
        tried: set[tuple[float, int]] = set()
        for rank in np.argsort(loads, kind="stable"):
            if room[rank] == 0:
                continue
            key = (float(loads[rank]), int(room[rank]))  # two ranks alike so far: one is enough
            if key in tried:
                continue
            tried.add(key)
            loads[rank] += values[sample]
            room[rank] -= 1
            chosen[sample] = rank
            search(position + 1, max(current_max, float(loads[rank])))
            loads[rank] -= values[sample]
            room[rank] += 1

    search(0, 0.0)
    assignment = np.asarray(best[1], dtype=int)
    return Balance(assignment=assignment, loads=rank_loads(values, assignment, ranks))


@dataclass(frozen=True)
class MicrobatchPlan:
    """One rank's samples split into microbatches, in the order the pipeline runs them.

    Attributes:
        microbatches: per microbatch (in run order), the sample indices it holds.
        costs: per microbatch (in run order), the sum of its samples' costs (the costs' time unit).
        makespan: the pipeline step of that order (the same unit), as :func:`pipeline_makespan` gives it.
    """

    microbatches: tuple[tuple[int, ...], ...]
    costs: tuple[float, ...]
    makespan: float


def plan_microbatches(costs: Sequence[float] | np.ndarray, num_microbatches: int, *,
                      sample_forward: np.ndarray | None = None, sample_backward: np.ndarray | None = None,
                      stage_share: Sequence[float] | np.ndarray | None = None,
                      schedule: str | Schedule = "1f1b", sample_weight: np.ndarray | None = None,
                      refine: int | None = None, sample_message: np.ndarray | None = None,
                      send_mode: str = "eager") -> MicrobatchPlan:
    """Split one rank's samples into ``num_microbatches`` of equal counts, balanced, and order them.

    The split is :func:`balance` on ``costs`` with microbatches as ranks. The
    order: four candidates (costliest first, cheapest first, the cheapest then the
    rest costliest first, and the split's own order) are timed with
    :func:`pipeline_makespan` and the fastest kept (ties: the first). The stage
    costs of a microbatch are the sums of its samples' ``sample_forward`` and
    ``sample_backward`` (``[sample, stage]`` arrays) where given; otherwise
    ``cost · stage_share`` (the fraction of a sample's cost on each stage, default
    4 equal stages), a third of it forward and two thirds backward. ``sample_weight``
    (``[sample, stage]``, the weight-gradient part of ``sample_backward``) is needed for a
    split-backward schedule (zero-bubble: ``I`` and ``W`` actions, see :func:`pipeline_makespan`).
    ``refine``: the split's refinement rounds (:func:`balance`; default its own).
    ``sample_message`` (``[sample, boundary]``): each sample's share of the message across
    each stage boundary (its bytes over the link, plus the link's latency over the samples of
    a microbatch); a microbatch's message is the sum of its samples' (:func:`pipeline_makespan`'s
    ``messages``, with ``send_mode``).

    Units: every time argument in one unit of the caller's (ms here and in
    :func:`balance`'s example; :func:`~pipeplan.planner.mix_rank.rank_on_mix` passes the
    profile's time unit, :attr:`~pipeplan.planner.workload.Workload.time_unit`), and the
    makespan comes back in it.
    """
    values = _check(costs, num_microbatches)
    if values.size < num_microbatches:
        raise InvalidInputError(f"{values.size} samples cannot fill {num_microbatches} microbatches")
    split = balance(values, num_microbatches, refine=refine)
    groups = [split.members(m) for m in range(num_microbatches)]
    totals = split.loads
    if sample_forward is not None and sample_backward is not None:
        fwd_samples = np.asarray(sample_forward, dtype=float)
        bwd_samples = np.asarray(sample_backward, dtype=float)
        if fwd_samples.shape != bwd_samples.shape or fwd_samples.ndim != 2 or fwd_samples.shape[0] != values.size:
            raise InvalidInputError("sample_forward and sample_backward must both be [sample, stage] arrays")
    else:
        share = np.full(4, 0.25) if stage_share is None else np.asarray(stage_share, dtype=float)
        if share.ndim != 1 or share.size == 0 or np.any(share < 0) or share.sum() <= 0:
            raise InvalidInputError("stage_share must be non-negative fractions, one per stage")
        per_sample = np.outer(values, share / share.sum())
        fwd_samples, bwd_samples = per_sample / 3.0, per_sample * 2.0 / 3.0
    forward = np.stack([fwd_samples[g].sum(axis=0) for g in groups], axis=1)  # [stage, microbatch]
    backward = np.stack([bwd_samples[g].sum(axis=0) for g in groups], axis=1)
    weight = None
    if sample_weight is not None:
        wgt_samples = np.asarray(sample_weight, dtype=float)
        if wgt_samples.shape != fwd_samples.shape:
            raise InvalidInputError("sample_weight must be a [sample, stage] array like sample_forward")
        weight = np.stack([wgt_samples[g].sum(axis=0) for g in groups], axis=1)
    messages = None
    if sample_message is not None:
        msg_samples = np.asarray(sample_message, dtype=float)
        if msg_samples.ndim != 2 or msg_samples.shape != (values.size, forward.shape[0] - 1):
            raise InvalidInputError("sample_message must be a [sample, boundary] array (one boundary fewer than stages)")
        messages = np.stack([msg_samples[g].sum(axis=0) for g in groups], axis=1)  # [boundary, microbatch]
    built = _schedule(schedule, forward.shape[0], num_microbatches)
    descending = [int(m) for m in np.argsort(-totals, kind="stable")]
    ascending = descending[::-1]
    # cheapest first fills the pipeline fast; costliest first starts the long work early
    cheapest_then_descending = ascending[:1] + descending[:-1]
    candidates = [descending, ascending, cheapest_then_descending, list(range(num_microbatches))]
    best_order, best_time = candidates[0], np.inf
    for candidate in candidates:
        time = pipeline_makespan(forward[:, candidate], backward[:, candidate], schedule=built,
                                 weight=None if weight is None else weight[:, candidate],
                                 messages=None if messages is None else messages[:, candidate], send_mode=send_mode)
        if time < best_time - 1e-12:
            best_order, best_time = candidate, time
    return MicrobatchPlan(microbatches=tuple(tuple(int(i) for i in groups[m]) for m in best_order),
                          costs=tuple(float(totals[m]) for m in best_order), makespan=float(best_time))


def _schedule(schedule: str | Schedule, stages: int, count: int) -> Schedule:
    """A registered schedule's instance (full backwards where it has the option), or ``schedule`` itself."""
    if not isinstance(schedule, str):
        return schedule
    info = schedule_info(schedule)
    return info.factory(stages, count, **({"backward": "full"} if "backward" in info.options else {}))


def microbatch_stage_costs(forward: np.ndarray | Sequence[Sequence[float]],
                           backward: np.ndarray | Sequence[Sequence[float]],
                           weight: np.ndarray | Sequence[Sequence[float]] | None = None,
                           activation_bytes: Sequence[float] | None = None) -> StageCosts:
    """:meth:`StageCosts.per_microbatch <pipeplan.costs.StageCosts.per_microbatch>` from ``[stage, microbatch]`` arrays (ms).

    ``weight``: the weight-gradient part of each backward (default half of it, as
    :class:`~pipeplan.costs.StageCosts`); ``activation_bytes`` per stage.
    """
    fwd = np.asarray(forward, dtype=float)
    bwd = np.asarray(backward, dtype=float)
    if fwd.ndim != 2 or fwd.shape != bwd.shape or fwd.size == 0:
        raise InvalidInputError(f"forward and backward must both be [stage, microbatch] arrays, got "
                                f"{fwd.shape} and {bwd.shape}")
    wgt = None
    if weight is not None:
        wgt = np.asarray(weight, dtype=float)
        if wgt.shape != fwd.shape:
            raise InvalidInputError(f"weight must be a [stage, microbatch] array like forward, got {wgt.shape}")
    return StageCosts.per_microbatch(fwd.tolist(), bwd.tolist(), None if wgt is None else wgt.tolist(),
                                     activation_bytes=activation_bytes)


def pipeline_makespan(forward: np.ndarray | Sequence[Sequence[float]], backward: np.ndarray | Sequence[Sequence[float]],
                      *, schedule: str | Schedule = "1f1b",
                      weight: np.ndarray | Sequence[Sequence[float]] | None = None,
                      messages: np.ndarray | Sequence[Sequence[float]] | None = None,
                      send_mode: str = "eager") -> float:
    """The step of a pipeline schedule where each (stage, microbatch) has its own cost, in the costs' time unit.

    ``forward[s][m]``, ``backward[s][m]``: the forward and full backward of
    microbatch ``m`` on stage ``s`` (``P × m`` arrays). ``schedule``: a registered
    schedule name with one stage per rank and full backwards (``"1f1b"``,
    ``"gpipe"``) or a :class:`~pipeplan.schedule.Schedule` (several stages per rank
    allowed: interleaved, V). A split-backward schedule (zero-bubble's ``I`` and ``W``)
    needs ``weight[s][m]``, the weight-gradient part of ``backward[s][m]``: ``I`` costs
    ``backward - weight`` and ``W`` costs ``weight``, as
    :class:`~pipeplan.costs.StageCosts` splits an unmeasured backward. It is
    :func:`pipeplan.simulate.simulate` on :func:`microbatch_stage_costs` with free
    messages (an action starts when its rank is free and its inputs are done), or, with
    ``messages[b][m]`` (``P - 1`` boundaries), each microbatch's message across each
    boundary taking its own time (:class:`~pipeplan.costs.CommModel`'s ``microbatch_bytes`` at
    unit bandwidth; ``send_mode`` ``"eager"`` or ``"rendezvous"``). Every time (costs,
    messages, the step) is in one unit of the caller's: ms, or the profile's time unit
    (:func:`~pipeplan.planner.mix_rank.rank_on_mix`).
    """
    costs = microbatch_stage_costs(forward, backward, weight)
    assert costs.microbatch_costs is not None
    stages, count = costs.num_stages, costs.microbatch_costs.num_microbatches
    built = _schedule(schedule, stages, count)
    if built.num_stages != stages or built.num_microbatches != count:
        raise InvalidInputError(f"the schedule has {built.num_stages} stages and {built.num_microbatches} "
                                f"microbatches; the costs {stages} and {count}")
    if not built.present_kinds <= {"F", "B", "I", "W"}:
        raise InvalidInputError("pipeline_makespan takes a schedule of F and B (or I and W) actions only, got "
                                f"{', '.join(sorted(built.present_kinds))}")
    if built.present_kinds & {"I", "W"} and weight is None:
        raise InvalidInputError("a split-backward schedule (I and W actions) needs weight, the "
                                "weight-gradient part of each backward")
    comm = None
    if messages is not None:
        table = np.asarray(messages, dtype=float)
        if table.shape != (stages - 1, count):
            raise InvalidInputError(f"messages must be a [boundary, microbatch] array of shape {(stages - 1, count)}, "
                                    f"got {table.shape}")
        if stages > 1:
            comm = CommModel(0.0, 1.0, send_mode=send_mode, microbatch_bytes=table.tolist())  # type: ignore[arg-type]
    try:
        return simulate(built, costs, comm).makespan
    except InvalidScheduleError as error:
        raise InvalidInputError(f"the schedule cannot finish: {error}") from None
