"""Per-rank metrics of a timeline as a rich table, for the terminal.

One row per rank (stages held, busy time, utilisation, idle time by cause, peak
in-flight microbatches and activation bytes) and a total row; the caption holds
the makespan, the bubble ratio and the zero-bubble paper's span bubble rate::

    >>> import pipeplan
    >>> from pipeplan.viz import rank_table
    >>> table = rank_table(pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=2),
    ...                                      pipeplan.StageCosts([2, 1])))   # rich.console.Console().print(table)
    >>> table.row_count, table.caption
    (3, 'makespan 13 ms · bubble ratio 30.8% · span bubble rate 7.7%')

:data:`BUBBLE_LEGEND` says what the caption's two bubble figures are, once, for the line beneath
the table. Times are milliseconds (the unit of every cost the CLI takes); idle causes that are
zero on every rank get no column. Activation sizes are in binary units
(:func:`pipeplan.units.format_bytes`); a timeline whose costs gave none
(``activation_sizes=False``) gets no bytes column rather than microbatches counted as bytes.
"""

from __future__ import annotations

from rich.table import Table

from ..units import format_bytes
from ..timeline import expect_timeline
from ..timeline import IdleCause, Timeline

__all__ = ["rank_table", "format_time", "BUBBLE_LEGEND"]

#: What the caption's two bubble figures mean, for the line a caller prints beneath the table
#: (the names are :class:`~pipeplan.timeline.Timeline`'s and ``--json``'s: ``bubble_ratio``, ``span_bubble_rate``).
BUBBLE_LEGEND = ("bubble ratio: the share of all ranks' time spent idle, 1 − Σ busy / (ranks × makespan); "
                 "span bubble rate (the zero-bubble paper's): (longest rank span − busiest rank's busy time) / "
                 "longest span, a span running from a rank's first action to its last")

def format_time(value: float) -> str:
    """A time with 4 significant digits, without exponent below 10**6: ``12.35``, ``7,890``."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _count(number: int, noun: str) -> str:
    """``_count(1, "rank")`` → ``"1 rank"``, ``_count(4, "microbatch")`` → ``"4 microbatches"``."""
    if number == 1:
        return f"1 {noun}"
    return f"{number} {noun}{'es' if noun.endswith('ch') else 's'}"


def rank_table(timeline: Timeline, *, activation_sizes: bool = True) -> Table:
    """A :class:`rich.table.Table` of per-rank metrics of ``timeline``.

    Columns: rank, stages held, busy (compute) time, utilisation % (busy /
    makespan), one idle-time column per :class:`~pipeplan.timeline.IdleCause`
    that is non-zero on some rank, peak in-flight microbatches, and peak
    activation bytes. The last row totals busy and idle time over ranks, shows
    the mean utilisation (= 1 − bubble ratio) and the largest peaks.

    Args:
        timeline: any timeline, simulated or measured.
        activation_sizes: whether its costs carry real activation sizes; without
            them (the simulator then counts each microbatch as 1 byte) the bytes
            column is left out and the caption says "no activation sizes given".

    Returns:
        The table; its caption gives makespan, bubble ratio and span bubble rate.
    """
    expect_timeline("timeline", timeline)
    schedule = timeline.schedule
    idle = timeline.idle_by_cause()
    causes = [cause for cause in IdleCause if any(per_rank[cause] > 0 for per_rank in idle)]
    table = Table(
        title=(
            f"{schedule.name} ({timeline.source}): {_count(schedule.num_stages, 'stage')} on "
            f"{_count(timeline.num_ranks, 'rank')}, {_count(schedule.num_microbatches, 'microbatch')}"
        ),
        caption=(
            f"makespan {format_time(timeline.makespan)} ms · bubble ratio {timeline.bubble_ratio:.1%} · "
            f"span bubble rate {timeline.span_bubble_rate:.1%}"
            + ("" if activation_sizes else " · no activation sizes given")
        ),
    )
    table.add_column("rank", justify="right")
    table.add_column("stages", justify="left")
    table.add_column("busy ms", justify="right")
    table.add_column("util %", justify="right")
    for cause in causes:
        table.add_column(f"idle {cause.value.replace('_', ' ')} ms", justify="right")
    table.add_column("peak in-flight", justify="right")
    if activation_sizes:
        table.add_column("peak activations", justify="right")
    utilisation = timeline.utilisation
    for rank in range(timeline.num_ranks):
        table.add_row(
            str(rank),
            ", ".join(str(stage) for stage in schedule.stages_of(rank)) or "-",
            format_time(float(timeline.busy[rank])),
            f"{100 * utilisation[rank]:.1f}",
            *(format_time(idle[rank][cause]) for cause in causes),
            str(timeline.peak_inflight[rank]),
            *([format_bytes(timeline.peak_bytes[rank])] if activation_sizes else []),
            end_section=rank == timeline.num_ranks - 1,
        )
    table.add_row(
        "total",
        "all",
        format_time(float(timeline.busy.sum())),
        f"{100 * (1 - timeline.bubble_ratio):.1f}",
        *(format_time(sum(per_rank[cause] for per_rank in idle)) for cause in causes),
        str(max(timeline.peak_inflight)),
        *([format_bytes(max(timeline.peak_bytes))] if activation_sizes else []),
        style="bold",
    )
    return table
