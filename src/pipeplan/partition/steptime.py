"""Simulating a partition: the one path from layers per stage to a Timeline, and step-time refinement.

    from pipeplan.partition.steptime import simulate_partition, StepTimer
    simulate_partition(profile, [3, 11, 11, 7], "1f1b", 8).makespan   # in the profile's unit
    step = StepTimer(profile, "1f1b", num_stages=4, micro=8, options={})
    step([0, 3, 14, 25, 32])        # the same makespan, from the boundaries

:func:`simulate_partition` sums the profile's layers per stage, builds the
schedule for those costs (a schedule that takes the costs, such as
``"adaptive"``, gets them) unless it is given one built already, and simulates
it; :func:`partition_schedule` is its build step alone (for an export's CSV).
:func:`improve_step_time` moves one boundary by one layer at a time while the
simulated step improves (first improvement, memory limits respected): a local
search that never returns a slower step than its start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..costs import CommModel, StageCosts
from ..layers import LayerProfile
from ..schedule import Schedule
from ..schedules import schedule_options
from ..schedules.inflight import build_with_costs
from ..simulate import simulate
from ..timeline import Timeline
from .problem import MinMaxProblem

__all__ = ["StepTimer", "improve_step_time", "partition_schedule", "simulate_partition"]


def partition_schedule(
    schedule: str,
    num_stages: int,
    num_microbatches: int,
    costs: StageCosts | None = None,
    *,
    options: Mapping[str, Any] | None = None,
    placement: Sequence[int] | None = None,
) -> Schedule:
    """Build the registered ``schedule`` for a partition of ``num_stages`` stages.

    Args:
        schedule: a registered schedule name.
        num_stages: stages ``S`` (layers per stage has ``S`` entries).
        num_microbatches: microbatches per step ``m``.
        costs: the stages' costs, for a schedule that takes them (``"adaptive"``;
            uniform when ``None``); the others ignore them.
        options: the generator's keyword options (``virtual_stages``, ...).
        placement: a stage → rank map, passed as the ``placement`` option (for
            ``"adaptive"`` with several chunks per rank).
    """
    extra = dict(options or {})
    if placement is not None:
        extra["placement"] = list(placement)
    return build_with_costs(schedule, num_stages, num_microbatches, extra, costs)


def simulate_partition(
    profile: LayerProfile | StageCosts,
    layers_per_stage: Sequence[int],
    schedule: str | Schedule,
    num_microbatches: int,
    *,
    options: Mapping[str, Any] | None = None,
    comm: CommModel | None = None,
    placement: Sequence[int] | None = None,
) -> Timeline:
    """Simulate one step of ``layers_per_stage`` under ``schedule`` (not validated: the builders are trusted).

    Args:
        profile: per-layer costs, summed over each stage's layers; or the
            stages' :class:`~pipeplan.costs.StageCosts` already summed (the
            planner's, with recompute), one entry per stage.
        layers_per_stage: layers of each stage in model order.
        schedule: a registered name, built here for these costs by
            :func:`partition_schedule`; or a :class:`~pipeplan.schedule.Schedule`
            built already (then ``num_microbatches``, ``options`` and
            ``placement`` are not used).
        num_microbatches: microbatches per step ``m``.
        options: the generator's keyword options.
        comm: the message model (``None``: free messages).
        placement: a stage → rank map for the generator (see :func:`partition_schedule`).

    Returns:
        The simulated :class:`~pipeplan.timeline.Timeline`; its ``schedule`` is
        the one that ran, times are in the profile's unit.
    """
    costs = profile if isinstance(profile, StageCosts) else profile.stage_costs(layers_per_stage)
    built = schedule if isinstance(schedule, Schedule) else partition_schedule(
        schedule, len(layers_per_stage), num_microbatches, costs, options=options, placement=placement)
    return simulate(built, costs, comm, validate=False)


class StepTimer:
    """Simulated makespan of a partition, given by its boundaries, under one schedule.

    A schedule that does not take the costs is built once; one that does (such as
    ``"adaptive"``) is rebuilt for each partition.
    """

    def __init__(self, profile: LayerProfile, schedule: str, num_stages: int, micro: int, options: dict[str, Any]) -> None:
        self.profile = profile
        self.schedule = schedule
        self.num_stages = num_stages
        self.micro = micro
        self.options = options
        self.cost_aware = "costs" in schedule_options(schedule)
        self.fixed = None if self.cost_aware else partition_schedule(schedule, num_stages, micro, options=options)

    def __call__(self, bounds: Sequence[int]) -> float:
        sizes = [int(b - a) for a, b in zip(bounds[:-1], bounds[1:])]
        timeline = simulate_partition(self.profile, sizes, self.fixed or self.schedule, self.micro, options=self.options)
        return float(timeline.makespan)


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
