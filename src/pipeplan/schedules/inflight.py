"""How many microbatches each stage holds at its peak, read off a schedule's orders.

    from pipeplan.schedules.inflight import inflight_per_stage
    inflight_per_stage("1f1b", 4, 8)                          # (4, 3, 2, 1): min(m, P - p)
    inflight_per_stage("interleaved", 4, 8, virtual_stages=2)

A stage gains one at each ``F`` and loses one at its ``B`` (at ``W`` for a split
backward, whose stash lives until then). Fixed shapes are built once and cached;
schedules with a closed form in the registry (1F1B, GPipe:
:attr:`~pipeplan.schedules.ScheduleInfo.inflight_closed_form`) use it.
"""

from __future__ import annotations

import functools
from typing import Any

from ..costs import StageCosts
from ..errors import InvalidInputError
from . import SCHEDULES, build_schedule, schedule_info, schedule_options

__all__ = ["build_with_costs", "inflight_and_placement", "inflight_per_stage", "inflight_of_built"]


def inflight_per_stage(schedule: str, num_stages: int, num_microbatches: int, **options: Any) -> tuple[int, ...]:
    """Peak number of microbatches whose activations each stage holds under ``schedule``.

    Read off the schedule's per-rank orders (no costs needed: a rank runs its
    order one action at a time): a stage gains one at each ``F`` and loses one at
    its ``B`` (or at ``W`` for a split backward, whose stash lives until then).
    1F1B gives ``min(m, P − p)``, GPipe ``m``. Works for every registered schedule.
    """
    return inflight_and_placement(schedule, num_stages, num_microbatches, **options)[0]


def inflight_and_placement(
    schedule: str, num_stages: int, num_microbatches: int, **options: Any
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    closed_form = schedule_info(schedule).inflight_closed_form if not options else None
    if closed_form is not None:
        # The same numbers the orders give (tests check it), without building
        # S·m actions: 1F1B holds min(m, P - p), GPipe all m.
        return closed_form(num_stages, num_microbatches), tuple(range(num_stages))
    try:
        # each value with its type: virtual_stages=True is the builder's to refuse, not a cached 1's
        key = tuple(sorted((name, type(value).__qualname__, value) for name, value in options.items()))
        hash(key)
    except TypeError:  # an unhashable option (a costs object): build it every time
        return _inflight_of_built(schedule, num_stages, num_microbatches, tuple(options.items()))
    # the factory is part of the key: a name registered again builds anew
    return _cached_inflight(schedule, SCHEDULES.get(schedule), num_stages, num_microbatches, key)


@functools.lru_cache(maxsize=512, typed=True)
def _cached_inflight(schedule: str, factory: Any, num_stages: int, num_microbatches: int,
                     options: tuple[tuple[str, str, Any], ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The counts of a fixed shape, built once (the planner asks for the same shapes hundreds of times)."""
    del factory  # only part of the key
    return _inflight_of_built(schedule, num_stages, num_microbatches,
                              tuple((name, value) for name, _, value in options))


def _inflight_of_built(schedule: str, num_stages: int, num_microbatches: int,
                       options: tuple[tuple[str, Any], ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    built = build_with_costs(schedule, num_stages, num_microbatches, dict(options), None)
    if built.num_stages != num_stages:
        raise InvalidInputError(
            f"schedule {schedule!r} built {built.num_stages} stages, expected num_stages={num_stages}"
        )
    return _inflight_from_orders(built), built.placement


def build_with_costs(schedule: str, num_stages: int, num_microbatches: int, options: dict[str, Any], costs: Any) -> Any:
    """Build a registered schedule; one that takes ``costs`` gets them (uniform when ``None``)."""
    extra: dict[str, Any] = {}
    if "costs" in schedule_options(schedule) and "costs" not in options:
        extra["costs"] = costs if costs is not None else StageCosts.uniform(num_stages)
    return build_schedule(schedule, num_stages=num_stages, num_microbatches=num_microbatches, **options, **extra)


def inflight_of_built(built: Any) -> tuple[int, ...]:
    """Peak in-flight microbatches per stage of a built schedule (what :func:`inflight_per_stage` reads off).

    For a caller that holds the schedule already: ``inflight_per_stage(name, S, m, **options)``
    equals ``inflight_of_built(build_schedule(name, num_stages=S, num_microbatches=m, **options))``
    for a schedule that takes no ``costs`` (one that does is built with uniform costs there).
    """
    return _inflight_from_orders(built)


def _inflight_from_orders(built: Any) -> tuple[int, ...]:
    peak = [0] * built.num_stages
    for order in built.orders:
        live: dict[int, int] = {}
        for kind, stage, _mb in order:
            if kind.is_forward:
                live[stage] = live.get(stage, 0) + 1
                peak[stage] = max(peak[stage], live[stage])
            elif kind.releases_activation:
                live[stage] -= 1
    if built.forward_only:
        return (0,) * built.num_stages
    return tuple(peak)
