"""A Gantt chart in plain text: one line per rank, idle time marked by its cause.

Works on any :class:`~pipeplan.timeline.Timeline`, simulated or measured::

    >>> import pipeplan
    >>> from pipeplan.viz import text_gantt
    >>> tl = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8),
    ...                        pipeplan.StageCosts(forward=[30, 10, 10, 20]))
    >>> print(text_gantt(tl, width=60))
    rank 0 |F0F1 F2F3 <<B0   F4B1   F5B2   F6 B3  F7 B4   B5  B6   B7   |
    rank 1 |..F>>F>F<<B0F<<B1>>FB2>>>>FB3>>>>>B4>>>>>FB<B6<<<B__________|
    rank 2 |...F>>F<<BF<<<BF<<B2F<<B3>>FB4>>>>FB5>>>>>B6<<<B7___________|
    rank 3 |....F0B0 FB1  FB2 F3B3 F4B4 F5B5 >>F6B6 >>F7B7 _____________|
            0               200             400             600
    1f1b, simulated: makespan 750, 1 column = 12.5 time units
    actions: F forward  B backward; the number is the microbatch (0-based)
    idle: . fill  _ drain  > starved upstream  < starved downstream  # blocked  * overhead
    stages: rank r holds stage r

Drawing rules (also printed in the legend):

* Time runs left to right; ``width`` columns cover ``[0, makespan]``, so one
  column is ``makespan / width`` time units. An interval ``[a, b)`` fills the
  columns from ``round(a / step)`` to ``round(b / step)``, so neighbouring
  intervals never overlap and every rank line has exactly ``width`` cells.
* An action is drawn as its kind letter followed by its (0-based) microbatch
  when the label fits in the action's columns (``F3 ``, ``B12``, ``W0``), as the
  bare letter otherwise; the remaining columns of the action are blanks. An
  action too short for one column still shows its letter in the column it starts
  in, unless another action already covers that column.
* Chunks: when a rank holds several stages, the actions of its first, third, ...
  stage (in stage order) use upper-case letters (``F B W``) and those of its
  second, fourth, ... stage lower-case ones (``f b w``). The legend names the
  stages behind each case per rank.
* Idle cells carry one character per :class:`~pipeplan.timeline.IdleCause`
  (see :data:`IDLE_CHARS`): ``.`` fill, ``_`` drain, ``>`` starved upstream,
  ``<`` starved downstream, ``#`` blocked send, ``*`` overhead.
"""

from __future__ import annotations

import math

from .._validation import positive_int
from ..timeline import expect_timeline
from ..limits import check_gantt_size
from ..timeline import IdleCause, Timeline
from .tables import format_time

__all__ = ["text_gantt", "IDLE_CHARS"]

#: The character that marks an idle cell, per cause.
IDLE_CHARS: dict[IdleCause, str] = {
    IdleCause.FILL: ".",
    IdleCause.DRAIN: "_",
    IdleCause.STARVED_UPSTREAM: ">",
    IdleCause.STARVED_DOWNSTREAM: "<",
    IdleCause.BLOCKED: "#",
    IdleCause.OVERHEAD: "*",
}

_KIND_NAMES = {"F": "forward", "B": "backward", "I": "input gradient", "W": "weight gradient", "U": "update"}


