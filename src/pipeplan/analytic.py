"""Closed forms for pipeline bubbles, step time and activation memory.

Each formula is tied to the simulator by tests (``tests/test_analytic.py``)::

    >>> from pipeplan import analytic
    >>> analytic.uniform_bubble(4, 8)                            # 3/11
    0.2727...
    >>> analytic.asymmetric_forward_bubble([30, 10, 10, 20], 8)  # lesson 16's formula
    0.5
    >>> analytic.asymmetric_bubble_limit([30, 10, 10, 20])       # 1 - mean/max = 5/12
    0.4166...

Times are in any one unit; bytes are bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from ._validation import finite_floats, positive_int
from .costs import CommModel, StageCosts
from .errors import InvalidInputError
from .schedule import Action, Kind, Schedule

__all__ = [
    "uniform_bubble",
    "forward_makespan",
    "asymmetric_forward_bubble",
    "asymmetric_bubble_limit",
    "one_f_one_b_step_time",
    "one_f_one_b_peak_inflight",
    "activation_bytes_per_microbatch",
    "one_f_one_b_activation_bytes",
    "makespan_lower_bound",
    "memory_lower_bounds",
    "placement_lower_bounds",
    "StepBounds",
    "dual_rate_period",
]


def uniform_bubble(num_stages: int, num_microbatches: int) -> float:
    """GPipe/1F1B bubble with equal stages: ``(P − 1) / (m + P − 1)``."""
    p = positive_int("num_stages", num_stages)
    m = positive_int("num_microbatches", num_microbatches)
    return (p - 1) / (m + p - 1)


def forward_makespan(stage_times: Sequence[float], num_microbatches: int) -> float:
    """Forward-only makespan on unequal stages: ``Σt + (m − 1)·max t`` (exact)."""
    times = finite_floats("stage_times", stage_times)
    m = positive_int("num_microbatches", num_microbatches)
    return sum(times) + (m - 1) * max(times)


def asymmetric_forward_bubble(stage_times: Sequence[float], num_microbatches: int) -> float:
    """Lesson 16's asymmetric bubble: ``1 − mΣt / (P·(Σt + (m − 1)·max t))``."""
    times = finite_floats("stage_times", stage_times)
    m = positive_int("num_microbatches", num_microbatches)
    return 1.0 - m * sum(times) / (len(times) * forward_makespan(times, m))


def asymmetric_bubble_limit(stage_times: Sequence[float]) -> float:
    """The bubble as ``m → ∞``: ``1 − mean(t) / max(t)``; it does not vanish."""
    times = finite_floats("stage_times", stage_times)
    return 1.0 - (sum(times) / len(times)) / max(times)


def one_f_one_b_step_time(num_stages: int, num_microbatches: int, forward: float, backward: float) -> float:
    """Uniform 1F1B (and GPipe) step time: ``(m + P − 1)·(F + B)``."""
    p = positive_int("num_stages", num_stages)
    m = positive_int("num_microbatches", num_microbatches)
    f, b = finite_floats("forward/backward", [forward, backward])
    return (m + p - 1) * (f + b)


def one_f_one_b_peak_inflight(stage: int, num_stages: int, num_microbatches: int) -> int:
    """Microbatches in flight at the peak on stage ``p`` under 1F1B: ``min(m, P − p)``."""
    p_total = positive_int("num_stages", num_stages)
    m = positive_int("num_microbatches", num_microbatches)
    if not 0 <= stage < p_total:
        raise InvalidInputError(f"stage must be in 0..{p_total - 1}, got {stage}")
    return min(m, p_total - stage)


def activation_bytes_per_microbatch(
    *, seq_len: int, micro_batch_size: int, hidden_size: int, num_layers: int, num_heads: int
) -> float:
    """Activation bytes one microbatch leaves on a stage of transformer layers.

    ``s·b·h·L·(34 + 5·a·s/h)`` bytes (Korthikanti et al., 2022, 16-bit activations,
    no recomputation, no sequence parallelism).
    """
    s = positive_int("seq_len", seq_len)
    b = positive_int("micro_batch_size", micro_batch_size)
    h = positive_int("hidden_size", hidden_size)
    layers = positive_int("num_layers", num_layers)
    a = positive_int("num_heads", num_heads)
    return float(s * b * h * layers * (34 + 5 * a * s / h))


def one_f_one_b_activation_bytes(stage: int, num_stages: int, num_microbatches: int, bytes_per_microbatch: float) -> float:
    """Peak activation bytes on stage ``p`` under 1F1B: ``min(m, P − p)·M_act``."""
    return one_f_one_b_peak_inflight(stage, num_stages, num_microbatches) * float(bytes_per_microbatch)


