"""Simulating a schedule whose ranks share cores: each action slows while others compute.

:func:`pipeplan.simulate` gives every rank a processor of its own. Processes of
one machine that has fewer free cores than processes (two CPU ranks on a loaded
2-core VM, four ranks on two cores, several ranks on one GPU) share them: while
``k`` ranks compute at once each runs ``slowdown[k - 1]`` times slower than alone.
:func:`simulate_shared` charges exactly that, as a fluid (processor-sharing)
simulation::

    >>> import pipeplan
    >>> from pipeplan.predict.contention import simulate_shared
    >>> schedule = pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8)
    >>> costs, comm = pipeplan.StageCosts([30, 10, 10, 20]), pipeplan.CommModel()
    >>> simulate_shared(schedule, costs, comm, slowdown=(1.0, 1.9)).makespan   # measured by pipeplan profile
    1272.0
    >>> pipeplan.simulate(schedule, costs, comm).makespan                      # a core per rank
    750.0

Semantics: the same orders, dependencies and eager messages as
:func:`pipeplan.simulate` (the cross-rank edges are :meth:`Schedule.messages_into
<pipeplan.schedule.Schedule.messages_into>`; a message arrives ``comm`` time after
its producer ends; a rank waiting for one does not compute). Between two events (an
action ending, a message arriving) the number ``k`` of computing ranks is
constant and each of them progresses at ``1 / slowdown[k - 1]`` of an action's
alone-time per unit of time. With ``slowdown = (1.0,)`` (or all ones) the result
equals :func:`pipeplan.simulate` up to rounding. Beyond the measured table the
last factor holds (:meth:`~pipeplan.calibration.Calibration.slowdown_for`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .._validation import finite_floats
from ..calibration import Calibration
from ..costs import CommModel, StageCosts
from ..errors import DeadlockError, InvalidInputError
from ..schedule import Schedule
from ..simulate import check_arguments
from ..timeline import Timeline

__all__ = ["simulate_shared"]

_EPSILON = 1e-12


def simulate_shared(
    schedule: Schedule,
    costs: StageCosts,
    comm: CommModel | None = None,
    *,
    slowdown: Sequence[float] = (1.0,),
    validate: bool = True,
) -> Timeline:
    """Simulate one step of ``schedule`` on ranks that share cores (see the module doc).

    Args:
        schedule: the per-rank orders; validated first unless ``validate=False``.
        costs: per-stage costs of one microbatch *alone* on a process.
        comm: eager message model (``None``: free messages). Rendezvous sends
            are not modelled here; use :func:`pipeplan.simulate` for them.
        slowdown: ``slowdown[k - 1]`` for ``k`` ranks computing at once; the
            first entry must be 1, each >= 1 is usual but not required.
        validate: run :meth:`Schedule.validate` first.

    Returns:
        The predicted :class:`~pipeplan.timeline.Timeline` (``source="simulated"``).

    Raises:
        InvalidInputError: arguments of the wrong type (checked as :func:`pipeplan.simulate`
            checks them), costs that do not match the schedule, a rendezvous ``comm`` or a bad
            ``slowdown``.
    """
    check_arguments(schedule, costs, comm, validate)
    comm = comm or CommModel()
    if comm.send_mode != "eager":
        raise InvalidInputError("simulate_shared models eager sends only; got send_mode='rendezvous'")
    table = Calibration(slowdown=finite_floats("slowdown", slowdown))
    num_stages = schedule.num_stages
    costs.check_shape(num_stages, schedule.num_microbatches)
    if validate:
        schedule.validate()
    boundary = comm.boundary_times(num_stages)
    num_ranks = schedule.num_ranks

    # The schedule's flat numbering (rank 0's order, then rank 1's, ...): each action's
    # time alone and the cross-rank messages it waits for, (producer, message time).
    low = schedule.lowered()
    offsets = list(low.rank_offsets)
    flat = len(low.actions)
    start = [0.0] * flat
    end = [0.0] * flat
    durations = costs.durations(low.kind, low.stage, low.microbatch).tolist()
    needs: list[list[tuple[int, float]]] = [[] for _ in range(flat)]
    for producer, consumer, crossed in zip(low.producer.tolist(), low.consumer.tolist(), low.boundary.tolist()):
        needs[consumer].append((producer, boundary[crossed]))
    done = [math.nan] * flat  # end time of each finished action
    lengths = [len(order) for order in schedule.orders]

    pointer = [0] * num_ranks
    free_at = [0.0] * num_ranks
    running = [False] * num_ranks
    remaining = [0.0] * num_ranks
    now = 0.0
    while True:
        ready_at: list[float | None] = [None] * num_ranks
        for rank in range(num_ranks):
            if running[rank] or pointer[rank] >= lengths[rank]:
                continue
            ready = free_at[rank]
            for dep, message in needs[offsets[rank] + pointer[rank]]:
                produced = done[dep]
                if math.isnan(produced):
                    ready = math.nan
                    break
                ready = max(ready, produced + message)
            if not math.isnan(ready):
                ready_at[rank] = ready
        for rank in range(num_ranks):
            when = ready_at[rank]
            if when is not None and when <= now:
                index = offsets[rank] + pointer[rank]
                start[index] = now
                running[rank] = True
                remaining[rank] = durations[index]
                ready_at[rank] = None
        computing = [rank for rank in range(num_ranks) if running[rank]]
        upcoming = [ready for ready in ready_at if ready is not None]
        if not computing and not upcoming:
            break
        factor = table.slowdown_for(len(computing)) if computing else 1.0
        finish = min((now + remaining[rank] * factor for rank in computing), default=math.inf)
        arrival = min(upcoming, default=math.inf)
        later = min(finish, arrival)
        elapsed = (later - now) / factor
        for rank in computing:
            remaining[rank] -= elapsed
        now = later
        for rank in computing:
            if remaining[rank] <= _EPSILON * max(1.0, abs(now)) or now + remaining[rank] * factor <= now:
                index = offsets[rank] + pointer[rank]
                end[index] = now
                done[index] = now
                free_at[rank] = now
                running[rank] = False
                pointer[rank] += 1
    stuck = [rank for rank in range(num_ranks) if pointer[rank] < lengths[rank]]
    if stuck:  # validate() rules this out; kept for validate=False callers
        raise DeadlockError(
            "schedule deadlocks: " + "; ".join(
                f"rank {rank} is waiting at {schedule.orders[rank][pointer[rank]]}" for rank in stuck
            )
        )
    return Timeline(
        schedule,
        start,
        end,
        activation_bytes=costs.activation_bytes,
        weight_stash_bytes=costs.weight_stash_bytes,
        source="simulated",
    )
