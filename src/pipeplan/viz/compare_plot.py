"""Predicted over measured: two Gantt charts and their memory on one time axis.

    from pipeplan.viz import plot_comparison
    plot_comparison(report["predicted_timeline"], report["timeline"], "cmp.png")   # pipeplan run --plot

Panels, top to bottom, all sharing the time axis (0 to the longer makespan, ms):
the predicted Gantt, the measured Gantt (drawn like :func:`~pipeplan.viz.plot_timeline`:
kinds coloured, idle shaded by cause), then one memory panel per timeline (in-flight
activation bytes per rank). Needs matplotlib, imported only when called; drawn on
the Agg canvas without pyplot.
"""

from __future__ import annotations

import os
from typing import Any

from ..timeline import expect_timeline
from ..errors import InvalidInputError, PipeplanError
from ..timeline import Timeline
from .plot import _FIGURE_WIDTH_IN, _checked_target, _draw_gantt, _draw_memory, _save
from .tables import format_time

__all__ = ["plot_comparison"]


def plot_comparison(
    predicted: Timeline,
    measured: Timeline,
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
) -> None:
    """Draw ``predicted`` above ``measured`` (Gantt, then memory) on one time axis and save it.

    Args:
        predicted, measured: timelines of the same schedule (e.g. the runtime's
            and :func:`pipeplan.predict.predict`'s).
        path: ``.png`` (150 dpi), ``.svg`` or ``.pdf``.
        title: figure title; defaults to the schedule, both makespans and the error.

    Raises:
        InvalidInputError: timelines of different shapes, an unsupported
            extension or an unwritable path.
        PipeplanError: matplotlib is not installed.
    """
    expect_timeline("predicted", predicted)
    expect_timeline("measured", measured)
    target = _checked_target(path)
    if predicted.num_ranks != measured.num_ranks or predicted.schedule.num_actions != measured.schedule.num_actions:
        raise InvalidInputError(
            f"the timelines describe different schedules: predicted has {predicted.num_ranks} ranks and "
            f"{predicted.schedule.num_actions} actions, measured {measured.num_ranks} and "
            f"{measured.schedule.num_actions}"
        )
    _save(comparison_figure(predicted, measured, title=title), target)


def comparison_figure(predicted: Timeline, measured: Timeline, *, title: str | None = None) -> Any:
    """The :class:`matplotlib.figure.Figure` :func:`plot_comparison` saves (axes: 2 Gantts, 2 memory panels)."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise PipeplanError(
            "plot_comparison needs matplotlib, which is not installed: pip install matplotlib "
            "(or pip install 'pipeplan[plot]')"
        ) from None
    horizon = max(predicted.makespan, measured.makespan, 1e-9)
    gantt_height = 0.9 + 0.42 * predicted.num_ranks
    figure = Figure(figsize=(_FIGURE_WIDTH_IN, 2 * gantt_height + 2 * 1.8 + 1.2), layout="constrained")
    axes = figure.subplots(4, 1, sharex=True,
                           gridspec_kw={"height_ratios": [gantt_height, gantt_height, 1.8, 1.8]})
    for row, (name, timeline) in enumerate((("predicted", predicted), ("measured", measured))):
        _draw_gantt(axes[row], timeline, horizon, Patch=Patch)
        axes[row].set_title(f"{name}: makespan {format_time(timeline.makespan)} ms, "
                            f"bubble {timeline.bubble_ratio:.1%}", fontsize=9, loc="left")
        _draw_memory(axes[2 + row], timeline, horizon, MaxNLocator)
        axes[2 + row].set_title(f"{name} memory", fontsize=9, loc="left")
    for panel in axes:
        panel.set_xlim(0, horizon)
    axes[-1].set_xlabel("time (ms)")
    error = (predicted.makespan - measured.makespan) / measured.makespan if measured.makespan else 0.0
    figure.suptitle(
        title if title is not None else
        f"{measured.schedule.name}: predicted {format_time(predicted.makespan)} ms vs measured "
        f"{format_time(measured.makespan)} ms ({error:+.1%})"
    )
    return figure
