"""What the simulator's kernels read of a schedule, compiled once and kept on the schedule.

    from pipeplan._simulate_compiled import _compile
    compiled = schedule.cached("simulate", lambda: _compile(schedule))
    compiled.dep[index]                                  # the producer of action index's message, or -1
    replay = compiled.replay(schedule, rendezvous=False)  # None before the first simulation

:func:`_compile` turns a schedule's integer form (:meth:`Schedule.lowered`) into
Python lists the event-driven kernels of :mod:`pipeplan.simulate` index fast: per action
the producer of its incoming message and, for a sender, the receiver's action after which
the receive is posted. The first simulation in a send mode records the order in which it
computed the actions (a topological order of the step's dependencies, which do not depend
on the costs); :meth:`_Compiled.replay` turns it into a :class:`_Replay`, the operands of
the branch-free replay kernels, so later simulations skip the event queue.
Private to the simulator; torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import InvalidInputError
from .lowering import runs_to_order
from .schedule import Schedule

_NO_SEND = -1
_POSTED_AT_START = -2  # the receiver's consumer is its first action: the receive is posted when its step starts


@dataclass(frozen=True, eq=False)
class _Compiled:
    """What the kernels read of a schedule, as Python lists (fast to index), built once per schedule.

    ``recorded``, then ``orders``, keep per send mode (``True``: rendezvous) the order in which
    the first simulation in that mode computed the actions: a topological order of the
    step's dependencies (they do not depend on the costs), which later simulations
    replay without the event queue (:func:`pipeplan.simulate._replay_eager`,
    :func:`pipeplan.simulate._replay_rendezvous`).
    """

    rank_offsets: list[int]
    dep: list[int]  # per action: flat index of the producer of its incoming message, or -1
    post: list[int]  # per action: for a sender, the receiver's action before the consumer (or a marker)
    senders: np.ndarray  # flat index of each message's producer (message order)
    receivers: np.ndarray  # flat index of each message's consumer
    receiver_rank: list[int]  # per action: rank of the consumer of its outgoing message (senders only)
    recorded: dict[bool, list[int]] = field(default_factory=dict)  # runs of the first simulation
    orders: dict[bool, _Replay] = field(default_factory=dict)

    def replay(self, schedule: Schedule, rendezvous: bool) -> _Replay | None:
        """The replay plan for this send mode, built from the recorded runs on first use; None before any run."""
        plan = self.orders.get(rendezvous)
        if plan is None:
            runs = self.recorded.pop(rendezvous, None)
            if runs is None and not rendezvous:
                runs = schedule.cached_dependency_runs()  # validation's zero-cost run orders eager sends too
            if runs is not None:
                plan = self.orders[rendezvous] = _replay_plan(schedule, self, runs, rendezvous)
        return plan


@dataclass(frozen=True, eq=False)
class _Replay:
    """A recorded computation order and, per position in it, the kernel's operands (see :func:`_replay`)."""

    order: np.ndarray  # flat indices in computation order
    rank_offsets: list[int]
    index: list[int]
    previous: list[int]  # previous action on the rank, or the rank's begin slot (count + rank)
    dep: list[int]  # producer of the incoming message, or the -inf slot
    posted_after: list[int]  # rendezvous: for a previous action that sends, its receiver's posting slot, else -inf
    previous_sender: list[int]  # rendezvous: the previous action when it sends, else the spare slot
    previous_sender_array: np.ndarray  # the same with -1 for "does not send"
    senders: np.ndarray  # every action that sends (rendezvous)
    last_senders: list[tuple[int, int, int]]  # rendezvous: (rank, last action, posting slot) when it ends in a send


def _compile(schedule: Schedule) -> _Compiled:
    low = schedule.lowered()
    count = len(low.actions)
    if count and (np.bincount(low.consumer, minlength=count).max(initial=0) > 1
                  or np.bincount(low.producer, minlength=count).max(initial=0) > 1):
        raise InvalidInputError("the simulator handles at most one incoming and one outgoing message per action")
    dep = np.full(count, -1, dtype=np.int64)
    dep[low.consumer] = low.producer
    offsets = np.asarray(low.rank_offsets, dtype=np.int64)
    first = low.consumer == offsets[low.rank[low.consumer]]
    post = np.full(count, _NO_SEND, dtype=np.int64)
    post[low.producer] = np.where(first, _POSTED_AT_START, low.consumer - 1)
    post[low.producer[schedule.latest_wins()]] = _NO_SEND  # latest wins: the sender never waits for its receiver
    receiver_rank = np.full(count, -1, dtype=np.int64)
    receiver_rank[low.producer] = low.rank[low.consumer]
    return _Compiled(list(low.rank_offsets), dep.tolist(), post.tolist(), low.producer, low.consumer,
                     receiver_rank.tolist())


def _replay_plan(schedule: Schedule, compiled: _Compiled, runs: list[int], rendezvous: bool) -> _Replay:
    """Turn the recorded runs ``[first, stop, ...]`` of computed actions into a :class:`_Replay`."""
    low = schedule.lowered()
    count = len(low.actions)
    num_ranks = schedule.num_ranks
    order = runs_to_order(runs, count)
    offsets = np.asarray(compiled.rank_offsets, dtype=np.int64)
    previous = np.arange(count, dtype=np.int64) - 1
    starts = offsets[:-1][offsets[:-1] < offsets[1:]]
    previous[starts] = count + low.rank[starts]
    dep = np.asarray(compiled.dep, dtype=np.int64)
    post = np.asarray(compiled.post, dtype=np.int64)
    if not rendezvous:
        dep = np.where(dep >= 0, dep, count + num_ranks)  # the -inf slot
        return _Replay(order, compiled.rank_offsets, order.tolist(), previous[order].tolist(), dep[order].tolist(),
                       [], [], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), [])
    receiver = np.asarray(compiled.receiver_rank, dtype=np.int64)
    slot = np.where(post == _POSTED_AT_START, count + receiver, post)  # where the posting time is read
    prev = previous[order]
    is_sender = (prev < count) & (post[np.minimum(prev, count - 1)] != _NO_SEND)
    # No branches in the kernel: a missing message or send reads the -inf slot, a send
    # resolution that is not one is written to a spare slot.
    no_message = count + num_ranks
    posted_after = np.where(is_sender, slot[np.minimum(prev, count - 1)], no_message)
    previous_sender = np.where(is_sender, prev, -1)
    dep = np.where(dep >= 0, dep, no_message)
    last = offsets[1:] - 1
    last_senders = [(rank, a, int(slot[a])) for rank, a in enumerate(last.tolist())
                    if offsets[rank] <= a and post[a] != _NO_SEND]
    return _Replay(order, compiled.rank_offsets, order.tolist(), prev.tolist(), dep[order].tolist(),
                   posted_after.tolist(), np.where(is_sender, prev, count).tolist(), previous_sender,
                   np.flatnonzero(post != _NO_SEND), last_senders)