def makespan_lower_bound(schedule: Schedule, costs: StageCosts, comm: CommModel | None = None) -> float:
    """A bound no order of ``schedule``'s actions can beat (same placement, costs, comm).

    The largest of three families of bounds, each valid for any order:

    * **rank**: a rank cannot start before its first input can arrive (the forward
      path, with messages, to its shallowest stage: the *fill*), then runs all its
      work one action at a time, and its last action still has the shortest path
      that must follow it (the *drain*: zero when the rank ends on a ``W``);
    * **stage flow**: the ``m`` forwards of a stage (likewise its backwards) run one
      at a time on its rank, after the earliest of them can start and before the
      shortest path that follows the last of them;
    * **critical path**: one microbatch's forwards down, backwards back up and the
      ``W`` of stage 0, paying every message.

    Times in the costs' unit; messages cost ``comm``'s time per crossing (eager).
    """
    comm = comm or CommModel()
    stages = schedule.num_stages
    num_mb = schedule.num_microbatches
    costs.check_shape(stages, num_mb)
    paths = _Paths(schedule, costs, comm)
    backward_kind, split, mbs = schedule.gradient_kind, schedule.split_backward, range(num_mb)
    before_f, after_f, before_b, after_b = paths.before_f, paths.after_f, paths.before_b, paths.after_b
    d = paths.d

    bound = 0.0
    # Critical path of each microbatch.
    for mb in mbs:
        bound = max(bound, before_f[0][mb] + d(Kind.F, 0, mb) + after_f[0][mb])
    # Stage flow: the m actions of one kind on one stage run one at a time.
    for s in range(stages):
        bound = max(bound, min(before_f[s]) + sum(d(Kind.F, s, mb) for mb in mbs) + min(after_f[s]))
        if backward_kind is not None:
            bound = max(bound, min(before_b[s]) + sum(d(backward_kind, s, mb) for mb in mbs) + min(after_b[s]))
    # Rank: fill, all its work, drain.
    for rank, order in enumerate(schedule.orders):
        held = schedule.stages_of(rank)
        fill = min(min(before_f[s]) for s in held)
        work = sum(d(k, s, mb) for k, s, mb in order)
        if split:
            drain = 0.0
        elif backward_kind is not None:
            drain = min(min(after_b[s]) for s in held)
        else:
            drain = min(min(after_f[s]) for s in held)
        bound = max(bound, fill + work + drain)
    return bound



class StepBounds(NamedTuple):
    """Lower bounds no order can beat: the step's ``makespan`` and its largest per-rank ``span``."""

    makespan: float
    span: float


def memory_lower_bounds(
    schedule: Schedule, costs: StageCosts, comm: CommModel | None = None, *, memory_limit: float | None = None
) -> StepBounds:
    """Bounds on makespan and span of any order of ``schedule``'s actions that fits ``memory_limit``.

    :func:`makespan_lower_bound` ignores memory; at a tight limit the fill is longer.
    Before its first backward a rank runs only forwards, and holds every one of them
    (nothing is freed before a backward), so their activation bytes fit the limit:
    the forward work it can do before then is at most ``K_r``, the most forward time
    whose ``activation_bytes`` fit (a fractional knapsack over its stages, at most
    ``m`` of each; all its forwards without a limit). Its first backward cannot start
    before ``t_r``, the earliest any backward of its stages can (the chain of one
    microbatch, eager messages), nor less than ``g_r`` after the rank's first start
    (the path from its shallowest stage's ``F`` to that backward). So

    * makespan ≥ ``t_r + work_r − K_r``, and span_r ≥ ``g_r + work_r − K_r``, for every rank;
    * makespan ≥ :func:`makespan_lower_bound`, span_r ≥ ``work_r``.

    With uniform costs, one stage per rank and ``k`` microbatches' activations fitting,
    rank 0's idle time before its first ``B`` is the zero-bubble paper's appendix-B
    bound ``(p − 1)(T_B + 2T_comm) + (p − k)T_F``. ``memory_limit`` is bytes per rank as
    ``Timeline.peak_bytes`` counts them (``None``: no limit).
    """
    comm = comm or CommModel()
    costs.check_shape(schedule.num_stages, schedule.num_microbatches)
    makespan = makespan_lower_bound(schedule, costs, comm)
    span = 0.0
    if schedule.gradient_kind is None:  # forward only: nothing waits for a backward
        for order in schedule.orders:
            span = max(span, sum(costs.duration(k, s, mb) for k, s, mb in order))
        return StepBounds(makespan, span)
    paths = _Paths(schedule, costs, comm)
    mbs = range(schedule.num_microbatches)
    for rank, order in enumerate(schedule.orders):
        held = schedule.stages_of(rank)
        work = sum(costs.duration(k, s, mb) for k, s, mb in order)
        room = _forward_room(costs, held, schedule.num_microbatches, memory_limit)
        first_backward = min(paths.before_b[s][mb] for s in held for mb in mbs)
        top = min(held)
        gap = min(paths.before_b[s][mb] - paths.before_f[top][mb] for s in held for mb in mbs)
        makespan = max(makespan, first_backward + work - room)
        span = max(span, work, gap + work - room)
    return StepBounds(makespan, span)


