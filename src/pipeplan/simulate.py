"""Exact, deterministic simulation of a schedule on unequal stage costs.

Each rank runs its order one action at a time. An action starts when its rank is
free and its inputs have arrived; a message between ranks arrives
``CommModel`` time after it was sent (eager) or after both sides were ready
(rendezvous). The result is a :class:`~pipeplan.timeline.Timeline`::

    >>> from pipeplan import build_schedule, simulate, StageCosts
    >>> schedule, costs = build_schedule("1f1b", num_stages=4, num_microbatches=8), StageCosts([30, 10, 10, 20])
    >>> tl = simulate(schedule, costs)
    >>> tl.makespan, round(tl.bubble_ratio, 3)
    (750.0, 0.44)
    >>> simulate(schedule, costs, iterations=4, optimizer="overlap").steady_step_time
    750.0

The simulation is event driven: a rank that waits for a message is parked on it
and woken when it is produced, so the cost is linear in the number of actions.
The messages come from :meth:`Schedule.messages` (through its integer form,
:meth:`Schedule.lowered`); what the kernel needs of a schedule is compiled once and
kept on the schedule (:mod:`pipeplan._simulate_compiled`), so simulating one schedule
under many costs pays it once.

Several iterations: ``iterations=k`` plays ``k`` training steps back to back. With
``optimizer="barrier"`` every rank starts step ``i + 1`` when the slowest rank has
finished step ``i`` (an optimizer step that waits for all ranks, e.g. for a global
gradient-norm clip); with ``"overlap"`` each rank starts step ``i + 1`` as soon as
its own part of step ``i`` is done. The optimizer step itself takes no time.

Ranks sharing cores (fewer free cores than processes: two CPU ranks on a loaded
2-core VM, several ranks on one GPU): with ``slowdown``, while ``k`` ranks compute at
once each progresses at ``1 / slowdown[k - 1]`` of an action's alone-time per unit of
time (a processor-sharing clock; the same orders, dependencies and eager messages)::

    >>> simulate(schedule, costs, slowdown=(1.0, 1.9)).makespan   # a table measured by pipeplan profile
    1272.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from ._simulate_compiled import _NO_SEND, _POSTED_AT_START, _Compiled, _compile, _Replay
from ._validation import expect_instance, finite_floats, positive_int
from .costs import CommModel, StageCosts
from .errors import DeadlockError, InvalidInputError
from .limits import check_iterations_size, check_simulation_size
from .schedule import Message, Schedule
from .timeline import Timeline

__all__ = ["simulate", "check_arguments", "OptimizerMode", "OPTIMIZER_MODES"]

OptimizerMode = Literal["barrier", "overlap"]
OPTIMIZER_MODES: tuple[str, ...] = ("barrier", "overlap")

_EPSILON = 1e-12  # relative: a sharing rank whose remaining work is below it has finished


def simulate(
    schedule: Schedule,
    costs: StageCosts,
    comm: CommModel | None = None,
    *,
    validate: bool = True,
    iterations: int = 1,
    optimizer: OptimizerMode = "barrier",
    slowdown: Sequence[float] | None = None,
) -> Timeline:
    """Simulate ``iterations`` training steps of ``schedule`` with ``costs`` and ``comm``.

    Args:
        schedule: the per-rank orders; validated first unless ``validate=False``.
        costs: per-stage, per-microbatch costs (must match the schedule's shape).
        comm: communication model; ``None`` means free, eager messages.
        validate: run :meth:`Schedule.validate` first (skip only for schedules
            that a generator has just built and a test has validated).
        iterations: training steps played back to back (``>= 1``).
        optimizer: between steps, ``"barrier"`` (every rank waits for the slowest)
            or ``"overlap"`` (each rank goes on when its own part is done); see the
            module doc.
        slowdown: ranks share cores: ``slowdown[k - 1]`` for ``k`` ranks computing at
            once (``slowdown[0] = 1``; the last entry beyond the table), a processor-sharing
            clock with eager sends (see the module doc). ``None``: a core per rank.

    Returns:
        The predicted :class:`Timeline` of the first step (times from its start at 0),
        with ``rank_step_ends`` (when each rank finished each step), ``step_ends`` (when
        the last one did) and ``steady_step_time`` (the last step's time) covering all
        ``iterations``.

    Raises:
        InvalidInputError: arguments of the wrong type, costs that do not match the
            schedule, ``iterations < 1``, an unknown ``optimizer``, a bad ``slowdown`` or one with
            rendezvous sends, or a schedule (or ``iterations``) too large to simulate in the memory
            available.
        InvalidScheduleError: see :meth:`Schedule.validate`.
        DeadlockError: rendezvous sends that wait on each other in a cycle; names the
            ranks, the messages and what each receiver does before posting.
    """
    check_arguments(schedule, costs, comm, validate)
    comm = comm or CommModel()
    iterations = positive_int("iterations", iterations)
    if optimizer not in OPTIMIZER_MODES:
        raise InvalidInputError(f"optimizer must be one of {', '.join(OPTIMIZER_MODES)}, got {optimizer!r}")
    sharing = None if slowdown is None else _check_slowdown(slowdown, comm)
    num_stages = schedule.num_stages
    costs.check_shape(num_stages, schedule.num_microbatches)
    check_iterations_size(iterations, schedule.num_ranks)
    boundary = np.asarray(comm.boundary_times(num_stages), dtype=float)
    if comm.microbatch_bytes is not None:
        comm.message_times(num_stages, schedule.num_microbatches)  # the shape, checked before any work
    if validate:
        schedule.validate()
    compiled = schedule.cached("simulate", lambda: _compile(schedule))
    low = schedule.lowered()
    count = len(low.actions)
    durations = costs.durations(low.kind, low.stage, low.microbatch)
    if not len(low.boundary):
        message_time = np.zeros(0)
    elif comm.microbatch_bytes is None:
        message_time = boundary[low.boundary]
    else:  # each message at its microbatch's own bytes
        message_time = comm.message_times(num_stages, schedule.num_microbatches)[
            low.boundary, low.microbatch[compiled.senders]]
    rendezvous = comm.send_mode == "rendezvous"
    receive_time = np.zeros(count)
    receive_time[compiled.receivers] = message_time
    send_time = receive_time
    if rendezvous:
        send_time = np.zeros(count)
        send_time[compiled.senders] = message_time

    num_ranks = schedule.num_ranks
    begin = [0.0] * num_ranks
    first: tuple[list[float], list[float], list[float] | np.ndarray] | None = None
    rank_ends: list[list[float]] = []
    start: list[float]
    end: list[float]
    blocked: list[float] | np.ndarray
    for _ in range(iterations):
        replay = None if sharing is not None else compiled.replay(schedule, rendezvous)
        if sharing is not None:
            start, end, done = _shared_step(compiled, durations.tolist(), receive_time.tolist(), begin, schedule, sharing)
            blocked = end
        elif replay is None:  # first simulation in this mode: event driven, and record the order
            if rendezvous:
                start, end, blocked, done, runs = _rendezvous_step(
                    compiled, durations.tolist(), receive_time.tolist(), send_time.tolist(), begin, schedule)
            else:
                start, end, done, runs = _eager_step(
                    compiled, durations.tolist(), receive_time.tolist(), begin, schedule)
                blocked = end
            compiled.recorded[rendezvous] = runs
        elif rendezvous:
            start, end, blocked, done = _replay_rendezvous(replay, durations, receive_time, send_time, begin)
        else:
            start, end, done = _replay_eager(replay, durations, receive_time, begin)
            blocked = end
        if first is None:
            first = (start, end, blocked)
        rank_ends.append(done)
        step_end = max(done)
        begin = [step_end] * num_ranks if optimizer == "barrier" else done
    assert first is not None
    start_a, end_a = np.asarray(first[0], dtype=float), np.asarray(first[1], dtype=float)
    blocked_a = end_a if first[2] is first[1] else np.asarray(first[2], dtype=float)
    makespan = float(blocked_a.max()) if count else 0.0
    if not math.isfinite(makespan * num_ranks) or not math.isfinite(max(rank_ends[-1]) * num_ranks):
        raise InvalidInputError(
            "the step's makespan overflows to infinity; costs or communication times are too large "
            "to add up in floating point (rescale them, e.g. to seconds)"
        )
    timeline = Timeline(
        schedule,
        start_a,
        end_a,
        None if blocked_a is end_a else blocked_a,
        activation_bytes=costs.activation_bytes,
        weight_stash_bytes=costs.weight_stash_bytes,
        source="simulated",
    )
    timeline.set_iterations(rank_ends, optimizer)
    return timeline


def _fresh_state(
    compiled: _Compiled, count: int, begin: list[float]
) -> tuple[list[int], list[int], list[float], list[float], list[int], list[float]]:
    """The event-driven kernels' start: offsets, deps, start, end (-1: not run yet; every real
    end is >= 0), each rank's next action and its free time."""
    offsets = compiled.rank_offsets
    return offsets, compiled.dep, [0.0] * count, [-1.0] * count, offsets[:-1], list(begin)


def _eager_step(
    compiled: _Compiled,
    durations: list[float],
    receive_time: list[float],
    begin: list[float],
    schedule: Schedule,
) -> tuple[list[float], list[float], list[float], list[int]]:
    """One step with eager sends: ``(start, end, when each rank is done, computed runs)``.

    The runs ``[first, stop, first, stop, ...]`` list the actions in the order they were computed.
    """
    offsets, dep, start, end, pointer, free = _fresh_state(compiled, len(durations), begin)
    waiter = [-1] * len(durations)  # producer -> the rank parked on it (one consumer per producer)
    runs: list[int] = []
    record = runs.append
    queue = list(range(len(begin)))
    while queue:
        rank = queue.pop()
        first = index = pointer[rank]
        stop = offsets[rank + 1]
        time = free[rank]
        for index in range(first, stop):
            producer = dep[index]
            if producer >= 0:
                produced = end[producer]
                if produced < 0.0:
                    waiter[producer] = rank
                    break
                arrival = produced + receive_time[index]
                if arrival > time:
                    time = arrival
            start[index] = time
            time += durations[index]
            end[index] = time
            if waiter[index] >= 0:
                queue.append(waiter[index])
        else:
            index = stop
        record(first)
        record(index)
        pointer[rank] = index
        free[rank] = time
    if any(pointer[r] < offsets[r + 1] for r in range(len(begin))):
        raise DeadlockError(_describe_stuck(schedule, compiled, pointer, [_NO_SEND] * len(begin), end))
    return start, end, free, runs


def _check_slowdown(slowdown: object, comm: CommModel) -> tuple[float, ...]:
    """``slowdown`` as floats with ``slowdown[0] = 1``, for eager sends only; else InvalidInputError."""
    table = finite_floats("slowdown", slowdown)
    if table[0] != 1.0:
        raise InvalidInputError(f"slowdown[0] must be 1 (one rank computing alone is the reference), got {table[0]}")
    if comm.send_mode != "eager":
        raise InvalidInputError("slowdown (ranks sharing cores) models eager sends only; got send_mode='rendezvous'")
    return table


def _shared_step(
    compiled: _Compiled,
    durations: list[float],
    receive_time: list[float],
    begin: list[float],
    schedule: Schedule,
    slowdown: tuple[float, ...],
) -> tuple[list[float], list[float], list[float]]:
    """:func:`_eager_step` on ranks sharing cores, time-ordered: ``(start, end, when each rank is done)``.

    Between two events (an action ending, a message arriving) the ``k`` computing ranks
    each do ``elapsed / slowdown[k - 1]`` of their action's alone-time.
    """
    offsets, dep, start, end, pointer, free = _fresh_state(compiled, len(durations), begin)
    num_ranks = len(begin)
    running = [False] * num_ranks
    remaining = [0.0] * num_ranks
    now = 0.0
    while True:
        ready_at: list[float | None] = [None] * num_ranks
        for rank in range(num_ranks):
            index = pointer[rank]
            if running[rank] or index >= offsets[rank + 1]:
                continue
            ready = free[rank]
            producer = dep[index]
            if producer >= 0:
                if end[producer] < 0.0:
                    continue
                ready = max(ready, end[producer] + receive_time[index])
            ready_at[rank] = ready
        for rank, when in enumerate(ready_at):
            if when is not None and when <= now:
                start[pointer[rank]], running[rank], remaining[rank] = now, True, durations[pointer[rank]]
                ready_at[rank] = None
        computing = [rank for rank in range(num_ranks) if running[rank]]
        upcoming = [ready for ready in ready_at if ready is not None]
        if not computing and not upcoming:
            break
        factor = slowdown[min(len(computing), len(slowdown)) - 1] if len(computing) > 1 else 1.0
        finish = min((now + remaining[rank] * factor for rank in computing), default=math.inf)
        later = min(finish, min(upcoming, default=math.inf))
        elapsed = (later - now) / factor
        for rank in computing:
            remaining[rank] -= elapsed
        now = later
        for rank in computing:
            if remaining[rank] <= _EPSILON * max(1.0, abs(now)) or now + remaining[rank] * factor <= now:
                end[pointer[rank]] = free[rank] = now
                running[rank] = False
                pointer[rank] += 1
    if any(pointer[r] < offsets[r + 1] for r in range(num_ranks)):  # validate() rules this out
        raise DeadlockError(_describe_stuck(schedule, compiled, pointer, [_NO_SEND] * num_ranks, end))
    return start, end, free


def _replay_eager(
    replay: _Replay, durations: np.ndarray, receive_time: np.ndarray, begin: list[float]
) -> tuple[list[float], list[float], list[float]]:
    """:func:`_eager_step` in a recorded order: the same operations, no queue."""
    count = len(durations)
    order = replay.order
    duration = durations[order].tolist()
    comm = receive_time[order].tolist()
    end = [0.0] * count + list(begin) + [-math.inf]  # slots: each rank's begin, then "no message"
    start = [0.0] * count
    for index, previous, producer, message, spent in zip(replay.index, replay.previous, replay.dep, comm, duration):
        time = end[previous]
        arrival = end[producer] + message
        if arrival > time:
            time = arrival
        start[index] = time
        end[index] = time + spent
    offsets = replay.rank_offsets
    done = [end[offsets[r + 1] - 1] if offsets[r + 1] > offsets[r] else begin[r] for r in range(len(begin))]
    del end[count:]
    return start, end, done


def _rendezvous_step(
    compiled: _Compiled,
    durations: list[float],
    receive_time: list[float],
    send_time: list[float],
    begin: list[float],
    schedule: Schedule,
) -> tuple[list[float], list[float], list[float], list[float], list[int]]:
    """One step with blocking sends: ``(start, end, blocked_until, when each rank is done, computed runs)``.

    A sender is blocked from the end of its action until the receiver has posted
    (finished the action before the consumer, or started its step when the consumer
    is its first action) and the transfer is done; the receive of a rank's next
    action is posted when its previous action ends.
    """
    offsets, dep, start, end, pointer, free = _fresh_state(compiled, len(durations), begin)
    post = compiled.post
    receiver_rank = compiled.receiver_rank
    blocked = [0.0] * len(durations)
    last_end = list(begin)  # compute end of the rank's previous action (its receives are posted then)
    pending = [_NO_SEND] * len(begin)  # a finished action whose send is unresolved
    data_waiter = [-1] * len(durations)  # producer -> rank parked on its message
    post_waiter = [-1] * len(durations)  # action -> rank whose send waits for it to finish
    runs: list[int] = []
    record = runs.append
    queue = list(range(len(begin)))
    while queue:
        rank = queue.pop()
        first = index = pointer[rank]
        stop = offsets[rank + 1]
        time = free[rank]
        previous = last_end[rank]
        sender = pending[rank]
        while True:
            if sender != _NO_SEND:
                posted_after = post[sender]
                if posted_after == _POSTED_AT_START:
                    posted = begin[receiver_rank[sender]]
                else:
                    posted = end[posted_after]
                    if posted < 0.0:
                        post_waiter[posted_after] = rank
                        break
                time = (previous if previous > posted else posted) + send_time[sender]
                blocked[sender] = time
                sender = _NO_SEND
            if index >= stop:
                break
            producer = dep[index]
            if producer >= 0:
                produced = end[producer]
                if produced < 0.0:
                    data_waiter[producer] = rank
                    break
                arrival = (produced if produced > previous else previous) + receive_time[index]
                if arrival > time:
                    time = arrival
            start[index] = time
            time += durations[index]
            end[index] = time
            blocked[index] = time
            previous = time
            if post[index] != _NO_SEND:
                sender = index
            if data_waiter[index] >= 0:
                queue.append(data_waiter[index])
            if post_waiter[index] >= 0:
                queue.append(post_waiter[index])
            index += 1
        if index > first:
            record(first)
            record(index)
        pointer[rank] = index
        free[rank] = time
        last_end[rank] = previous
        pending[rank] = sender
    if any(pointer[r] < offsets[r + 1] or pending[r] != _NO_SEND for r in range(len(begin))):
        raise DeadlockError(_describe_stuck(schedule, compiled, pointer, pending, end))
    return start, end, blocked, free, runs


def _replay_rendezvous(
    replay: _Replay, durations: np.ndarray, receive_time: np.ndarray, send_time: np.ndarray,
    begin: list[float],
) -> tuple[list[float], list[float], np.ndarray, list[float]]:
    """:func:`_rendezvous_step` in a recorded order: the same operations, no queue.

    A send is resolved when the next action of its rank is computed (the recorded
    order puts the receiver's posting action before it), or at the end for a
    rank's last action.
    """
    count = len(durations)
    order = replay.order
    duration = durations[order].tolist()
    comm = receive_time[order].tolist()
    senders = replay.previous_sender_array
    previous_send = np.where(senders >= 0, send_time[np.maximum(senders, 0)], 0.0).tolist()
    end = [0.0] * count + list(begin) + [-math.inf]  # slots: each rank's begin, then "none"
    start = [0.0] * count
    resolved = [0.0] * (count + 1)  # when a sender's send was done; the last slot takes non-sends
    for index, previous, producer, message, spent, posted_after, sender, sent in zip(
        replay.index, replay.previous, replay.dep, comm, duration, replay.posted_after,
        replay.previous_sender, previous_send,
    ):
        previous_end = end[previous]
        posted = end[posted_after]
        time = (previous_end if previous_end > posted else posted) + sent
        resolved[sender] = time
        produced = end[producer]
        arrival = (produced if produced > previous_end else previous_end) + message
        if arrival > time:
            time = arrival
        start[index] = time
        end[index] = time + spent
    for _rank, last, slot in replay.last_senders:
        posted = end[slot]
        finish = end[last]
        resolved[last] = (finish if finish > posted else posted) + float(send_time[last])
    del end[count:]
    blocked = np.array(end)
    sent_by = replay.senders
    blocked[sent_by] = np.array(resolved)[sent_by]
    offsets = replay.rank_offsets
    done = [float(blocked[offsets[r + 1] - 1]) if offsets[r + 1] > offsets[r] else begin[r]
            for r in range(len(begin))]
    return start, end, blocked, done


def _describe_stuck(
    schedule: Schedule, compiled: _Compiled, pointer: list[int], pending: list[int], end: list[float]
) -> str:
    """One line naming, per stuck rank, the message it cannot send or receive and the rank on the other end."""
    low = schedule.lowered()
    actions = low.actions
    sent: dict[int, Message] = {}
    received: dict[int, Message] = {}
    for number, message in enumerate(schedule.messages()):
        sent[int(low.producer[number])] = message
        received[int(low.consumer[number])] = message
    offsets = compiled.rank_offsets
    parts = []
    pairs: set[tuple[int, int]] = set()
    for rank in range(schedule.num_ranks):
        if pending[rank] != _NO_SEND:
            sending = sent[pending[rank]]
            pairs.add((min(sending.src, sending.dst), max(sending.src, sending.dst)))
            parts.append(
                f"rank {sending.src} is blocked sending {sending}; rank {sending.dst} posts that receive only "
                f"after {actions[compiled.post[pending[rank]]]}"
            )
        elif pointer[rank] < offsets[rank + 1]:
            index = pointer[rank]
            awaited = received.get(index)
            if awaited is not None and end[compiled.dep[index]] < 0.0:
                pairs.add((min(awaited.src, awaited.dst), max(awaited.src, awaited.dst)))
                parts.append(f"rank {rank} is waiting at {actions[index]} for {awaited}")
            else:
                parts.append(f"rank {rank} is waiting at {actions[index]}")
    between = ", ".join(f"{a} and {b}" for a, b in sorted(pairs))
    lead = "rendezvous sends deadlock" + (f" between ranks {between}" if between else "")
    return f"{lead} (each waits for a receiver that is itself blocked): " + "; ".join(parts)


def check_arguments(schedule: object, costs: object, comm: object, validate: object) -> None:
    """The argument check of :func:`simulate` (and of other simulators): types, and a size that fits in memory."""
    expect_instance("schedule", schedule, Schedule, "pipeplan.build_schedule('1f1b', num_stages=4, num_microbatches=8)")
    expect_instance("costs", costs, StageCosts, "StageCosts(forward=[30, 10, 10, 20])")
    if comm is not None:
        expect_instance("comm", comm, CommModel, "CommModel(latency=0.5, send_mode='rendezvous'), or None")
    if not isinstance(validate, bool):
        raise InvalidInputError(f"validate must be True or False, got {validate!r}")
    check_simulation_size(schedule.num_actions)  # type: ignore[attr-defined]
