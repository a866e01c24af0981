"""ZB-V: the zero-bubble V schedule (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv v2).

The model is cut into ``S = 2P`` stages and rank ``r`` holds two chunks in a V:
stage ``r`` (on the way down) and stage ``2P − 1 − r`` (on the way up), so the
last rank holds the two middle stages and rank 0 the first and the last. The
backward is split into ``I`` (input gradient) and ``W`` (weight gradient)::

    from pipeplan.schedules.zb_v import zb_v
    schedule = zb_v(8, 8)                  # 4 ranks
    schedule.stages_of(0)                  # (0, 7)

Per rank ``r`` (chunk 0 = stage ``r``, chunk 1 = stage ``2P − 1 − r``; ``n =
max(m, 2P − 1)`` microbatches are laid out and those ``>= m`` dropped, which keeps
the order valid since no action depends on another microbatch):

1. ``2(P − r) − 1`` forwards of chunk 0;
2. ``r`` pairs ``F`` chunk 1, ``F`` chunk 0;
3. ``P − r`` triples ``F I W`` of chunk 1;
4. steady: ``F`` chunk 0 (while any are left), ``I W`` chunk 0, ``F I W`` chunk 1,
   until every forward is done;
5. cool-down: ``r`` pairs ``I`` chunk 0, ``I`` chunk 1; then ``P − r`` pairs
   ``I W`` of chunk 0; then the postponed ``W`` of chunk 1, then of chunk 0.

With ``F = B = W`` on every stage (one chunk's times), no communication and
``m >= 2P − 1``, no rank ever idles inside its span: the zero-bubble paper's
bubble rate is 0 and the step takes ``2m·(F + B + W) + (P − 1)·F``, the last
rank's wait for its first activation (tested). Peak memory equals 1F1B's first
rank: ``2P`` (stage, microbatch) pairs of half-size chunks, i.e. ``P``
microbatches' worth of a rank's layers.
"""

from __future__ import annotations

from .._validation import positive_int
from ..errors import InvalidInputError
from ..schedule import Action, Schedule
from .patterns import v_placement

__all__ = ["zb_v", "zb_v_placement", "zb_v_peak_inflight"]


def zb_v_placement(num_ranks: int) -> list[int]:
    """The V placement: stage ``s`` on rank ``s`` for ``s < P``, else ``2P − 1 − s`` (:func:`~.patterns.v_placement`)."""
    return list(v_placement(num_ranks, 2))


def zb_v_peak_inflight(rank: int, num_ranks: int, num_microbatches: int) -> int:
    """Peak (stage, microbatch) pairs in flight on ``rank`` (counted until ``W``).

    ``2P`` once ``m >= 2P − 1``. Below that the warm-up runs out of microbatches:
    the rank holds ``min(m, 2P − r − 1)`` chunk-0 forwards plus
    ``min(m, r + 1)`` chunk-1 ones at the end of its warm-up.
    """
    return min(num_microbatches, 2 * num_ranks - rank - 1) + min(num_microbatches, rank + 1)


def zb_v(num_stages: int, num_microbatches: int, *, backward: str = "split") -> Schedule:
    """Build the ZB-V schedule.

    Args:
        num_stages: total model stages ``S = 2P`` (an even number >= 2).
        num_microbatches: microbatches per step (``m >= 1``).
        backward: must be ``"split"``.

    Memory bound (tested): rank ``r`` holds at most ``zb_v_peak_inflight(r, P, m)``
    (stage, microbatch) pairs, which is ``2P`` for ``m >= 2P − 1``.

    Raises:
        InvalidInputError: an odd ``num_stages`` or a backward other than ``"split"``.
    """
    num_stages = positive_int("num_stages", num_stages)
    num_microbatches = positive_int("num_microbatches", num_microbatches)
    if backward != "split":
        raise InvalidInputError(
            f"backward must be 'split' for zb-v (it moves the weight-gradient W passes), got {backward!r}"
        )
    if num_stages % 2:
        raise InvalidInputError(
            f"num_stages must be even for zb-v (two stages per rank, S = 2P), got {num_stages}"
        )
    num_ranks = num_stages // 2
    laid_out = max(num_microbatches, 2 * num_ranks - 1)
    orders = []
    for rank in range(num_ranks):
        order = _rank_order(rank, num_ranks, laid_out)
        orders.append([a for a in order if a.microbatch < num_microbatches])
    return Schedule(orders, zb_v_placement(num_ranks), num_microbatches, name="zb-v")


def _rank_order(rank: int, num_ranks: int, num_microbatches: int) -> list[Action]:
    """Rank ``rank``'s order for ``num_microbatches >= 2P − 1`` (module doc, steps 1–5)."""
    down, up = rank, 2 * num_ranks - 1 - rank
    order: list[Action] = []
    next_f = {down: 0, up: 0}
    next_i = {down: 0, up: 0}
    next_w = {down: 0, up: 0}

    def run(kind: str, stage: int) -> None:
        counter = {"F": next_f, "I": next_i, "W": next_w}[kind]
        order.append(Action(kind, stage, counter[stage]))
        counter[stage] += 1

    for _ in range(2 * (num_ranks - rank) - 1):
        run("F", down)
    for _ in range(rank):
        run("F", up)
        run("F", down)
    for _ in range(num_ranks - rank):
        run("F", up)
        run("I", up)
        run("W", up)
    while next_f[up] < next_f[down] or next_f[down] < num_microbatches:
        if next_f[down] < num_microbatches:
            run("F", down)
        run("I", down)
        run("W", down)
        run("F", up)
        run("I", up)
        run("W", up)
    for _ in range(rank):
        run("I", down)
        run("I", up)
    for _ in range(num_ranks - rank):
        run("I", down)
        run("W", down)
    while next_w[up] < next_i[up]:
        run("W", up)
    while next_w[down] < next_i[down]:
        run("W", down)
    return order
