"""The simulator as it was before the fast kernel (before simulate.py ran on lowered arrays), kept as a test oracle.

Only the kind names are adapted (``B`` full and ``I`` input-gradient backwards both
send the gradient; durations come from ``StageCosts.duration``). Slow (dicts and
tuples per action); :func:`reference_times` returns ``(start, end, blocked_until)``.
"""

from __future__ import annotations

from collections import deque

from pipeplan.costs import CommModel, StageCosts
from pipeplan.errors import DeadlockError
from pipeplan.schedule import Schedule

__all__ = ["reference_times"]

_KIND = {"F": 0, "B": 1, "I": 1, "W": 2}
_NO_SEND = -1
_POSTED_AT_ZERO = -2


def reference_times(
    schedule: Schedule, costs: StageCosts, comm: CommModel | None = None
) -> tuple[list[float], list[float], list[float]]:
    """Start, end and blocked-until of every action (flat, rank by rank) for one step."""
    comm = comm or CommModel()
    num_stages = schedule.num_stages
    num_mb = schedule.num_microbatches
    costs.check_shape(num_stages, num_mb)
    boundary = comm.boundary_times(num_stages)
    placement = schedule.placement
    rendezvous = comm.send_mode == "rendezvous"
    last = num_stages - 1

    def ident(kind: int, stage: int, mb: int) -> int:
        return (kind * num_stages + stage) * num_mb + mb

    # Per-rank compiled orders: (flat index, id, duration, dep id, dep comm, send pred id, send comm).
    flat_index: dict[int, int] = {}
    predecessor: dict[int, int] = {}
    compiled: list[list[tuple[int, int, float, int, float]]] = []
    flat = 0
    for rank, order in enumerate(schedule.orders):
        previous = _POSTED_AT_ZERO
        rows = []
        for kind, stage, mb in order:
            aid = ident(_KIND[kind], stage, mb)
            flat_index[aid] = flat
            predecessor[aid] = previous
            previous = aid
            dep, dep_comm = -1, 0.0
            if kind == "F" and stage > 0 and placement[stage - 1] != rank:
                dep, dep_comm = ident(0, stage - 1, mb), boundary[stage - 1]
            elif kind in ("B", "I") and stage < last and placement[stage + 1] != rank:
                dep, dep_comm = ident(1, stage + 1, mb), boundary[stage]
            rows.append((flat, aid, costs.duration(kind, stage, mb), dep, dep_comm))
            flat += 1
        compiled.append(rows)

    sends: dict[int, tuple[int, float]] = {}
    if rendezvous:
        for rank, order in enumerate(schedule.orders):
            for kind, stage, mb in order:
                if kind == "F" and stage < last and placement[stage + 1] != rank:
                    consumer = ident(0, stage + 1, mb)
                    sends[ident(0, stage, mb)] = (predecessor[consumer], boundary[stage])
                elif kind in ("B", "I") and stage > 0 and placement[stage - 1] != rank:
                    consumer = ident(1, stage - 1, mb)
                    sends[ident(1, stage, mb)] = (predecessor[consumer], boundary[stage - 1])

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
    return start, end, free_after


def _describe_deadlock(
    schedule: Schedule,
    stuck: list[int],
    pointer: list[int],
    pending: list[int],
    sends: dict[int, tuple[int, float]],
    by_id: dict[int, object],
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