def placement_lower_bounds(
    costs: StageCosts, placement: Sequence[int], num_microbatches: int, *, comm: CommModel | None = None,
    memory_limit: float | None = None, backward: str = "split",
) -> StepBounds:
    """:func:`memory_lower_bounds` for a placement, before any order is built (for a planner).

    ``placement``: stage → rank; ``backward``: ``"split"`` (``I`` and ``W``) or ``"full"``.
    The bounds read only which actions run on which rank, so one microbatch at a time
    stands in for every order.
    """
    if backward not in ("split", "full"):
        raise InvalidInputError(f"backward must be 'split' or 'full', got {backward!r}")
    kinds = (Kind.I, Kind.W) if backward == "split" else (Kind.B,)
    orders: list[list[Action]] = [[] for _ in range(max(placement) + 1)]
    for mb in range(positive_int("num_microbatches", num_microbatches)):
        for stage, rank in enumerate(placement):
            orders[rank].append(Action(Kind.F, stage, mb))
        for stage in reversed(range(len(placement))):
            orders[placement[stage]].extend(Action(kind, stage, mb) for kind in kinds)
    schedule = Schedule(orders, list(placement), num_microbatches)
    return memory_lower_bounds(schedule, costs, comm, memory_limit=memory_limit)


def _forward_room(costs: StageCosts, stages: Sequence[int], num_microbatches: int, limit: float | None) -> float:
    """The most forward time of ``stages`` whose activations fit ``limit`` bytes at once (an upper bound)."""
    items = []  # (time, bytes) of every forward, longest per byte first
    for stage in stages:
        for mb in range(num_microbatches):
            items.append((costs.duration(Kind.F, stage, mb), float(costs.activation_bytes[stage])))
    if limit is None or math.isinf(limit):
        return sum(time for time, _ in items)
    items.sort(key=lambda item: -math.inf if item[1] <= 0 else -item[0] / item[1])
    room, left = 0.0, float(limit) * (1 + 1e-9) + 1e-9
    for time, size in items:
        if size <= left:
            room, left = room + time, left - size
        else:  # the fractional part keeps this an upper bound
            return room + time * left / size
    return room


class _Paths:
    """Shortest paths of each microbatch's chain (eager messages), shared by the bounds.

    ``before_f[s][mb]`` / ``before_b[s][mb]``: earliest start of ``F(s, mb)`` / its
    gradient backward from time 0; ``after_f`` / ``after_b``: the shortest path that
    must follow the end of that action.
    """

    def __init__(self, schedule: Schedule, costs: StageCosts, comm: CommModel) -> None:
        stages, num_mb = schedule.num_stages, schedule.num_microbatches
        # Each boundary's fastest message (every microbatch's when they are alike): a bound for any microbatch.
        boundary = comm.message_times(stages, num_mb).min(axis=1, initial=math.inf).tolist() \
            if comm.microbatch_bytes is not None else comm.boundary_times(stages)
        # Message time per boundary, from the schedule's messages (every microbatch crosses the same ones).
        crossing = [0.0] * max(0, stages - 1)
        for message in schedule.messages():
            if message.producer.microbatch == 0:
                crossing[message.boundary] = boundary[message.boundary]
        backward_kind = schedule.gradient_kind
        split = schedule.split_backward
        last = stages - 1
        d = self.d = costs.duration
        before_f = [[0.0] * num_mb for _ in range(stages)]
        for mb in range(num_mb):
            for s in range(1, stages):
                before_f[s][mb] = before_f[s - 1][mb] + d(Kind.F, s - 1, mb) + crossing[s - 1]
        after_f = [[0.0] * num_mb for _ in range(stages)]
        before_b = [[0.0] * num_mb for _ in range(stages)]
        after_b = [[0.0] * num_mb for _ in range(stages)]
        for mb in range(num_mb):
            tail_w = d(Kind.W, 0, mb) if split else 0.0
            down = 0.0  # from the end of F(s) to the end of the last stage's F
            for s in range(last, -1, -1):
                after_f[s][mb] = down
                down += d(Kind.F, s, mb) + (crossing[s - 1] if s > 0 else 0.0)
            if backward_kind is not None:
                chain = tail_w  # from the end of B(s) to the end of stage 0's backward and W
                for s in range(stages):
                    after_b[s][mb] = max(chain, d(Kind.W, s, mb) if split else 0.0)
                    chain += d(backward_kind, s, mb) + (crossing[s] if s < last else 0.0)
                up = before_f[last][mb] + d(Kind.F, last, mb)
                for s in range(last, -1, -1):
                    before_b[s][mb] = up
                    up += d(backward_kind, s, mb) + (crossing[s - 1] if s > 0 else 0.0)
                for s in range(stages):
                    after_f[s][mb] += sum(d(backward_kind, j, mb) for j in range(stages)) + sum(crossing) + tail_w
        self.before_f, self.after_f, self.before_b, self.after_b = before_f, after_f, before_b, after_b


