"""A matplotlib picture of a timeline: Gantt chart above, in-flight memory below.

Needs matplotlib (``pip install matplotlib`` or ``pip install pipeplan[plot]``),
imported only when :func:`plot_timeline` runs, so pipeplan itself does not need it::

    from pipeplan.viz import plot_timeline
    plot_timeline(pipeplan.simulate(schedule, costs), "step.png")   # or "step.svg"

The Gantt has one row per rank (rank 0 on top); ``F``, ``B`` and ``W`` have their
own colours, and a rank's second (fourth, ...) chunk is drawn in a lighter shade
of the same colour with a dotted hatch. Idle intervals are shaded by cause
(blocked and overhead also hatched). Past 400 hatched rectangles the hatches are
left out, since Agg takes seconds to draw thousands; the colours still differ.

Below, one step line per rank shows what :meth:`Timeline.memory` holds over
time: in-flight microbatches when every stage's activation size is the default 1,
activation bytes otherwise, in the binary unit (KiB, MiB, GiB, ...) that suits
the peak. Times are labelled ms, pipeplan's convention for the costs' unit.

The figure is drawn on matplotlib's Agg canvas without touching pyplot, so it
never opens a window or changes your backend.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import InvalidInputError, PipeplanError
from ..timeline import expect_timeline
from ..schedule import Kind
from ..timeline import IdleCause, Timeline
from .tables import format_time

__all__ = ["plot_timeline", "KIND_COLORS", "IDLE_COLORS"]

#: Bar colour per action kind.
KIND_COLORS = {"F": "#4878d0", "B": "#ee854a", "I": "#d65f5f", "W": "#6acc64", "U": "#956cb4"}

#: Shade (colour, hatch) per idle cause.
IDLE_COLORS: dict[IdleCause, tuple[str, str]] = {
    IdleCause.FILL: ("#d9d9d9", ""),
    IdleCause.DRAIN: ("#efefef", ""),
    IdleCause.STARVED_UPSTREAM: ("#fbe7a1", ""),
    IdleCause.STARVED_DOWNSTREAM: ("#f6c4c4", ""),
    IdleCause.BLOCKED: ("#d5c4ec", "////"),
    IdleCause.OVERHEAD: ("#bdbdbd", "xx"),
}

_KIND_NAMES = {"F": "forward", "B": "backward", "I": "input grad", "W": "weight grad", "U": "update"}
_FORMATS = (".png", ".svg", ".pdf")
_BAR_HEIGHT = 0.8
_LABEL_FONT_PT = 7.0
_FIGURE_WIDTH_IN = 12.0
_HATCH_LIMIT = 400


def plot_timeline(
    timeline: Timeline,
    path: str | os.PathLike[str],
    *,
    memory: bool = True,
    title: str | None = None,
) -> None:
    """Draw ``timeline`` and save it to ``path``.

    Args:
        timeline: any timeline, simulated or measured.
        path: output file; the extension picks the format: ``.png`` (150 dpi),
            ``.svg`` or ``.pdf``.
        memory: add the in-flight memory panel under the Gantt chart.
        title: figure title; defaults to the schedule name, source, makespan and
            bubble ratio.

    Raises:
        InvalidInputError: an unsupported extension or a path that cannot be written.
        PipeplanError: matplotlib is not installed.
    """
    expect_timeline("timeline", timeline)
    target = _checked_target(path)
    _save(_timeline_figure(timeline, memory=memory, title=title), target)


def _checked_target(path: str | os.PathLike[str]) -> str:
    """``path`` as a string, if its extension names a format matplotlib writes here."""
    target = os.fspath(path)
    if os.path.splitext(target)[1].lower() not in _FORMATS:
        raise InvalidInputError(
            f"path must end in {', '.join(_FORMATS)} (the extension picks the format), got {target!r}"
        )
    return target


def _save(figure: Any, target: str) -> None:
    """Write ``figure`` to ``target`` (PNG at 150 dpi), one line on an unwritable path."""
    try:
        figure.savefig(target, dpi=150 if target.lower().endswith(".png") else None)
    except OSError as error:
        raise InvalidInputError(f"cannot write the plot to path {target!r}: {error.strerror or error}") from None


def _timeline_figure(timeline: Timeline, *, memory: bool, title: str | None) -> Any:
    """The :class:`matplotlib.figure.Figure` that :func:`plot_timeline` saves."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise PipeplanError(
            "plot_timeline needs matplotlib, which is not installed: pip install matplotlib "
            "(or pip install 'pipeplan[plot]')"
        ) from None

    num_ranks = timeline.num_ranks
    makespan = timeline.makespan if timeline.makespan > 0 else 1.0
    gantt_height = 0.9 + 0.42 * num_ranks
    memory_height = 2.4 if memory else 0.0
    figure = Figure(figsize=(_FIGURE_WIDTH_IN, gantt_height + memory_height + 1.0), layout="constrained")
    if memory:
        gantt, memory_axes = figure.subplots(
            2, 1, sharex=True, gridspec_kw={"height_ratios": [gantt_height, memory_height]}
        )
    else:
        gantt = figure.subplots(1, 1)
    _draw_gantt(gantt, timeline, makespan, Patch=Patch)
    if memory:
        _draw_memory(memory_axes, timeline, makespan, MaxNLocator)
        memory_axes.set_xlabel("time (ms)")
    else:
        gantt.set_xlabel("time (ms)")
    figure.suptitle(
        title
        if title is not None
        else (
            f"{timeline.schedule.name} ({timeline.source}): makespan {format_time(timeline.makespan)} ms, "
            f"bubble ratio {timeline.bubble_ratio:.1%}"
        )
    )
    return figure


