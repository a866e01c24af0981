"""What the cost model can claim about a step time: three significant figures, and which plans tie there.

    from pipeplan.planner.resolution import rounded_step, tie_leaders
    rounded_step(992.763)                      # 993.0
    tie_leaders([991.66, 992.05, 1010.0])      # [None, 0, None]: plan 1 ties with plan 0

The roofline cost model is calibrated to a few percent (docs/cost_model.md), so
``992.763`` and ``992.41`` ms are not two answers: the planner prints step times
to :data:`STEP_FIGURES` significant figures and says when plans agree at that
resolution (``= #1`` in the table, ``ties_with`` in ``--json``).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["STEP_FIGURES", "rounded_step", "tie_leaders", "RESOLUTION_NOTE"]

#: Significant figures of a step time the planner stands behind.
STEP_FIGURES = 3

#: The assumption line that states the resolution.
RESOLUTION_NOTE = (f"shown to {STEP_FIGURES} significant figures, what the cost model can claim; plans equal at "
                   "that resolution tie (= #N)")


def rounded_step(step_time: float) -> float:
    """``step_time`` to :data:`STEP_FIGURES` significant figures (``992.763`` → ``993.0``)."""
    return float(f"{step_time:.{STEP_FIGURES}g}")


def tie_leaders(step_times: Sequence[float | None]) -> list[int | None]:
    """For each step time, the index of the first earlier one equal to it at the resolution, else ``None``."""
    first: dict[float, int] = {}
    leaders: list[int | None] = []
    for index, step in enumerate(step_times):
        if step is None:
            leaders.append(None)
            continue
        key = rounded_step(step)
        leaders.append(first.get(key))
        first.setdefault(key, index)
    return leaders
