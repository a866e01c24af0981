"""GPipe: every forward, then every backward (Huang et al., 2019).

Each stage sits on its own rank; stage ``p`` runs ``F(p, 0..m-1)`` and then
``B(p, 0..m-1)``, so it holds all ``m`` microbatches' activations at its peak::

    from pipeplan.schedules.gpipe import gpipe
    schedule = gpipe(4, 8)
    schedule.orders[0][:2]   # (Action('F', 0, 0), Action('F', 0, 1))
"""

from __future__ import annotations

from .._validation import positive_int
from ..schedule import Action, BackwardMode, Schedule, kinds_for

__all__ = ["gpipe"]


def gpipe(num_stages: int, num_microbatches: int, *, backward: BackwardMode = "full") -> Schedule:
    """Build the GPipe schedule.

    Args:
        num_stages: pipeline stages, one per rank (``P >= 1``).
        num_microbatches: microbatches per step (``m >= 1``).
        backward: ``"full"`` (``B``), ``"split"`` (each ``W`` right after its ``I``, which
            times the same as the full backward) or ``"none"`` (forward only).
    """
    num_stages = positive_int("num_stages", num_stages)
    num_microbatches = positive_int("num_microbatches", num_microbatches)
    kinds_for(backward)  # raises on an unknown mode
    orders = []
    for stage in range(num_stages):
        order = [Action("F", stage, mb) for mb in range(num_microbatches)]
        for mb in range(num_microbatches):
            if backward == "full":
                order.append(Action("B", stage, mb))
            elif backward == "split":
                order += [Action("I", stage, mb), Action("W", stage, mb)]
        orders.append(order)
    return Schedule(orders, list(range(num_stages)), num_microbatches, name="gpipe")