def _lighten(color: str, amount: float = 0.45) -> tuple[float, float, float]:
    """``color`` mixed with white (``amount`` of white)."""
    from matplotlib.colors import to_rgb

    red, green, blue = to_rgb(color)
    return (red + (1 - red) * amount, green + (1 - green) * amount, blue + (1 - blue) * amount)


def _draw_gantt(axes: Any, timeline: Timeline, makespan: float, *, Patch: Any) -> None:
    """One bar collection per (rank, kind, chunk parity) and per (rank, idle cause).

    Each collection's label is ``"_rank{r}:{kind}:{parity}"`` or ``"_rank{r}:idle:{cause}"``
    (the leading underscore keeps it out of legends; tests read it).
    """
    schedule = timeline.schedule
    num_ranks = timeline.num_ranks
    # Roughly the axes width in points, to decide whether a label fits on a bar.
    points_per_unit = _FIGURE_WIDTH_IN * 72 * 0.85 / makespan
    idle_seen: set[IdleCause] = set()
    chunked = False
    kinds_seen: set[str] = set()
    hatched_idle = {cause for cause, (_color, hatch) in IDLE_COLORS.items() if hatch}
    second_chunks = {
        stage for rank in range(num_ranks) for index, stage in enumerate(schedule.stages_of(rank)) if index % 2
    }
    hatched = sum(interval.cause in hatched_idle for interval in timeline.idle_intervals()) + sum(
        action.stage in second_chunks for order in schedule.orders for action in order
    )
    # Hatching thousands of rectangles makes Agg slow (seconds); colours alone still tell them apart.
    use_hatch = hatched <= _HATCH_LIMIT
    for rank in range(num_ranks):
        band = (rank - _BAR_HEIGHT / 2, _BAR_HEIGHT)
        by_cause: dict[IdleCause, list[tuple[float, float]]] = {}
        for interval in timeline.idle_intervals(rank):
            by_cause.setdefault(interval.cause, []).append((interval.start, interval.end - interval.start))
        for cause, spans in by_cause.items():
            color, hatch = IDLE_COLORS[cause]
            idle_seen.add(cause)
            hatch = hatch if use_hatch else ""
            axes.broken_barh(spans, band, facecolors=color, edgecolor="#9e9e9e" if hatch else "none",
                             hatch=hatch or None, linewidth=0.0, label=f"_rank{rank}:idle:{cause.value}")
        chunk_of = {stage: index for index, stage in enumerate(schedule.stages_of(rank))}
        by_kind: dict[tuple[Kind, int], list[tuple[float, float]]] = {}
        for record in timeline.records(rank):
            kind, stage, microbatch = record.action
            parity = chunk_of[stage] % 2
            duration = record.end - record.start
            by_kind.setdefault((kind, parity), []).append((record.start, duration))
            label = str(microbatch)
            if duration * points_per_unit >= len(label) * _LABEL_FONT_PT * 0.65 + 2:
                axes.text(record.start + duration / 2, rank, label, ha="center", va="center",
                          fontsize=_LABEL_FONT_PT, color="black" if parity else "white", clip_on=True)
        for (kind, parity), spans in by_kind.items():
            kinds_seen.add(kind)
            chunked = chunked or parity == 1
            bar_color = _lighten(KIND_COLORS[kind]) if parity else KIND_COLORS[kind]
            axes.broken_barh(spans, band, facecolors=bar_color, edgecolor="white",
                             hatch="..." if parity and use_hatch else None, linewidth=0.6,
                             label=f"_rank{rank}:{kind}:{parity}")
    axes.set_ylim(num_ranks - 0.5, -0.5)
    axes.set_yticks(range(num_ranks))
    axes.set_yticklabels(
        [
            f"rank {rank}\n({'stages' if len(schedule.stages_of(rank)) > 1 else 'stage'} "
            f"{', '.join(str(s) for s in schedule.stages_of(rank))})"
            if schedule.stages_of(rank)
            else f"rank {rank}"
            for rank in range(num_ranks)
        ],
        fontsize=8,
    )
    axes.set_xlim(0, makespan)
    axes.grid(axis="x", color="#e0e0e0", linewidth=0.5)
    axes.set_axisbelow(True)
    handles = [
        Patch(facecolor=KIND_COLORS[kind], label=_KIND_NAMES[kind])
        for kind in schedule.kinds
        if kind in kinds_seen
    ]
    if chunked:
        handles.append(Patch(facecolor=_lighten("#808080"), hatch="..." if use_hatch else None, edgecolor="white",
                             label="a rank's 2nd, 4th, ... chunk"))
    handles.extend(
        Patch(facecolor=IDLE_COLORS[cause][0], hatch=(IDLE_COLORS[cause][1] if use_hatch else "") or None,
              edgecolor="#9e9e9e",
              label=f"idle: {cause.value.replace('_', ' ')}")
        for cause in IdleCause
        if cause in idle_seen
    )
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)


