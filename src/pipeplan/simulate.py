"""Exact, deterministic simulation of a schedule on unequal stage costs.

Each rank runs its order one action at a time. An action starts when its rank is
free and its inputs have arrived; a message between ranks arrives
``CommModel`` time after it was sent (eager) or after both sides were ready
(rendezvous). The result is a :class:`~pipeplan.timeline.Timeline`::

    from pipeplan import build_schedule, simulate, StageCosts
    tl = simulate(build_schedule("1f1b", num_stages=4, num_microbatches=8), StageCosts([30, 10, 10, 20]))
    tl.makespan, tl.bubble_ratio

The simulation is event driven: a rank that waits for a message is parked on it
and woken when it is produced, so the cost is linear in the number of actions.
"""

from __future__ import annotations

import math
from collections import deque

from .costs import CommModel, StageCosts
from .errors import DeadlockError, InvalidInputError
from .schedule import KINDS, Action, Schedule
from .timeline import Timeline

__all__ = ["simulate"]

_NO_SEND = -1
_POSTED_AT_ZERO = -2


def simulate(
    schedule: Schedule,
    costs: StageCosts,
    comm: CommModel | None = None,
    *,
    validate: bool = True,
) -> Timeline:
    """Simulate one training step of ``schedule`` with ``costs`` and ``comm``.

    Args:
        schedule: the per-rank orders; validated first unless ``validate=False``.
        costs: per-stage, per-microbatch costs (must match the schedule's shape).
        comm: communication model; ``None`` means free, eager messages.
        validate: run :meth:`Schedule.validate` first (skip only for schedules
            that a generator has just built and a test has validated).

    Returns:
        The predicted :class:`Timeline`.

    Raises:
        InvalidInputError: costs that do not match the schedule.
        InvalidScheduleError: see :meth:`Schedule.validate`.
        DeadlockError: rendezvous sends that wait on each other in a cycle.
    """
    comm = comm or CommModel()
    num_stages = schedule.num_stages
    num_mb = schedule.num_microbatches
    costs.check_shape(num_stages, num_mb)
    if validate:
        schedule.validate()
    boundary = comm.boundary_times(num_stages)
    rendezvous = comm.send_mode == "rendezvous"
    kind_index = {kind: index for index, kind in enumerate(KINDS)}

    def ident(action: Action) -> int:
        kind, stage, mb = action
        return (kind_index[kind] * num_stages + stage) * num_mb + mb

    # Per-rank compiled orders: (flat index, id, duration, dep id, dep comm).
    flat_index: dict[int, int] = {}
    predecessor: dict[Action, int] = {}
    incoming = {message.consumer: message for message in schedule.messages()}
    compiled: list[list[tuple[int, int, float, int, float]]] = []
    flat = 0
    for order in schedule.orders:
        previous = _POSTED_AT_ZERO
        rows = []
        for action in order:
            aid = ident(action)
            flat_index[aid] = flat
            predecessor[action] = previous
            previous = aid
            dep, dep_comm = -1, 0.0
            received = incoming.get(action)
            if received is not None:
                dep, dep_comm = ident(received.producer), boundary[received.boundary]
            rows.append((flat, aid, costs.duration(*action), dep, dep_comm))
            flat += 1
        compiled.append(rows)

    # Rendezvous: a send completes once the receiver has posted (finished the action
    # before the consumer) and the transfer is done.
    sends: dict[int, tuple[int, float]] = {}
    if rendezvous:
        for sent in schedule.messages():
            sends[ident(sent.producer)] = (predecessor[sent.consumer], boundary[sent.boundary])

    total = flat
    start = [0.0] * total
    end = [0.0] * total
    free_after = [0.0] * total
    done_at: dict[int, float] = {}
    num_ranks = schedule.num_ranks
    pointer = [0] * num_ranks
    rank_free = [0.0] * num_ranks
    last_end = [0.0] * num_ranks  # compute end of the rank's previous action (its receives are posted then)
    pending_send: list[int] = [_NO_SEND] * num_ranks  # id of a finished action whose send is unresolved
    waiters: dict[int, list[int]] = {}
    queue = deque(range(num_ranks))
    queued = [True] * num_ranks

    while queue:
        rank = queue.popleft()
        queued[rank] = False
        rows = compiled[rank]
        position = pointer[rank]
        free = rank_free[rank]
        prev_end = last_end[rank]
        while True:
            blocker = -1
            if pending_send[rank] != _NO_SEND:
                sender = pending_send[rank]
                pred, message = sends[sender]
                if pred == _POSTED_AT_ZERO:
                    posted = 0.0
                else:
                    posted = done_at.get(pred, -1.0)
                    if posted < 0.0:
                        blocker = pred
                if blocker < 0:
                    free = max(prev_end, posted) + message
                    free_after[flat_index[sender]] = free
                    pending_send[rank] = _NO_SEND
            if blocker < 0 and position < len(rows):
                index, aid, duration, dep, dep_comm = rows[position]
                ready = free
                if dep >= 0:
                    produced = done_at.get(dep, -1.0)
                    if produced < 0.0:
                        blocker = dep
                    else:
                        if rendezvous:
                            arrival = max(produced, prev_end) + dep_comm
                        else:
                            arrival = produced + dep_comm
                        if arrival > ready:
                            ready = arrival
                if blocker < 0:
                    finish = ready + duration
                    start[index] = ready
                    end[index] = finish
                    free_after[index] = finish
                    done_at[aid] = finish
                    prev_end = finish
                    free = finish
                    position += 1
                    if rendezvous and aid in sends:
                        pending_send[rank] = aid
                    woken = waiters.pop(aid, None)
                    if woken:
                        for other in woken:
                            if not queued[other]:
                                queued[other] = True
                                queue.append(other)
                    continue
            if blocker >= 0:
                waiters.setdefault(blocker, []).append(rank)
            break
        pointer[rank] = position
        rank_free[rank] = free
        last_end[rank] = prev_end

    stuck = [
        r for r in range(num_ranks) if pointer[r] < len(compiled[r]) or pending_send[r] != _NO_SEND
    ]
    if stuck:
        actions = [action for order in schedule.orders for action in order]
        by_id = {aid: actions[index] for aid, index in flat_index.items()}
        raise DeadlockError(_describe_deadlock(schedule, stuck, pointer, pending_send, sends, by_id))
    if not math.isfinite(max(free_after, default=0.0) * num_ranks):  # busy sums stay finite too
        raise InvalidInputError(
            "the step's makespan overflows to infinity; costs or communication times are too large "
            "to add up in floating point (rescale them, e.g. to seconds)"
        )
    return Timeline(
        schedule,
        start,
        end,
        free_after,
        activation_bytes=costs.activation_bytes,
        weight_stash_bytes=costs.weight_stash_bytes,
        source="simulated",
    )


def _describe_deadlock(
    schedule: Schedule,
    stuck: list[int],
    pointer: list[int],
    pending: list[int],
    sends: dict[int, tuple[int, float]],
    by_id: dict[int, Action],
) -> str:
    parts = []
    for rank in stuck:
        if pending[rank] != _NO_SEND:
            sent = by_id[pending[rank]]
            awaited = by_id[sends[pending[rank]][0]]
            parts.append(f"rank {rank} is blocked sending the output of {sent}; its receiver posts the "
                         f"receive only after {awaited}")
        else:
            parts.append(f"rank {rank} is waiting at {_action_at(schedule, rank, pointer[rank])}")
    return "rendezvous sends deadlock (each waits for a receiver that is itself blocked): " + "; ".join(parts)


def _action_at(schedule: Schedule, rank: int, position: int) -> str:
    order = schedule.orders[rank]
    return str(order[position]) if position < len(order) else "the end of its order"
