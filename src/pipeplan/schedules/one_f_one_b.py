"""1F1B (PipeDream-flush), the order Megatron-LM's non-interleaved schedule runs.

Stage ``p`` of ``P`` runs ``min(m, P - p - 1)`` warm-up forwards, then alternates
one forward and one backward, then drains the remaining backwards. At most
``min(m, P - p)`` microbatches are in flight on stage ``p``::

    from pipeplan.schedules.one_f_one_b import one_f_one_b
    schedule = one_f_one_b(4, 8)
    [a.label for a in schedule.orders[3][:4]]   # ['F0', 'B0', 'F1', 'B1']
"""

from __future__ import annotations

from .._validation import positive_int
from ..schedule import Action, BackwardMode, Schedule, kinds_for

__all__ = ["one_f_one_b", "warmup_forwards"]


def warmup_forwards(stage: int, num_stages: int, num_microbatches: int) -> int:
    """Forwards stage ``stage`` runs before its first backward: ``min(m, P - p - 1)``."""
    return min(num_microbatches, num_stages - stage - 1)


def one_f_one_b(num_stages: int, num_microbatches: int, *, backward: BackwardMode = "full") -> Schedule:
    """Build the 1F1B schedule.

    Args:
        num_stages: pipeline stages, one per rank (``P >= 1``).
        num_microbatches: microbatches per step (``m >= 1``).
        backward: ``"full"`` (``B``); ``"split"`` runs ``I`` and right after it ``W``
            (same timing as the full backward); ``"none"`` gives the forward-only
            order, which is GPipe's.
    """
    num_stages = positive_int("num_stages", num_stages)
    num_microbatches = positive_int("num_microbatches", num_microbatches)
    kinds_for(backward)  # raises on an unknown mode
    orders = []
    for stage in range(num_stages):
        if backward == "none":
            orders.append([Action("F", stage, mb) for mb in range(num_microbatches)])
            continue
        warmup = warmup_forwards(stage, num_stages, num_microbatches)
        order = [Action("F", stage, mb) for mb in range(warmup)]

        def backward_of(mb: int) -> list[Action]:
            if backward == "split":
                return [Action("I", stage, mb), Action("W", stage, mb)]
            return [Action("B", stage, mb)]

        for step in range(num_microbatches - warmup):
            order.append(Action("F", stage, warmup + step))
            order.extend(backward_of(step))
        for mb in range(num_microbatches - warmup, num_microbatches):
            order.extend(backward_of(mb))
        orders.append(order)
    return Schedule(orders, list(range(num_stages)), num_microbatches, name="1f1b")
