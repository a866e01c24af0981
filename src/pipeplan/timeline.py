"""When every action ran, why each rank waited, and what it held in memory.

A :class:`Timeline` is what both :func:`pipeplan.simulate` (predicted) and the
runtime (measured) return, so every report, chart and comparison works on either::

    >>> import pipeplan
    >>> tl = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8),
    ...                        pipeplan.StageCosts(forward=[30, 10, 10, 20]))
    >>> tl.makespan, round(tl.bubble_ratio, 3)
    (750.0, 0.44)
    >>> {cause.value: time for cause, time in tl.idle_by_cause()[1].items() if time}   # rank 1's idle time
    {'fill': 30.0, 'drain': 120.0, 'starved_upstream': 250.0, 'starved_downstream': 110.0}

Definitions (times in the costs' unit, measured from the step's start at 0):

* ``makespan``: when the last rank finishes (its last compute or blocked send).
* ``bubble_ratio`` = 1 − Σ busy / (ranks × makespan); busy is compute time only.
* idle causes: ``fill`` (before a rank's first action), ``drain`` (after its last),
  ``starved_upstream`` (an ``F`` waiting for an activation from another rank),
  ``starved_downstream`` (a ``B`` or ``I`` waiting for a gradient from another rank),
  ``blocked`` (a rendezvous send waiting for its receiver or its transfer), and
  ``overhead`` (any other gap; only measured timelines have it).
* in flight: a microbatch is in flight on a stage from the end of its ``F`` to
  the end of its last backward piece (``B``, or ``W`` when split). Bytes follow
  ``activation_bytes`` (freed at ``B``, or at ``I`` but for ``weight_stash_bytes``,
  kept until ``W``).
  Forward-only schedules hold nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from ._validation import expect_instance, positive_int
from .errors import InvalidInputError
from .schedule import Action, Payload, Schedule

__all__ = ["Timeline", "IdleCause", "ActionRecord", "IdleInterval", "MemoryTrace", "expect_timeline"]


class IdleCause(str, Enum):
    """Why a rank was not computing."""

    FILL = "fill"
    DRAIN = "drain"
    STARVED_UPSTREAM = "starved_upstream"
    STARVED_DOWNSTREAM = "starved_downstream"
    BLOCKED = "blocked"
    OVERHEAD = "overhead"


class ActionRecord(NamedTuple):
    """One action's execution: ``rank`` ran ``action`` from ``start`` to ``end``."""

    rank: int
    action: Action
    start: float
    end: float


class IdleInterval(NamedTuple):
    """``rank`` was idle from ``start`` to ``end`` because of ``cause``."""

    rank: int
    start: float
    end: float
    cause: IdleCause


class MemoryTrace(NamedTuple):
    """Step function of one rank's in-flight activations.

    From ``times[i]`` until ``times[i + 1]`` the rank holds ``inflight[i]``
    microbatches and ``bytes[i]`` bytes. ``times[0]`` is 0 with nothing held.
    """

    times: np.ndarray
    inflight: np.ndarray
    bytes: np.ndarray


