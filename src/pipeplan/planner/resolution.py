"""What the cost model can claim about a step time: three significant figures, and which plans tie there.

    from pipeplan.planner.resolution import rounded_step, tie_leaders
    rounded_step(992.763)                      # 993.0
    tie_leaders([991.66, 992.05, 1010.0])      # [None, 0, None]: plan 1 ties with plan 0 (under 1 ms apart)

The roofline cost model is calibrated to a few percent (docs/cost_model.md), so
``992.763`` and ``992.41`` ms are not two answers: the planner prints step times
to :data:`STEP_FIGURES` significant figures and says when plans agree at that
resolution (``= #1`` in the table, ``ties_with``, 0-based, in ``--json``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..units import FIGURES

__all__ = ["STEP_FIGURES", "rounded_step", "resolution", "tie_leaders", "RESOLUTION_NOTE"]

#: Significant figures of a step time the planner stands behind (the one number: :data:`pipeplan.units.FIGURES`).
STEP_FIGURES = FIGURES

#: The assumption line that states the resolution.
RESOLUTION_NOTE = (f"shown to {STEP_FIGURES} significant figures, what the cost model can claim; a plan less than "
                   "one unit of the last figure slower than a faster one ties with it (= #N)")


def rounded_step(step_time: float) -> float:
    """``step_time`` to :data:`STEP_FIGURES` significant figures (``992.763`` → ``993.0``)."""
    return float(f"{step_time:.{STEP_FIGURES}g}")


def resolution(step_time: float) -> float:
    """One unit of the last figure shown: ``1.0`` for ``992.763``, ``0.1`` for ``99.2``."""
    return 10.0 ** (math.floor(math.log10(abs(step_time))) - (STEP_FIGURES - 1)) if step_time else 0.0


def tie_leaders(step_times: Sequence[float | None]) -> list[int | None]:
    """For each step time (fastest first), the first earlier plan it ties with, else ``None``.

    Two plans tie when they differ by less than one unit of the faster one's last
    shown figure (:func:`resolution`): ``747.33`` and ``747.91`` tie although they
    round to 747 and 748; ``788.0`` and ``791.2`` do not. A plan is compared with
    the first plan of its group, so ties do not chain.
    """
    leaders: list[int | None] = []
    group: int | None = None
    for index, step in enumerate(step_times):
        lead = step_times[group] if group is not None else None
        if step is not None and lead is not None and abs(step - lead) < resolution(lead):
            leaders.append(group)
            continue
        leaders.append(None)
        group = index if step is not None else None
    return leaders