def dual_rate_period(
    vision: Sequence[tuple[float, float, float]],
    action: Sequence[tuple[float, float, float]],
    *,
    rate_ratio: int,
    max_staleness: int = 1,
    comm: float = 0.0,
) -> float:
    """Steady-state time per camera frame of the dual-rate pipeline (``k`` action steps).

    ``vision[s]`` and ``action[a]`` are ``(forward, backward, update)`` times of each
    stage (one stage per rank; a vision backward without weight stashing includes
    its recomputed forward); ``comm`` is the time of one message between ranks. The
    period is the largest cycle mean of the schedule's dependency graph
    (:mod:`pipeplan.schedules.dual_rate`; ``W_s = 1 + L·(V − s)`` frames in flight on
    vision stage ``s``):

    * the action side: ``k · T_step``, with ``T_step = max_a [Σ_{a'≥a}(f+b) + u_a + 2(A−1−a)·c]``;
    * a vision stage alone: ``f_s + b_s + u_s``; stages ``s..s'`` of the vision chain:
      ``[Σ_{t=s..s'}(f_t+b_t) + u_s + 2(s'−s)·c] / (L·(s'−s) + 1)``;
    * the round trip from stage ``s`` through the action side:
      ``[Σ_{t≥s}(f_t+b_t) + u_s + 2(V−s)·c + D + (k−1)·T_step] / W_s``, where
      ``D = Σ_a (f_a+b_a) + 2(A−1)·c`` is one step's forward-backward chain.

    With no comm and ``L >= 1`` on one vision rank this is ``max(k·T_step, f+b+u)``:
    the slow side sets the pace and the other side's work hides behind it. The
    action side trains ``k`` steps per period, so samples per second are
    ``k · batch / period`` and frames per second ``1 / period``.
    """
    k = positive_int("rate_ratio", rate_ratio)
    lag = positive_int("max_staleness", max_staleness, minimum=0)
    c = float(comm)
    if not (c >= 0 and c < float("inf")):
        raise InvalidInputError(f"comm must be a finite time >= 0, got {comm!r}")
    if not vision or not action:
        raise InvalidInputError("vision and action must each hold at least one stage's (forward, backward, update)")
    vis = [finite_floats(f"vision[{s}]", list(times), allow_zero=True) for s, times in enumerate(vision)]
    act = [finite_floats(f"action[{a}]", list(times), allow_zero=True) for a, times in enumerate(action)]
    for name, rows in (("vision", vis), ("action", act)):
        for index, row in enumerate(rows):
            if len(row) != 3:
                raise InvalidInputError(f"{name}[{index}] must be (forward, backward, update), got {row}")
    num_vision, num_action = len(vis), len(act)
    step = max(
        sum(f + b for f, b, _u in act[a:]) + act[a][2] + 2 * (num_action - 1 - a) * c for a in range(num_action)
    )
    chain = sum(f + b for f, b, _u in act) + 2 * (num_action - 1) * c
    candidates = [k * step]
    for s in range(num_vision):
        for last in range(s, num_vision):
            work = sum(f + b for f, b, _u in vis[s:last + 1]) + vis[s][2] + 2 * (last - s) * c
            candidates.append(work / (lag * (last - s) + 1))
        trip = (sum(f + b for f, b, _u in vis[s:]) + vis[s][2] + 2 * (num_vision - s) * c
                + chain + (k - 1) * step)
        candidates.append(trip / (1 + lag * (num_vision - s)))
    return max(candidates)