def _draw_memory(axes: Any, timeline: Timeline, makespan: float, MaxNLocator: Any) -> None:
    """One step line per rank: in-flight microbatches, or bytes in the binary unit that suits the peak."""
    counts = all(a == 1.0 for a in timeline.activation_bytes) and all(
        w == 1.0 for w in timeline.weight_stash_bytes
    )
    if counts:
        divisor, unit = 1.0, ""
    else:
        divisor, unit = _byte_unit(max(timeline.peak_bytes))
    colors = _rank_colors(timeline.num_ranks)
    for rank in range(timeline.num_ranks):
        trace = timeline.memory(rank)
        values = trace.inflight if counts else trace.bytes / divisor
        axes.step([*trace.times, makespan], [*values, values[-1]], where="post", label=f"rank {rank}",
                  linewidth=1.2, color=colors[rank])
    if counts:
        axes.set_ylabel("in-flight\nmicrobatches")
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    else:
        axes.set_ylabel(f"in-flight\nactivations ({unit})")
    if timeline.schedule.forward_only:
        axes.set_ylim(0, 1)
        axes.text(0.5, 0.5, "forward only: no activations are kept for a backward", transform=axes.transAxes,
                  ha="center", va="center", fontsize=9, color="#616161")
    else:
        axes.set_ylim(bottom=0)
    axes.grid(color="#e0e0e0", linewidth=0.5)
    axes.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False,
                ncol=1 if timeline.num_ranks <= 8 else 2)


def _rank_colors(num_ranks: int) -> list[Any]:
    """A distinct colour per rank: tab10 / tab20 while they last, then a viridis ramp."""
    from matplotlib import colormaps

    if num_ranks <= 10:
        return [colormaps["tab10"](index) for index in range(num_ranks)]
    if num_ranks <= 20:
        return [colormaps["tab20"](index) for index in range(num_ranks)]
    return [colormaps["viridis"](index / (num_ranks - 1)) for index in range(num_ranks)]


def _byte_unit(peak: float) -> tuple[float, str]:
    """The largest binary unit (B, KiB, ...) not above ``peak``, and its name."""
    divisor, unit = 1.0, "B"
    for name in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if peak < divisor * 1024:
            break
        divisor, unit = divisor * 1024, name
    return divisor, unit
