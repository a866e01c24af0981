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
    1f1b, simulated: makespan 750 ms, 1 column = 12.5 ms
    actions: F forward  B backward; the number is the microbatch (0-based)
    idle: . fill  _ drain  > starved upstream  < starved downstream  # blocked  * overhead
    stages: rank r holds stage r

Drawing rules (also printed in the legend):

* Time runs left to right, in ms (the unit of pipeplan's costs; ``unit=`` names
  another); ``width`` columns cover ``[0, makespan]``, so one column is
  ``makespan / width``. An interval ``[a, b)`` fills the columns from
  ``round(a / step)`` to ``round(b / step)``, so neighbouring intervals never
  overlap and every rank line has exactly ``width`` cells.
* Many microbatches per character (the median action shorter than one column:
  m = 128 on 16 ranks at 100 columns) would draw a barcode. The chart then shows
  three windows at one readable scale (three columns for the shortest quarter of
  the actions): the start of the step (warm-up), its middle (steady state) and
  its end (cool-down), separated by ``" … "`` (:data:`ELISION`) on every line; the
  axis labels each window's own times and the legend says how many ms each mark
  leaves out. ``elide=False`` always draws the whole step.
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

import bisect
import math
import textwrap

import numpy as np

from .._validation import positive_int
from ..timeline import expect_timeline
from ..limits import check_gantt_size
from ..timeline import IdleCause, Timeline
from .tables import format_time

__all__ = ["text_gantt", "IDLE_CHARS", "ELISION"]

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


def text_gantt(timeline: Timeline, *, width: int = 100, legend: bool = True, elide: bool = True,
               unit: str = "ms", wider: str = "a wider chart (--width) or --plot",
               columns: int | None = None) -> str:
    """Render ``timeline`` as a text Gantt chart.

    Args:
        timeline: any timeline (simulated or measured; full, split or no backward;
            one or several stages per rank).
        width: number of time columns (>= 1); one column is ``makespan / width``
            time units.
        legend: append the legend (letters, chunk cases, idle characters, scale).
        elide: when the typical action would be narrower than one column (many
            microbatches per character: a barcode), draw three windows at a
            readable scale instead, the start (warm-up), the middle (steady
            state) and the end (cool-down), separated by :data:`ELISION` marks;
            the legend gives the time each mark leaves out. ``False``: always the
            whole step at one scale.
        unit: the timeline's time unit, for the legend (pipeplan's costs are ms).
        wider: what shows the whole step when the chart is elided, as the caller's
            flags name it (``plan`` has ``--plot`` but no ``--width``).
        columns: the terminal's width: legend lines longer are wrapped between
            words (continuations indented two spaces); ``None``: never wrapped.
            The chart's own lines are ``width`` plus the rank label and bars.

    Returns:
        The chart: one ``"rank r |...|"`` line per rank (all of the same length,
        ``width`` cells between the bars, elision marks included), a time-axis
        line, then the legend lines when ``legend`` is true. No trailing newline.

    Raises:
        InvalidInputError: ``timeline`` is not a Timeline, ``width`` is not an
            integer >= 1, or the chart would not fit in the memory available.
    """
    expect_timeline("timeline", timeline)
    width = positive_int("width", width)
    check_gantt_size(width, timeline.num_ranks)
    makespan = timeline.makespan
    label_width = len(f"rank {timeline.num_ranks - 1}")
    windows = _windows(timeline, width) if elide else None
    spans = windows or [(0.0, makespan, width)]
    ranks = [_RankView(timeline, rank) for rank in range(timeline.num_ranks)]
    lines = []
    for view in ranks:
        cells = ELISION.join(view.cells(begin, end, columns) for begin, end, columns in spans)
        lines.append(f"{f'rank {view.rank}':<{label_width}} |{cells}|")
    lines.append(_axis(spans, label_width))
    if legend:
        for line in _legend(timeline, spans, unit, wider):
            lines += (textwrap.wrap(line, width=columns, subsequent_indent="  ", break_long_words=False,
                                    break_on_hyphens=False) or [line]) if columns else [line]
    return "\n".join(lines)


#: The mark between the windows of an elided chart (see :func:`text_gantt`'s ``elide``).
ELISION = " … "

#: An elided chart's target: columns per short action (the shortest quarter's longest), enough for ``F12``.
_COLUMNS_PER_ACTION = 3


