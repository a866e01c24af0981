"""Timing every action of one rank, and gathering the ranks into one Timeline.

    recorder = StepRecorder(schedule, rank)
    recorder.begin()                        # right after the step's barrier: time 0
    recorder.started(i); ...; recorder.ended(i)
    timeline = assemble_timeline(schedule, rows, activation_bytes=...)   # on rank 0

Clocks are per process: each rank measures ``time.perf_counter()`` from the moment
it leaves the barrier at the step's start. When every rank runs on the same host
(``perf_counter`` is then one system-wide monotonic clock), the rows are shifted
onto the earliest rank's origin, so cross-rank times are exact; across hosts
they agree up to the barrier's exit skew. Times are in milliseconds, the unit
the CLI uses.
"""

from __future__ import annotations

import socket
import time
import zlib
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
        """``[start..., end..., origin, host]`` padded to ``width`` actions each (for an all-gather).

        ``origin`` is the absolute ``perf_counter`` (s) of time 0 and ``host`` a
        checksum of the host name, so :func:`assemble_timeline` can align ranks
        that share a clock.
        """
        out = np.zeros(2 * width + 2)
        out[: len(self.start)] = self.start
        out[width: width + len(self.end)] = self.end
        out[2 * width] = self._origin
        out[2 * width + 1] = float(zlib.crc32(socket.gethostname().encode()))
        return out


def assemble_timeline(
    schedule: Schedule,
    rows: Sequence[np.ndarray],
    *,
    activation_bytes: Sequence[float] | None = None,
) -> Timeline:
    """The measured :class:`Timeline` from every rank's :meth:`StepRecorder.row`."""
    width = max(len(order) for order in schedule.orders)
    table = [np.asarray(rows[rank], dtype=float) for rank in range(schedule.num_ranks)]
    origins = np.array([row[2 * width] for row in table])
    one_host = len({row[2 * width + 1] for row in table}) == 1
    shift = (origins - origins.min()) * 1e3 if one_host else np.zeros(len(table))
    starts, ends = [], []
    for rank, order in enumerate(schedule.orders):
        row = table[rank]
        starts.append(row[: len(order)] + shift[rank])
        ends.append(row[width: width + len(order)] + shift[rank])
    return Timeline(
        schedule,
        np.concatenate(starts),
        np.concatenate(ends),
        activation_bytes=activation_bytes,
        source="measured",
    )
