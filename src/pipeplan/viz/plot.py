"""A matplotlib picture of a timeline: Gantt chart above, in-flight memory below.

Needs matplotlib (``pip install matplotlib`` or ``pip install pipeplan[plot]``),
imported only when :func:`plot_timeline` runs, so pipeplan itself does not need it::

    from pipeplan.viz import plot_timeline
    plot_timeline(pipeplan.simulate(schedule, costs), "step.png")   # or "step.svg"
    plot_plan(result.best, "plan.png")    # a planner's Plan: total memory against capacity, the step's parts

The Gantt has one row per rank (rank 0 on top); ``F``, ``B`` and ``W`` have their
own colours, and a rank's second (fourth, ...) chunk is drawn in a lighter shade
of the same colour with a dotted hatch. Idle intervals are shaded by cause
(blocked and overhead also hatched). Past 400 hatched rectangles the hatches are
left out, since Agg takes seconds to draw thousands; the colours still differ.

With many microbatches (more than 24) a whole step is a barcode, so the Gantt
shows two windows side by side (:func:`gantt_windows`): the fill and four steady
steps, and four steady steps and the drain; the steady state between repeats the
same pattern and its length is stated above the right window (and shaded in the
memory panel, which covers the whole step).

Below, one step line per rank shows what :meth:`Timeline.memory` holds over
time: in-flight microbatches when every stage's activation size is the default 1,
activation bytes otherwise, in the binary unit (KiB, MiB, GiB, ...) that suits
the peak. :func:`plot_plan` draws a plan's total instead (weights, gradients and
optimizer state plus activations, GiB) against its capacity, and titles the
figure with the step's parts: the pipeline makespan the Gantt shows plus the
exposed gradient sync and the optimizer step, which make the table's step time.
Times are labelled ms, pipeplan's convention for the costs' unit.

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
from ..units import GIB, format_figures, format_gib
from .tables import format_time

__all__ = ["plot_timeline", "plot_plan", "gantt_windows", "KIND_COLORS", "IDLE_COLORS", "PLOT_FORMATS"]

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
PLOT_FORMATS = (".png", ".svg", ".pdf")
"""The file extensions a plot may have: the extension picks the format."""
_FORMATS = PLOT_FORMATS
_BAR_HEIGHT = 0.8
_LABEL_FONT_PT = 7.0
_FIGURE_WIDTH_IN = 12.0
_HATCH_LIMIT = 400
#: Past this many microbatches the Gantt may show the step's start and end only (:func:`gantt_windows`).
_SPLIT_MICROBATCHES = 24
#: Steady-state microbatches each window shows besides the fill or the drain.
_STEADY_SHOWN = 4


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


def plot_plan(plan: Any, path: str | os.PathLike[str], *, title: str | None = None) -> None:
    """Draw a planner's plan: its pipeline's Gantt, and each rank's total memory against the capacity.

    Args:
        plan: a :class:`pipeplan.plan.Plan` with a ``timeline`` and ``memory``
            (per rank: parameters, gradients, optimizer state; bytes).
        path: ``.png`` (150 dpi), ``.svg`` or ``.pdf``.
        title: what the figure is of (the model, say); the plan's shape and the
            step's parts follow it.

    Raises:
        InvalidInputError: a plan without a timeline, an unsupported extension or
            an unwritable path.
        PipeplanError: matplotlib is not installed.
    """
    if plan.timeline is None:
        raise InvalidInputError("the plan has no timeline to draw (it was not simulated)")
    target = _checked_target(path)
    static = [rank.parameters + rank.gradients + rank.optimizer for rank in plan.memory] or None
    heading = f"{plan.tp}×{plan.pp}×{plan.dp} {plan.dp_mode if plan.dp > 1 else ''} {plan.schedule_label}, b×m " \
              f"{plan.micro_batch_size}×{plan.num_microbatches}".replace("  ", " ")
    lines = [f"{title}: {heading}" if title else heading, step_parts(plan)]
    _save(_timeline_figure(plan.timeline, memory=True, title="\n".join(lines), static_bytes=static,
                           capacity=plan.memory_capacity), target)


def step_parts(plan: Any) -> str:
    """``pipeline makespan 986 ms (the Gantt) + exposed gradient sync 3.1 ms + optimizer step 2.2 ms = step 992 ms``."""
    makespan = plan.pipeline_time if plan.pipeline_time is not None else plan.timeline.makespan
    parts = [f"pipeline makespan {format_figures(makespan)} ms (drawn)"]
    exposed, optimizer = plan.exposed_dp_time, plan.optimizer_time
    if exposed:
        parts.append(f"exposed gradient sync {format_figures(exposed)} ms")
    if optimizer:
        parts.append(f"optimizer step {format_figures(optimizer)} ms")
    step = plan.step_time
    if step is None:
        return parts[0]
    other = step - makespan - exposed - optimizer
    if other > 1e-6 * step:
        parts.append(f"other data-parallel work {format_figures(other)} ms")
    return " + ".join(parts) + f" = step {format_figures(step)} ms (the table's)"


def gantt_windows(timeline: Timeline) -> list[tuple[float, float]]:
    """The time windows the Gantt draws: the whole step, or its start and its end when microbatches are many.

    A microbatch's share of the step is ``c = makespan / (m + ranks − 1)`` (the
    1F1B count); with more than :data:`_SPLIT_MICROBATCHES` microbatches the
    Gantt shows ``(ranks − 1 + 4) · c`` from the start (the fill and four steady
    steps) and as much before the end (four steady steps and the drain), when
    that leaves out at least a quarter of the step.
    """
    makespan = timeline.makespan if timeline.makespan > 0 else 1.0
    ranks, total = timeline.num_ranks, timeline.schedule.num_microbatches
    if total <= _SPLIT_MICROBATCHES:
        return [(0.0, makespan)]
    shown = (ranks - 1 + _STEADY_SHOWN) * makespan / (total + ranks - 1)
    if makespan - 2 * shown < 0.25 * makespan:
        return [(0.0, makespan)]
    return [(0.0, shown), (makespan - shown, makespan)]


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


def _timeline_figure(timeline: Timeline, *, memory: bool, title: str | None,
                     static_bytes: list[float] | None = None, capacity: float | None = None) -> Any:
    """The :class:`matplotlib.figure.Figure` that :func:`plot_timeline` (and :func:`plot_plan`) saves.

    ``static_bytes`` (per rank) and ``capacity``: draw the total memory against the capacity.
    """
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
    windows = gantt_windows(timeline)
    figure = Figure(figsize=(_FIGURE_WIDTH_IN, gantt_height + memory_height + 1.0), layout="constrained")
    grid = figure.add_gridspec(2 if memory else 1, len(windows), width_ratios=[hi - lo for lo, hi in windows],
                               height_ratios=[gantt_height, memory_height] if memory else None)
    gantts: list[Any] = []
    for column, window in enumerate(windows):
        axes = figure.add_subplot(grid[0, column], sharey=gantts[0] if gantts else None)
        share = (window[1] - window[0]) / sum(hi - lo for lo, hi in windows)
        _draw_gantt(axes, timeline, makespan, Patch=Patch, window=window, share=share,
                    legend=column == len(windows) - 1)
        gantts.append(axes)
    if len(windows) > 1:
        (_, first_done), (last_start, _) = windows
        gantts[0].set_title(f"the fill and the first steady steps: 0–{format_time(first_done)} ms", fontsize=8,
                            loc="left")
        gantts[1].set_title(f"… {format_time(last_start - first_done)} ms of the same steady state not drawn; the "
                            "last steady steps and the drain", fontsize=8, loc="left")
        gantts[1].tick_params(labelleft=False)
    if memory:
        memory_axes = figure.add_subplot(grid[1, :], sharex=gantts[0] if len(windows) == 1 else None)
        _draw_memory(memory_axes, timeline, makespan, MaxNLocator, static_bytes=static_bytes, capacity=capacity)
        if len(windows) > 1:
            memory_axes.axvspan(windows[0][1], windows[1][0], color="#f3f3f3", zorder=0,
                                label="not drawn in the Gantt")
        memory_axes.set_xlim(0, makespan)
        memory_axes.set_xlabel("time (ms)")
    else:
        for axes in gantts:
            axes.set_xlabel("time (ms)")
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


def _draw_gantt(axes: Any, timeline: Timeline, makespan: float, *, Patch: Any,
                window: tuple[float, float] | None = None, share: float = 1.0, legend: bool = True) -> None:
    """One bar collection per (rank, kind, chunk parity) and per (rank, idle cause).

    Each collection's label is ``"_rank{r}:{kind}:{parity}"`` or ``"_rank{r}:idle:{cause}"``
    (the leading underscore keeps it out of legends; tests read it). ``window``:
    the time span shown (default the whole step), on ``share`` of the figure's width.
    """
    schedule = timeline.schedule
    num_ranks = timeline.num_ranks
    low, high = window if window is not None else (0.0, makespan)
    # Roughly the axes width in points, to decide whether a label fits on a bar.
    points_per_unit = _FIGURE_WIDTH_IN * 72 * 0.85 * share / max(high - low, 1e-12)
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
            if record.end < low or record.start > high:
                continue
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
    axes.set_xlim(low, high)
    axes.grid(axis="x", color="#e0e0e0", linewidth=0.5)
    axes.set_axisbelow(True)
    if not legend:
        return
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


def _draw_memory(axes: Any, timeline: Timeline, makespan: float, MaxNLocator: Any, *,
                 static_bytes: list[float] | None = None, capacity: float | None = None) -> None:
    """One step line per rank: in-flight microbatches, or bytes in the binary unit that suits the peak.

    With ``static_bytes`` (per rank: weights, gradients, optimizer state) the line is
    the rank's total in GiB, and ``capacity`` a dashed line.
    """
    total = static_bytes is not None
    counts = not total and all(a == 1.0 for a in timeline.activation_bytes) and all(
        w == 1.0 for w in timeline.weight_stash_bytes
    )
    if counts:
        divisor, unit = 1.0, ""
    elif total:
        divisor, unit = float(GIB), "GiB"
    else:
        divisor, unit = _byte_unit(max(timeline.peak_bytes))
    colors = _rank_colors(timeline.num_ranks)
    for rank in range(timeline.num_ranks):
        trace = timeline.memory(rank)
        base = static_bytes[rank] if static_bytes is not None else 0.0
        values = trace.inflight if counts else (trace.bytes + base) / divisor
        axes.step([*trace.times, makespan], [*values, values[-1]], where="post", label=f"rank {rank}",
                  linewidth=1.2, color=colors[rank])
    if capacity:
        axes.axhline(capacity / divisor, color="#c62828", linestyle="--", linewidth=1.0,
                     label=f"capacity {format_gib(capacity)}")
    if counts:
        axes.set_ylabel("in-flight\nmicrobatches")
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    elif total:
        axes.set_ylabel("memory per GPU (GiB):\nweights, gradients,\noptimizer state\n+ activations", fontsize=8)
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