@dataclass(eq=False)
class Timeline:
    """Start and end of every action of a :class:`Schedule`.

    Args:
        schedule: the schedule that ran.
        start, end: per action, aligned with the concatenation of
            ``schedule.orders`` (rank 0's order, then rank 1's, ...).
        blocked_until: per action, when its rank was free again (``>= end``; more
            than ``end`` when a rendezvous send blocked it). Defaults to ``end``.
        activation_bytes, weight_stash_bytes: per stage (see module doc). Default 1
            and ``activation_bytes``.
        source: ``"simulated"`` or ``"measured"``.
    """

    schedule: Schedule
    start: np.ndarray
    end: np.ndarray
    blocked_until: np.ndarray
    activation_bytes: tuple[float, ...]
    weight_stash_bytes: tuple[float, ...]
    source: str = "simulated"

    def __init__(
        self,
        schedule: Schedule,
        start: Sequence[float] | np.ndarray,
        end: Sequence[float] | np.ndarray,
        blocked_until: Sequence[float] | np.ndarray | None = None,
        *,
        activation_bytes: Sequence[float] | None = None,
        weight_stash_bytes: Sequence[float] | None = None,
        source: str = "simulated",
    ) -> None:
        count = schedule.num_actions
        self.schedule = schedule
        self.start = np.asarray(start, dtype=float)
        self.end = np.asarray(end, dtype=float)
        self.blocked_until = self.end.copy() if blocked_until is None else np.asarray(blocked_until, dtype=float)
        for field_name in ("start", "end", "blocked_until"):
            if getattr(self, field_name).shape != (count,):
                raise InvalidInputError(
                    f"{field_name} has shape {getattr(self, field_name).shape}, expected ({count},) "
                    "(one entry per action of the schedule)"
                )
        stages = schedule.num_stages
        self.activation_bytes = tuple(activation_bytes) if activation_bytes is not None else (1.0,) * stages
        self.weight_stash_bytes = (
            tuple(weight_stash_bytes) if weight_stash_bytes is not None else self.activation_bytes
        )
        self.source = source
        self.iterations = 1
        self.optimizer = "barrier"
        self._rank_step_ends: np.ndarray | None = None

    def set_iterations(self, rank_step_ends: Sequence[Sequence[float]], optimizer: str) -> None:
        """Record a multi-step simulation: ``rank_step_ends[i][r]``, when rank ``r`` finished step ``i``."""
        self._rank_step_ends = np.asarray(rank_step_ends, dtype=float).reshape(len(rank_step_ends), self.num_ranks)
        self.iterations = len(self._rank_step_ends)
        self.optimizer = optimizer

    # ------------------------------------------------------------- iterations
    @property
    def rank_step_ends(self) -> np.ndarray:
        """``[i, r]``: when rank ``r`` was done with step ``i`` (its last compute or blocked send).

        Times from the first step's start; shape ``(iterations, num_ranks)``. Under
        ``optimizer="overlap"`` row ``i`` is when each rank starts step ``i + 1``.
        """
        if self._rank_step_ends is None:
            return self._rank_done_times()[None, :]
        return self._rank_step_ends

    def _rank_done_times(self) -> np.ndarray:
        """Per rank, when it was done with this step (0 for a rank without actions)."""
        out = np.zeros(self.num_ranks)
        for r in range(self.num_ranks):
            part = self._rank_slice(r)
            if part.stop > part.start:
                out[r] = self.blocked_until[part.stop - 1]
        return out

    @property
    def step_ends(self) -> np.ndarray:
        """When the last rank finished each step, from the first step's start (one entry per iteration).

        A single step (or a measured timeline) has one entry, the makespan.
        """
        if self._rank_step_ends is None:
            return np.array([self.makespan])
        return self._rank_step_ends.max(axis=1)

    @property
    def step_times(self) -> np.ndarray:
        """Time of each step: the differences of :attr:`step_ends` (the first from 0)."""
        return np.diff(self.step_ends, prepend=0.0)

    @property
    def steady_step_time(self) -> float:
        """The last step's time, the steady-state period once the steps have settled.

        With ``optimizer="barrier"`` every step equals the makespan. With
        ``"overlap"`` a rank's next step starts when its own part is done, so later
        steps can be shorter than the first (fill and drain overlap); simulate
        enough ``iterations`` (say ``P + 2``) for the last step to be steady.
        """
        return float(self.step_times[-1])

    # ---------------------------------------------------------------- indexing
    @cached_property
    def rank_offsets(self) -> np.ndarray:
        """``rank_offsets[r]:rank_offsets[r+1]`` indexes rank ``r``'s actions."""
        return np.concatenate([[0], np.cumsum([len(o) for o in self.schedule.orders])]).astype(int)

    def _checked_rank(self, rank: object) -> int:
        """``rank`` as an int, or raise unless it is a rank of this timeline."""
        return positive_int("rank", rank, minimum=0, maximum=self.num_ranks - 1)

    def _rank_slice(self, rank: int) -> slice:
        return slice(int(self.rank_offsets[rank]), int(self.rank_offsets[rank + 1]))

    def index_of(self, action: Action) -> int:
        """Flat index of ``action`` in ``start``/``end``."""
        rank, position = self.schedule.position(action)
        return int(self.rank_offsets[rank]) + position

    def start_of(self, action: Action) -> float:
        """When ``action`` started."""
        return float(self.start[self.index_of(action)])

    def end_of(self, action: Action) -> float:
        """When ``action`` ended."""
        return float(self.end[self.index_of(action)])

    def records(self, rank: int | None = None) -> Iterator[ActionRecord]:
        """Every action's record, rank by rank in execution order (or one rank's)."""
        ranks = range(self.num_ranks) if rank is None else (self._checked_rank(rank),)
        for r in ranks:
            base = int(self.rank_offsets[r])
            for position, action in enumerate(self.schedule.orders[r]):
                yield ActionRecord(r, action, float(self.start[base + position]), float(self.end[base + position]))

    # ----------------------------------------------------------------- metrics
    @property
    def num_ranks(self) -> int:
        """Number of ranks."""
        return self.schedule.num_ranks

    @cached_property
    def makespan(self) -> float:
        """Time from the step's start to the moment the last rank is done."""
        return float(self.blocked_until.max()) if self.blocked_until.size else 0.0

    @cached_property
    def busy(self) -> np.ndarray:
        """Compute time per rank."""
        durations = self.end - self.start
        return np.array([durations[self._rank_slice(r)].sum() for r in range(self.num_ranks)])

    @property
    def utilisation(self) -> np.ndarray:
        """Busy fraction of the makespan per rank."""
        return self.busy / self.makespan

    @property
    def bubble_ratio(self) -> float:
        """1 − Σ busy / (ranks × makespan): the fraction of device time spent idle.

        Never below 0: with no idle time at all, the rounding of the sum must not print ``-0.00%``.
        """
        return max(0.0, float(1.0 - self.busy.sum() / (self.num_ranks * self.makespan)))

    @cached_property
    def spans(self) -> np.ndarray:
        """Per rank, from the start of its first action to the end of its last."""
        out = np.zeros(self.num_ranks)
        for r in range(self.num_ranks):
            part = self._rank_slice(r)
            if part.stop > part.start:
                out[r] = self.end[part.stop - 1] - self.start[part.start]
        return out

    @property
    def span_bubble_rate(self) -> float:
        """The zero-bubble paper's bubble rate: (cost − useful) / cost.

        ``cost`` is the largest per-rank span (first start to last end) and
        ``useful`` the busiest rank's compute time; with equal stages this is the
        paper's (cost − m·(F+B+W)) / cost.
        """
        cost = float(self.spans.max())
        return (cost - float(self.busy.max())) / cost

    def idle_intervals(self, rank: int | None = None) -> list[IdleInterval]:
        """Every idle interval (zero-length ones dropped), with its cause."""
        ranks = range(self.num_ranks) if rank is None else (self._checked_rank(rank),)
        schedule = self.schedule
        makespan = self.makespan
        out: list[IdleInterval] = []
        for r in ranks:
            part = self._rank_slice(r)
            order = self.schedule.orders[r]
            starts = self.start[part]
            ends = self.end[part]
            frees = self.blocked_until[part]
            previous_free = 0.0
            for position, action in enumerate(order):
                begin = float(starts[position])
                if begin > previous_free:
                    incoming = schedule.messages_into(action)
                    if position == 0:
                        cause = IdleCause.FILL
                    elif not incoming:
                        cause = IdleCause.OVERHEAD
                    elif incoming[0].payload is not Payload.GRADIENT:  # an activation or a latent
                        cause = IdleCause.STARVED_UPSTREAM
                    else:
                        cause = IdleCause.STARVED_DOWNSTREAM
                    out.append(IdleInterval(r, previous_free, begin, cause))
                free = float(frees[position])
                finish = float(ends[position])
                if free > finish:
                    out.append(IdleInterval(r, finish, free, IdleCause.BLOCKED))
                previous_free = free
            if makespan > previous_free:
                out.append(IdleInterval(r, previous_free, makespan, IdleCause.DRAIN))
        return out

    def idle_by_cause(self) -> list[dict[IdleCause, float]]:
        """Per rank, total idle time by cause (every cause present, 0 if none)."""
        totals = [{cause: 0.0 for cause in IdleCause} for _ in range(self.num_ranks)]
        for interval in self.idle_intervals():
            totals[interval.rank][interval.cause] += interval.end - interval.start
        return totals

    # ------------------------------------------------------------------ memory
    def memory(self, rank: int) -> MemoryTrace:
        """In-flight microbatches and activation bytes on ``rank`` over time."""
        part = self._rank_slice(self._checked_rank(rank))
        ends = self.end[part]
        count_delta = np.zeros(len(ends))
        byte_delta = np.zeros(len(ends))
        if not self.schedule.forward_only:
            low = self.schedule.lowered()
            kind, stage = low.kind[part], low.stage[part]
            act = np.asarray(self.activation_bytes, dtype=float)
            stash = np.asarray(self.weight_stash_bytes, dtype=float)
            # Rows in KINDS order (F, B, I, W, U): what an action's end adds to the count and the bytes.
            count_delta = np.array([1.0, -1.0, 0.0, -1.0, 0.0])[kind]
            byte_delta = np.stack([act, -act, -(act - stash), -stash, np.zeros_like(act)])[kind, stage]
        return MemoryTrace(
            np.concatenate([[0.0], ends]),
            np.concatenate([[0.0], np.cumsum(count_delta)]),
            np.concatenate([[0.0], np.cumsum(byte_delta)]),
        )

    @cached_property
    def peak_inflight(self) -> tuple[int, ...]:
        """Per rank, the most microbatches in flight at once."""
        return tuple(int(round(self.memory(r).inflight.max())) for r in range(self.num_ranks))

    @cached_property
    def peak_bytes(self) -> tuple[float, ...]:
        """Per rank, the most activation bytes held at once."""
        return tuple(float(self.memory(r).bytes.max()) for r in range(self.num_ranks))

    # ----------------------------------------------------------------- export
    def summary(self) -> dict[str, Any]:
        """Headline numbers and per-rank metrics as plain Python (JSON-ready)."""
        idle = self.idle_by_cause()
        return {
            "schedule": self.schedule.name,
            "source": self.source,
            "num_stages": self.schedule.num_stages,
            "num_ranks": self.num_ranks,
            "num_microbatches": self.schedule.num_microbatches,
            "makespan": self.makespan,
            "bubble_ratio": self.bubble_ratio,
            "span_bubble_rate": self.span_bubble_rate,
            "iterations": self.iterations,
            "optimizer": self.optimizer,
            "step_ends": [float(t) for t in self.step_ends],
            "steady_step_time": self.steady_step_time,
            "ranks": [
                {
                    "rank": r,
                    "stages": list(self.schedule.stages_of(r)),
                    "busy": float(self.busy[r]),
                    "utilisation": float(self.utilisation[r]),
                    "idle": {cause.value: total for cause, total in idle[r].items()},
                    "peak_inflight": self.peak_inflight[r],
                    "peak_bytes": self.peak_bytes[r],
                }
                for r in range(self.num_ranks)
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        """Summary plus every action and idle interval (JSON-ready)."""
        out = self.summary()
        out["actions"] = [
            {"rank": rec.rank, "kind": rec.action.kind.value, "stage": rec.action.stage,
             "microbatch": rec.action.microbatch, "start": rec.start, "end": rec.end}
            for rec in self.records()
        ]
        out["idle"] = [
            {"rank": iv.rank, "start": iv.start, "end": iv.end, "cause": iv.cause.value}
            for iv in self.idle_intervals()
        ]
        return out


def expect_timeline(field: str, value: object) -> Timeline:
    """Return ``value`` if it is a :class:`Timeline`, else raise naming ``field``."""
    return expect_instance(field, value, Timeline, "pipeplan.simulate(schedule, costs)")
