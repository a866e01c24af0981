"""Step-time refinement: simulate a partition under its schedule, and hill-climb its boundaries.

    from pipeplan.partition.steptime import StepTimer, improve_step_time
    step = StepTimer(profile, "1f1b", num_stages=4, micro=8, options={})
    step([0, 3, 14, 25, 32])        # simulated makespan of that partition, in the profile's unit

:func:`improve_step_time` moves one boundary by one layer at a time while the
simulated step improves (first improvement, memory limits respected): a local
search that never returns a slower step than its start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..layers import LayerProfile
from ..schedules import schedule_options
from ..schedules.inflight import build_with_costs
from ..simulate import simulate
from .problem import MinMaxProblem

__all__ = ["StepTimer", "improve_step_time"]


class StepTimer:
    """Simulated makespan of a partition under one schedule (rebuilt per partition
    for schedules that take the costs, such as ``"adaptive"``)."""

    def __init__(self, profile: LayerProfile, schedule: str, num_stages: int, micro: int, options: dict[str, Any]) -> None:
        self.profile = profile
        self.schedule = schedule
        self.num_stages = num_stages
        self.micro = micro
        self.options = options
        self.cost_aware = "costs" in schedule_options(schedule)
        self.fixed = None if self.cost_aware else build_with_costs(schedule, num_stages, micro, options, None)

    def __call__(self, bounds: Sequence[int]) -> float:
        sizes = [int(b - a) for a, b in zip(bounds[:-1], bounds[1:])]
        costs = self.profile.stage_costs(sizes)
        built = self.fixed or build_with_costs(self.schedule, self.num_stages, self.micro, self.options, costs)
        return float(simulate(built, costs, validate=False).makespan)


def improve_step_time(
    step: StepTimer, bounds: list[int], current: float, problem: MinMaxProblem
) -> tuple[list[int], float]:
    """First-improvement hill climbing: move one boundary by one layer while it helps."""
    best = list(bounds)
    improved = True
    budget = 20 * len(bounds) * len(bounds)
    while improved and budget > 0:
        improved = False
        for index in range(1, len(best) - 1):
            for delta in (-1, 1):
                trial = list(best)
                trial[index] += delta
                if not trial[index - 1] < trial[index] < trial[index + 1]:
                    continue
                if problem.mem_limit is not None and any(
                    problem.mem_limit[k][trial[k]] < trial[k + 1] for k in (index - 1, index)
                ):
                    continue
                budget -= 1
                value = step(trial)
                if value < current * (1 - 1e-12):
                    best, current, improved = trial, value, True
                    break
            if improved:
                break
    return best, current
