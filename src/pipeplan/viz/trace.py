"""Chrome trace-event JSON of a timeline, for ui.perfetto.dev and chrome://tracing.

Open the file in https://ui.perfetto.dev (drag and drop) or chrome://tracing::

    >>> import pipeplan
    >>> from pipeplan.viz import chrome_trace
    >>> trace = chrome_trace(pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=2),
    ...                                        pipeplan.StageCosts([2, 1])))   # write_trace(tl, "step.json[.gz]")
    >>> next(event for event in trace["traceEvents"] if event["ph"] == "X")    # 2 ms = 2000 us
    {'name': 'F0 (stage 0)', 'cat': 'forward', 'ph': 'X', 'pid': 0, 'tid': 0, 'ts': 0.0, 'dur': 2000.0,
     'args': {'kind': 'F', 'stage': 0, 'microbatch': 0}}

Layout of the trace:

* one process per rank (``pid`` = rank, named ``"rank r"``), sorted by rank;
* thread 0 (``"compute"``): one complete event (``"ph": "X"``) per action, named
  like ``"F3 (stage 0)"``, with ``args`` ``{"kind", "stage", "microbatch"}``;
* thread 1 (``"idle"``): one complete event per idle interval, named by its
  cause (``"fill"``, ``"starved_upstream"``, ``"blocked"``, ...);
* two counters per rank (``"ph": "C"``): ``"in-flight"`` with the arg
  ``microbatches`` and ``"activation"`` with the arg ``bytes`` (Perfetto names the
  tracks "in-flight microbatches" and "activation bytes"), the step functions of
  :meth:`Timeline.memory`, one sample at ``t = 0`` and at the end of each action.

Units: the trace format counts ``ts`` and ``dur`` in microseconds, and pipeplan's
timelines are in milliseconds (the CLI's unit), so times are multiplied by
``us_per_unit = 1000``; pass another factor for timelines in other units (e.g.
``1e6`` for seconds).
"""

from __future__ import annotations

import gzip
import json
import math
import os
from typing import Any

from ..errors import InvalidInputError
from ..timeline import expect_timeline
from ..timeline import Timeline

__all__ = ["chrome_trace", "comparison_trace", "write_trace"]

COMPUTE_THREAD = 0
IDLE_THREAD = 1
_KIND_NAMES = {"F": "forward", "B": "backward", "I": "input_grad", "W": "weight_grad", "U": "update"}


def chrome_trace(timeline: Timeline, *, us_per_unit: float = 1000.0) -> dict[str, Any]:
    """The trace-event JSON object of ``timeline`` (see the module doc for its layout).

    Args:
        timeline: any timeline, simulated or measured.
        us_per_unit: microseconds per time unit of the timeline; 1000 for
            milliseconds (pipeplan's convention).

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``,
        ready for :func:`json.dump`. ``otherData`` holds the schedule name, the
        source, makespan, bubble ratio and span bubble rate (in timeline units).

    Raises:
        InvalidInputError: ``us_per_unit`` is not a finite number > 0.
    """
    expect_timeline("timeline", timeline)
    try:
        factor = float(us_per_unit)
    except (TypeError, ValueError):
        raise InvalidInputError(f"us_per_unit must be a number > 0, got {us_per_unit!r}") from None
    if not math.isfinite(factor) or factor <= 0:
        raise InvalidInputError(f"us_per_unit must be a finite number > 0, got {us_per_unit!r}")

    events: list[dict[str, Any]] = []
    for rank in range(timeline.num_ranks):
        stages = ", ".join(str(s) for s in timeline.schedule.stages_of(rank))
        events.extend(
            [
                {"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}},
                {"name": "process_labels", "ph": "M", "pid": rank, "tid": 0,
                 "args": {"labels": f"stages {stages}" if stages else "no stages"}},
                {"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
                {"name": "thread_name", "ph": "M", "pid": rank, "tid": COMPUTE_THREAD,
                 "args": {"name": "compute"}},
                {"name": "thread_name", "ph": "M", "pid": rank, "tid": IDLE_THREAD, "args": {"name": "idle"}},
                {"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": COMPUTE_THREAD,
                 "args": {"sort_index": 0}},
                {"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": IDLE_THREAD,
                 "args": {"sort_index": 1}},
            ]
        )
    for record in timeline.records():
        kind, stage, microbatch = record.action
        events.append(
            {
                "name": f"{kind}{microbatch} (stage {stage})",
                "cat": _KIND_NAMES[kind],
                "ph": "X",
                "pid": record.rank,
                "tid": COMPUTE_THREAD,
                "ts": record.start * factor,
                "dur": (record.end - record.start) * factor,
                "args": {"kind": kind.value, "stage": stage, "microbatch": microbatch},
            }
        )
    for interval in timeline.idle_intervals():
        events.append(
            {
                "name": interval.cause.value,
                "cat": "idle",
                "ph": "X",
                "pid": interval.rank,
                "tid": IDLE_THREAD,
                "ts": interval.start * factor,
                "dur": (interval.end - interval.start) * factor,
                "args": {"cause": interval.cause.value},
            }
        )
    for rank in range(timeline.num_ranks):
        memory = timeline.memory(rank)
        for time, inflight, size in zip(memory.times, memory.inflight, memory.bytes):
            events.append({"name": "in-flight", "ph": "C", "pid": rank,
                           "ts": float(time) * factor, "args": {"microbatches": int(round(inflight))}})
            events.append({"name": "activation", "ph": "C", "pid": rank,
                           "ts": float(time) * factor, "args": {"bytes": float(size)}})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "pipeplan",
            "schedule": timeline.schedule.name,
            "source": timeline.source,
            "num_stages": timeline.schedule.num_stages,
            "num_ranks": timeline.num_ranks,
            "num_microbatches": timeline.schedule.num_microbatches,
            "us_per_unit": factor,
            "makespan": timeline.makespan,
            "bubble_ratio": timeline.bubble_ratio,
            "span_bubble_rate": timeline.span_bubble_rate,
        },
    }


