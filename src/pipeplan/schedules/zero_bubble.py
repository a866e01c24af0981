"""The zero-bubble handcrafted schedules ZB-H1 and ZB-H2 (Qi et al., ICLR 2024).

Both split the backward into ``I`` (input gradient, on the critical path; the
paper's "B") and ``W`` (weight gradient, free to move), one stage per rank. In the
steady phase rank ``i`` of ``P`` repeats the triple ``F(x), I(x − b_i), W(x − w)``;
the offsets fix the warm-up (``F`` alone, then ``F I`` pairs) and the cool-down
(``I W`` pairs, then ``W`` alone)::

    from pipeplan.schedules.zero_bubble import zb_h1
    schedule = zb_h1(4, 8)
    [a.label for a in schedule.orders[3][:6]]   # ['F0', 'I0', 'F1', 'I1', 'F2', 'I2']

* ZB-H1: ``b_i = P − 1 − i``, ``w = P − 1``. Rank ``i`` runs 1F1B's ``P − 1 − i``
  warm-up forwards, then ``i`` ``F I`` pairs that postpone their ``W``; every
  rank holds at most ``min(m, P)`` microbatches (the first rank's 1F1B peak).
* ZB-H2: ``b_i = 2(P − 1 − i)``, ``w = 2(P − 1)``: twice the warm-up, so the
  ``I`` passes meet no bubble; every rank holds at most ``min(m, 2P − 1)``.

A microbatch stays in flight on a stage until its ``W`` (the stash ``W`` needs);
the bounds above count it so. With the paper's assumption ``F = B = W`` (times of
one microbatch on one stage, no communication) the bubble per rank,
``span − m·(F + B + W)``, is ``(P − 1)(F + B − W)`` for ZB-H1 and
``(P − 1)(F + B − 2W)`` = 0 for ZB-H2 (the paper's Table 2), once ``m`` is large
enough for the steady phase to exist (``m >= P`` for ZB-H1, ``m >= 2P − 1`` for
ZB-H2). The same rule serves every ``m >= 1``: indices outside ``0..m−1`` are
simply skipped, which keeps the order valid.
"""

from __future__ import annotations

from .._validation import positive_int
from ..errors import InvalidInputError
from ..schedule import Action, Schedule

__all__ = ["zb_h1", "zb_h2", "zb_h1_peak_inflight", "zb_h2_peak_inflight"]


def zb_h1_peak_inflight(num_stages: int, num_microbatches: int) -> int:
    """Peak microbatches in flight (until ``W``) on every rank of ZB-H1: ``min(m, P)``."""
    return min(num_microbatches, num_stages)


def zb_h2_peak_inflight(num_stages: int, num_microbatches: int) -> int:
    """Peak microbatches in flight (until ``W``) on every rank of ZB-H2: ``min(m, 2P − 1)``."""
    return min(num_microbatches, 2 * num_stages - 1)


def _check_split(backward: str, name: str) -> None:
    if backward != "split":
        raise InvalidInputError(
            f"backward must be 'split' for {name} (it moves the weight-gradient W passes), got {backward!r}"
        )


def _offset_schedule(
    num_stages: int,
    num_microbatches: int,
    backward_offsets: list[int],
    weight_offset: int,
    name: str,
) -> Schedule:
    """Rank ``i`` runs ``F(x), I(x − backward_offsets[i]), W(x − weight_offset)`` for x = 0, 1, ..."""
    orders = []
    for stage in range(num_stages):
        order = []
        for x in range(num_microbatches + weight_offset):
            if x < num_microbatches:
                order.append(Action("F", stage, x))
            b = x - backward_offsets[stage]
            if 0 <= b < num_microbatches:
                order.append(Action("I", stage, b))
            w = x - weight_offset
            if 0 <= w < num_microbatches:
                order.append(Action("W", stage, w))
        orders.append(order)
    return Schedule(orders, list(range(num_stages)), num_microbatches, name=name)


def zb_h1(num_stages: int, num_microbatches: int, *, backward: str = "split") -> Schedule:
    """Build ZB-H1: 1F1B's memory, a third of its bubble when ``F = B = W``.

    Args:
        num_stages: pipeline stages, one per rank (``P >= 1``).
        num_microbatches: microbatches per step (``m >= 1``).
        backward: must be ``"split"`` (``I`` = input gradient, ``W`` = weight gradient).

    Memory bound (tested): every rank holds at most ``min(m, P)`` microbatches,
    counting a microbatch until its ``W``.
    """
    num_stages = positive_int("num_stages", num_stages)
    num_microbatches = positive_int("num_microbatches", num_microbatches)
    _check_split(backward, "zb-h1")
    offsets = [num_stages - 1 - stage for stage in range(num_stages)]
    return _offset_schedule(num_stages, num_microbatches, offsets, num_stages - 1, "zb-h1")


def zb_h2(num_stages: int, num_microbatches: int, *, backward: str = "split") -> Schedule:
    """Build ZB-H2: no bubble when ``F = B = W``, for about twice 1F1B's memory.

    Args:
        num_stages: pipeline stages, one per rank (``P >= 1``).
        num_microbatches: microbatches per step (``m >= 1``).
        backward: must be ``"split"``.

    Memory bound (tested): every rank holds at most ``min(m, 2P − 1)`` microbatches,
    counting a microbatch until its ``W``.
    """
    num_stages = positive_int("num_stages", num_stages)
    num_microbatches = positive_int("num_microbatches", num_microbatches)
    _check_split(backward, "zb-h2")
    offsets = [2 * (num_stages - 1 - stage) for stage in range(num_stages)]
    return _offset_schedule(num_stages, num_microbatches, offsets, 2 * (num_stages - 1), "zb-h2")