def _windows(timeline: Timeline, width: int) -> list[tuple[float, float, int]] | None:
    """The start, middle and end windows ``(begin, end, columns)`` of a barcode chart, or ``None``.

    ``None`` (draw the whole step) unless the median action is shorter than one column of the
    whole-step chart and three windows at :data:`_COLUMNS_PER_ACTION` columns per short action
    (the first quartile of the durations) leave out some time; the windows share one scale and
    ``width`` minus the two marks.
    """
    makespan = timeline.makespan
    columns = width - 2 * len(ELISION)
    if makespan <= 0 or columns < 3 * 4 or not len(timeline.start):
        return None
    durations = timeline.end - timeline.start
    median, short = (float(q) for q in np.quantile(durations, [0.5, 0.25]))
    if not short > 0 or median >= makespan / width:
        return None
    per_window = [columns // 3 + (1 if k < columns % 3 else 0) for k in range(3)]
    column_time = short / _COLUMNS_PER_ACTION
    spans = [count * column_time for count in per_window]
    if sum(spans) >= makespan:
        return None
    middle = (makespan - spans[1]) / 2
    return [(0.0, spans[0], per_window[0]), (middle, middle + spans[1], per_window[1]),
            (makespan - spans[2], makespan, per_window[2])]


class _RankView:
    """One rank's records and idle intervals in time order, drawn into any time window."""

    def __init__(self, timeline: Timeline, rank: int) -> None:
        self.rank = rank
        case = _chunk_case(timeline, rank)
        self.idle = [(iv.start, iv.end, IDLE_CHARS[iv.cause]) for iv in timeline.idle_intervals(rank)]
        self.actions = [
            (record.start, record.end,
             record.action.kind if case[record.action.stage] else record.action.kind.lower(),
             record.action.microbatch)
            for record in timeline.records(rank)
        ]
        self.idle_ends = [end for _start, end, _char in self.idle]
        self.action_ends = [end for _start, end, _kind, _mb in self.actions]

    def cells(self, begin: float, end: float, width: int) -> str:
        """The ``width`` cells covering ``[begin, end)``: idle characters, then action labels over them."""
        scale = width / (end - begin) if end > begin else 0.0

        def column(time: float) -> int:
            return min(width, max(0, int(round((time - begin) * scale))))

        cells = [" "] * width
        covered = [False] * width
        for start, stop, char in self.idle[bisect.bisect_left(self.idle_ends, begin):]:
            if start >= end:
                break
            for col in range(column(start), column(stop)):
                cells[col] = char
        short: list[tuple[int, str]] = []
        for start, stop, kind, microbatch in self.actions[bisect.bisect_left(self.action_ends, begin):]:
            if start > end or (start == end and stop > start):
                break
            first, last = column(start), column(stop)
            if last <= first:
                if start >= begin:
                    short.append((first, kind))
                continue
            text = f"{kind}{microbatch}"
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
        return "".join(cells)


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


def _axis(spans: list[tuple[float, float, int]], label_width: int) -> str:
    """Tick labels under the bars, at the left edge of the column each time maps to, window by window."""
    total = sum(columns for _b, _e, columns in spans) + len(ELISION) * (len(spans) - 1)
    line = [" "] * (label_width + 2 + total + 1)
    origin = label_width + 2  # index of the first cell
    for begin, end, columns in spans:
        _ticks(line, origin, begin, end, columns)
        origin += columns + len(ELISION)
    return "".join(line).rstrip()


def _ticks(line: list[str], origin: int, begin: float, end: float, columns: int) -> None:
    """Write round tick times of ``[begin, end]`` into ``line`` from ``origin`` (one spare cell at the right)."""
    if end <= begin:
        line[origin] = _format_time(begin)
        return
    # Aim for a label every ~10 columns, at a round time.
    step = _nice_step((end - begin) * 10 / columns)
    count = math.ceil(begin / step * (1 - 1e-12))
    tick = count * step
    free_from = origin
    limit = origin + columns + 1
    while tick <= end * (1 + 1e-12) + 1e-300:
        col = int(round((tick - begin) * columns / (end - begin)))
        text = _format_time(tick)
        start = origin + col
        if start >= free_from and start + len(text) <= limit:
            line[start : start + len(text)] = list(text)
            free_from = start + len(text) + 1
        count += 1
        tick = count * step


def _legend(timeline: Timeline, spans: list[tuple[float, float, int]], unit: str, wider: str) -> list[str]:
    schedule = timeline.schedule
    kinds = "  ".join(f"{kind} {_KIND_NAMES[kind]}" for kind in schedule.kinds)
    begin, end, columns = spans[0]
    out = [
        f"{schedule.name}, {timeline.source}: makespan {format_time(timeline.makespan)} {unit}, "
        f"1 column = {(end - begin) / columns:.3g} {unit}",
    ]
    if len(spans) > 1:
        gaps = [(left[1], right[0]) for left, right in zip(spans, spans[1:])]
        out.append(
            f"elided: the start, the middle and the end of the step at one scale; \"{ELISION.strip()}\" leaves out "
            + " and ".join(f"{format_time(b - a)} {unit} ({format_time(a)}–{format_time(b)})" for a, b in gaps)
            + f"; {wider} shows the whole step"
        )
    out += [
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