def comparison_trace(predicted: Timeline, measured: Timeline, *, us_per_unit: float = 1000.0) -> dict[str, Any]:
    """One trace with two process groups: ``pid`` 0 ``"predicted"`` and ``pid`` 1 ``"measured"``.

    Inside each group every rank is two threads, ``"rank r compute"`` (``tid`` =
    2 r) and ``"rank r idle"`` (``tid`` = 2 r + 1), with the events of
    :func:`chrome_trace`; the memory counters are named ``"rank r in-flight"``
    and ``"rank r activation"``. ``otherData`` holds both timelines' headline
    numbers under ``"predicted"`` and ``"measured"``.
    """
    expect_timeline("predicted", predicted)
    expect_timeline("measured", measured)
    events: list[dict[str, Any]] = []
    other: dict[str, Any] = {"generator": "pipeplan"}
    for group, (name, timeline) in enumerate((("predicted", predicted), ("measured", measured))):
        single = chrome_trace(timeline, us_per_unit=us_per_unit)
        other[name] = single["otherData"]
        events.append({"name": "process_name", "ph": "M", "pid": group, "tid": 0, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": group, "tid": 0,
                       "args": {"sort_index": group}})
        for event in single["traceEvents"]:
            rank = event["pid"]
            if event["ph"] == "M":
                if event["name"] == "thread_name":
                    thread = "compute" if event["tid"] == COMPUTE_THREAD else "idle"
                    events.append({**event, "pid": group, "tid": 2 * rank + event["tid"],
                                   "args": {"name": f"rank {rank} {thread}"}})
                elif event["name"] == "thread_sort_index":
                    events.append({**event, "pid": group, "tid": 2 * rank + event["tid"],
                                   "args": {"sort_index": 2 * rank + event["tid"]}})
                continue  # per-rank process names give way to the group's
            if event["ph"] == "C":
                events.append({**event, "pid": group, "name": f"rank {rank} {event['name']}"})
            else:
                events.append({**event, "pid": group, "tid": 2 * rank + event["tid"]})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_trace(timeline: Timeline, path: str | os.PathLike[str], *, us_per_unit: float = 1000.0,
                measured: Timeline | None = None) -> None:
    """Write :func:`chrome_trace` of ``timeline`` to ``path`` (gzip-compressed if it ends in ``.gz``).

    Args:
        timeline: any timeline.
        path: output file, e.g. ``"step.json"`` or ``"step.json.gz"``; Perfetto
            and chrome://tracing open both.
        us_per_unit: see :func:`chrome_trace`.
        measured: with it, ``timeline`` is the prediction and the file holds
            :func:`comparison_trace` of the two.

    Raises:
        InvalidInputError: a bad ``us_per_unit`` or a path that cannot be written.
    """
    if measured is None:
        trace = chrome_trace(timeline, us_per_unit=us_per_unit)
    else:
        trace = comparison_trace(timeline, measured, us_per_unit=us_per_unit)
    target = os.fspath(path)
    try:
        if target.endswith(".gz"):
            with gzip.open(target, "wt", encoding="utf-8") as handle:
                json.dump(trace, handle)
        else:
            with open(target, "w", encoding="utf-8") as handle:
                json.dump(trace, handle)
    except OSError as error:
        raise InvalidInputError(f"cannot write the trace to path {target!r}: {error.strerror or error}") from None
