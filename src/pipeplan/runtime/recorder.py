"""Timing every action of one rank, and gathering the ranks into one Timeline.

    recorder = StepRecorder(schedule, rank)
    recorder.begin()                        # right after the step's barrier: time 0
    recorder.started(i); ...; recorder.ended(i)
    timeline = assemble_timeline(schedule, rows, activation_bytes=...)   # on rank 0

Clocks are per process: each rank measures ``time.perf_counter()`` from the moment
it leaves the barrier at the step's start, so two ranks' times agree up to the
barrier's exit skew (tens of microseconds on one machine). Times are in
milliseconds, the unit the CLI uses.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ..schedule import Schedule
from ..timeline import Timeline

__all__ = ["StepRecorder", "assemble_timeline"]


class StepRecorder:
    """Start and end (ms since the step's barrier) of each action of one rank."""

    def __init__(self, schedule: Schedule, rank: int) -> None:
        count = len(schedule.orders[rank])
        self.start = np.zeros(count)
        self.end = np.zeros(count)
        self._origin = 0.0

    def begin(self) -> None:
        """Set time 0 (call right after the step's barrier)."""
        self._origin = time.perf_counter()

    def now(self) -> float:
        """Milliseconds since :meth:`begin`."""
        return (time.perf_counter() - self._origin) * 1e3

    def started(self, index: int) -> None:
        """The ``index``-th action of this rank's order starts computing now."""
        self.start[index] = self.now()

    def ended(self, index: int) -> None:
        """The ``index``-th action of this rank's order ends now."""
        self.end[index] = self.now()

    def row(self, width: int) -> np.ndarray:
        """``[start..., end...]`` padded to ``width`` actions each (for an all-gather)."""
        out = np.zeros(2 * width)
        out[: len(self.start)] = self.start
        out[width: width + len(self.end)] = self.end
        return out


def assemble_timeline(
    schedule: Schedule,
    rows: Sequence[np.ndarray],
    *,
    activation_bytes: Sequence[float] | None = None,
) -> Timeline:
    """The measured :class:`Timeline` from every rank's :meth:`StepRecorder.row`."""
    width = max(len(order) for order in schedule.orders)
    starts, ends = [], []
    for rank, order in enumerate(schedule.orders):
        row = np.asarray(rows[rank], dtype=float)
        starts.append(row[: len(order)])
        ends.append(row[width: width + len(order)])
    return Timeline(
        schedule,
        np.concatenate(starts),
        np.concatenate(ends),
        activation_bytes=activation_bytes,
        source="measured",
    )
