"""A schedule in integer form, and its zero-cost play in dependency order.

    from pipeplan.lowering import dependency_runs, lower, runs_to_order
    low = lower(schedule)                   # flat actions and their cross-rank messages as arrays
    runs = dependency_runs(low)             # None when some rank can never finish
    order = runs_to_order(runs, len(low.actions))

:meth:`pipeplan.Schedule.lowered` and :meth:`~pipeplan.Schedule.validate` build these
once per schedule and keep them; the simulator replays the order.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Protocol

import numpy as np

from .actions import _KIND_CODE, _LETTER_CODE, DEPENDENCIES, KINDS, Action

__all__ = ["Lowered", "dependency_runs", "lower", "runs_to_order"]


class _Shaped(Protocol):
    """What :func:`lower` reads of a :class:`~pipeplan.Schedule`."""

    @property
    def orders(self) -> tuple[tuple[Action, ...], ...]: ...
    @property
    def placement(self) -> tuple[int, ...]: ...
    @property
    def num_stages(self) -> int: ...
    @property
    def num_microbatches(self) -> int: ...


@dataclass(frozen=True, eq=False)
class Lowered:
    """A schedule in integer form, built once per schedule (:meth:`Schedule.lowered`).

    Actions are numbered flat: rank 0's order, then rank 1's, ... (the order of a
    Timeline's arrays). Messages are numbered in sender order (see
    :meth:`Schedule.messages`). Arrays are numpy ``int64`` (``gradient`` is bool).

    Attributes:
        actions: the flat actions.
        rank_offsets: ``rank_offsets[r]:rank_offsets[r + 1]`` are rank ``r``'s actions.
        kind: per action, the index of its kind in :data:`KINDS`.
        stage, microbatch, rank: per action.
        producer, consumer: per message, the flat index of the sending and the receiving action.
        boundary: per message, the stage boundary it crosses.
        gradient: per message, True for a gradient (going up), False for an activation.
    """

    actions: tuple[Action, ...]
    rank_offsets: tuple[int, ...]
    kind: np.ndarray
    stage: np.ndarray
    microbatch: np.ndarray
    rank: np.ndarray
    producer: np.ndarray
    consumer: np.ndarray
    boundary: np.ndarray
    gradient: np.ndarray


def lower(schedule: _Shaped) -> Lowered:
    """Number the actions and find every cross-rank edge with array operations on :data:`DEPENDENCIES`."""
    actions = tuple(chain.from_iterable(schedule.orders))
    count = len(actions)
    lengths = [len(order) for order in schedule.orders]
    offsets = tuple(int(x) for x in np.concatenate([[0], np.cumsum(lengths)]))
    num_stages, num_mb = schedule.num_stages, schedule.num_microbatches
    # Kinds are one-letter strings: join them and map the letters (much faster than a lookup each).
    letters = np.frombuffer("".join(map(itemgetter(0), actions)).encode("ascii"), dtype=np.uint8)
    kind = _LETTER_CODE[letters]
    stage = np.fromiter(map(itemgetter(1), actions), dtype=np.int64, count=count)
    microbatch = np.fromiter(map(itemgetter(2), actions), dtype=np.int64, count=count)
    rank = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    inside = (stage >= 0) & (stage < num_stages) & (microbatch >= 0) & (microbatch < num_mb)
    ident = np.where(inside, (kind * num_stages + stage) * num_mb + microbatch, 0)
    position = np.full(len(KINDS) * num_stages * num_mb, -1, dtype=np.int64)
    position[ident[inside]] = np.flatnonzero(inside)
    placement = np.asarray(schedule.placement, dtype=np.int64)
    producers, consumers, boundaries, gradients = [], [], [], []
    for consumer_kind, needs in DEPENDENCIES.items():
        of_kind = inside & (kind == _KIND_CODE[consumer_kind])
        for needed, offset in needs:
            if offset == 0:
                continue  # same stage: same rank, never a message
            other = stage + offset
            chosen = np.flatnonzero(of_kind & (other >= 0) & (other < num_stages))
            other = other[chosen]
            crosses = placement[other] != placement[stage[chosen]]
            chosen, other = chosen[crosses], other[crosses]
            source = position[(_KIND_CODE[needed] * num_stages + other) * num_mb + microbatch[chosen]]
            present = source >= 0
            producers.append(source[present])
            consumers.append(chosen[present])
            boundaries.append(np.minimum(other, stage[chosen])[present])
            gradients.append(np.full(int(present.sum()), offset > 0))
    if producers:
        producer = np.concatenate(producers)
        order = np.lexsort((np.concatenate(consumers), producer))  # sender order; ties by consumer
        producer = producer[order]
        consumer = np.concatenate(consumers)[order]
        boundary = np.concatenate(boundaries)[order]
        gradient = np.concatenate(gradients)[order]
    else:
        producer = consumer = boundary = np.zeros(0, dtype=np.int64)
        gradient = np.zeros(0, dtype=bool)
    return Lowered(actions, offsets, kind, stage, microbatch, rank, producer, consumer, boundary, gradient)


def dependency_runs(low: Lowered) -> list[int] | None:
    """Play the orders with zero costs, honouring every message; the runs of flat indices in the
    order they could run, as ``[first, stop, first, stop, ...]``, or None if some rank never finishes.

    Assumes same-rank dependencies come earlier in their rank's order (checked by the caller)
    and at most one incoming message per action (else None, and the caller checks slowly).
    """
    count = len(low.actions)
    if count and np.bincount(low.consumer, minlength=count).max(initial=0) > 1:
        return None
    dep_array = np.full(count, -1, dtype=np.int64)
    dep_array[low.consumer] = low.producer
    dep = dep_array.tolist()
    offsets = low.rank_offsets
    done = [False] * count
    pointer = list(offsets[:-1])
    waiter = [-1] * count  # producer -> the rank parked on it (one consumer per producer)
    runs: list[int] = []
    record = runs.append
    queue = list(range(len(offsets) - 1))
    while queue:
        rank = queue.pop()
        first = index = pointer[rank]
        stop = offsets[rank + 1]
        for index in range(first, stop):
            producer = dep[index]
            if producer >= 0 and not done[producer]:
                waiter[producer] = rank
                break
            done[index] = True
            if waiter[index] >= 0:
                queue.append(waiter[index])
        else:
            index = stop
        if index > first:
            record(first)
            record(index)
        pointer[rank] = index
    if any(pointer[r] < offsets[r + 1] for r in range(len(offsets) - 1)):
        return None
    return runs


def runs_to_order(runs: list[int], count: int) -> np.ndarray:
    """The ``count`` flat indices that the runs ``[first, stop, first, stop, ...]`` cover, in run order."""
    pairs = np.asarray(runs, dtype=np.int64).reshape(-1, 2)
    firsts = pairs[:, 0]
    lengths = pairs[:, 1] - firsts
    ends = np.cumsum(lengths)
    return np.arange(count, dtype=np.int64) - np.repeat(ends - lengths - firsts, lengths)
