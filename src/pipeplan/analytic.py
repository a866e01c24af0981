"""Closed forms for pipeline bubbles, step time and activation memory.

Each formula is tied to the simulator by tests (``tests/test_analytic.py``)::

    from pipeplan import analytic
    analytic.uniform_bubble(4, 8)                          # 3/11
    analytic.asymmetric_forward_bubble([30, 10, 10, 20], 8)  # lesson 16's formula
    analytic.asymmetric_bubble_limit([30, 10, 10, 20])       # 1 - mean/max = 5/12

Times are in any one unit; bytes are bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._validation import finite_floats, positive_int
from .costs import CommModel, StageCosts
from .errors import InvalidInputError
from .schedule import Kind, Payload, Schedule

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
    """A bound no order of ``schedule``'s actions can beat.

    ``max(busiest rank's total work, longest single-microbatch critical path)``;
    the critical path runs every ``F`` down, every ``B`` (or ``I``) back up (then
    ``W`` of stage 0 when split), paying for each of the microbatch's messages.
    """
    comm = comm or CommModel()
    stages = schedule.num_stages
    costs.check_shape(stages, schedule.num_microbatches)
    work = [0.0] * schedule.num_ranks
    for rank, order in enumerate(schedule.orders):
        work[rank] = sum(costs.duration(k, s, mb) for k, s, mb in order)
    boundary = comm.boundary_times(stages)
    # Every microbatch crosses the same boundaries (the placement's); read them off microbatch 0.
    crossed = {payload: sorted(m.boundary for m in schedule.messages() if m.producer.microbatch == 0
                               and m.payload is payload) for payload in Payload}
    down = sum(boundary[b] for b in crossed[Payload.ACTIVATION])
    up = sum(boundary[b] for b in crossed[Payload.GRADIENT])
    gradient = schedule.gradient_kind
    path = 0.0
    for mb in range(schedule.num_microbatches):
        length = sum(costs.duration(Kind.F, s, mb) for s in range(stages)) + down
        if gradient is not None:
            length += sum(costs.duration(gradient, s, mb) for s in range(stages)) + up
            if schedule.split_backward:
                length += costs.duration(Kind.W, 0, mb)
        path = max(path, length)
    return max(max(work), path)