def text_gantt(timeline: Timeline, *, width: int = 100, legend: bool = True) -> str:
    """Render ``timeline`` as a text Gantt chart.

    Args:
        timeline: any timeline (simulated or measured; full, split or no backward;
            one or several stages per rank).
        width: number of time columns (>= 1); one column is ``makespan / width``
            time units.
        legend: append the legend (letters, chunk cases, idle characters, scale).

    Returns:
        The chart: one ``"rank r |...|"`` line per rank (all of the same length),
        a time-axis line, then the legend lines when ``legend`` is true. No
        trailing newline.

    Raises:
        InvalidInputError: ``timeline`` is not a Timeline, ``width`` is not an
            integer >= 1, or the chart would not fit in the memory available.
    """
    expect_timeline("timeline", timeline)
    width = positive_int("width", width)
    check_gantt_size(width, timeline.num_ranks)
    makespan = timeline.makespan
    scale = width / makespan if makespan > 0 else 0.0
    label_width = len(f"rank {timeline.num_ranks - 1}")

    def column(time: float) -> int:
        return min(width, max(0, int(round(time * scale))))

    lines = []
    for rank in range(timeline.num_ranks):
        cells = [" "] * width
        covered = [False] * width
        for interval in timeline.idle_intervals(rank):
            char = IDLE_CHARS[interval.cause]
            for col in range(column(interval.start), column(interval.end)):
                cells[col] = char
        case = _chunk_case(timeline, rank)
        short: list[tuple[int, str]] = []
        for record in timeline.records(rank):
            kind = record.action.kind if case[record.action.stage] else record.action.kind.lower()
            first, last = column(record.start), column(record.end)
            if last <= first:
                short.append((first, kind))
                continue
            text = f"{kind}{record.action.microbatch}"
            if len(text) > last - first:
                text = kind
            for offset, col in enumerate(range(first, last)):
                cells[col] = text[offset] if offset < len(text) else " "
                covered[col] = True
        for col, kind in short:
            col = min(col, width - 1)
            if not covered[col]:
                cells[col] = kind
                covered[col] = True
        lines.append(f"{f'rank {rank}':<{label_width}} |{''.join(cells)}|")
    lines.append(_axis(makespan, width, label_width))
    if legend:
        lines.extend(_legend(timeline, width))
    return "\n".join(lines)


def _chunk_case(timeline: Timeline, rank: int) -> dict[int, bool]:
    """Stage -> True for upper case (the rank's 1st, 3rd, ... stage), False for lower."""
    return {stage: index % 2 == 0 for index, stage in enumerate(timeline.schedule.stages_of(rank))}


def _nice_step(raw: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= ``raw``."""
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 5.0, 10.0):
        if factor * power >= raw * (1 - 1e-12):
            return factor * power
    return 10.0 * power  # pragma: no cover - the loop always returns


def _format_time(value: float) -> str:
    return f"{value:g}"


def _axis(makespan: float, width: int, label_width: int) -> str:
    """Tick labels under the bars, at the left edge of the column each time maps to."""
    line = [" "] * (label_width + 2 + width + 1)
    origin = label_width + 2  # index of the first cell
    if makespan <= 0:
        line[origin] = "0"
        return "".join(line).rstrip()
    # Aim for a label every ~10 columns, at a round time.
    step = _nice_step(makespan * 10 / width)
    tick = 0.0
    free_from = 0
    count = 0
    while tick <= makespan * (1 + 1e-12):
        col = int(round(tick * width / makespan))
        text = _format_time(tick)
        begin = origin + col
        if begin >= free_from and begin + len(text) <= len(line):
            line[begin : begin + len(text)] = list(text)
            free_from = begin + len(text) + 1
        count += 1
        tick = count * step
    return "".join(line).rstrip()


def _legend(timeline: Timeline, width: int) -> list[str]:
    schedule = timeline.schedule
    kinds = "  ".join(f"{kind} {_KIND_NAMES[kind]}" for kind in schedule.kinds)
    out = [
        f"{schedule.name}, {timeline.source}: makespan {format_time(timeline.makespan)}, "
        f"1 column = {timeline.makespan / width:.3g} time units",
        f"actions: {kinds}; the number is the microbatch (0-based)",
        "idle: " + "  ".join(f"{char} {cause.value.replace('_', ' ')}" for cause, char in IDLE_CHARS.items()),
    ]
    if any(len(schedule.stages_of(rank)) > 1 for rank in range(timeline.num_ranks)):
        out.append("chunks: upper-case letters for a rank's 1st, 3rd, ... stage, lower-case for its 2nd, 4th, ...")
        for rank in range(timeline.num_ranks):
            stages = schedule.stages_of(rank)
            upper = ", ".join(str(s) for i, s in enumerate(stages) if i % 2 == 0) or "-"
            lower = ", ".join(str(s) for i, s in enumerate(stages) if i % 2 == 1) or "-"
            out.append(f"  rank {rank}: stage {upper} upper case; stage {lower} lower case")
    elif all(schedule.stages_of(rank) == (rank,) for rank in range(timeline.num_ranks)):
        out.append("stages: rank r holds stage r")
    else:
        out.append(
            "stages: "
            + ", ".join(
                f"rank {rank} = stage {', '.join(str(s) for s in schedule.stages_of(rank)) or '-'}"
                for rank in range(timeline.num_ranks)
            )
        )
    return out
