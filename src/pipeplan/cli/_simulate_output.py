"""What ``pipeplan simulate`` prints and writes of a simulated step: the Gantt and tables, files, a mix's batch.

    from pipeplan.cli._simulate_output import show_timeline, write_outputs
    timeline = simulate(build_schedule("1f1b", num_stages=4, num_microbatches=8), StageCosts([30, 10, 10, 20]))
    show_timeline(timeline, width=100, step_table=True)   # the Gantt, the step table, the per-rank table
    write_outputs(timeline, args)                          # --plot and --trace files, when asked

:func:`show_timeline` prints the per-rank Gantt, the optional step table and the table of
busy time, idle time by cause and peak in-flight activations; :func:`write_outputs`
writes the ``--plot`` and ``--trace`` files; :func:`mix_batch_lines` gives the text lines of
one drawn batch of ``--mix`` (steps, bounds, idle per rank split into bubble and
variation). The verb itself, its flags and its JSON are :mod:`pipeplan.cli.simulate_cmd`.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from ..timeline import Timeline
from ..viz.tables import format_time
from ._common import make_console, report_written

__all__ = ["show_timeline", "write_outputs", "mix_batch_lines"]


def mix_batch_lines(batch: Any) -> list[str]:
    """The text lines of one drawn batch simulated with per-microbatch costs: steps, bounds, idle split per rank."""
    random, balanced = batch.random.split, batch.balanced.split
    lines = [
        f"one drawn batch (seed {batch.seed}), each microbatch at its own costs and message bytes (ms): random "
        f"microbatches {random.makespan:.1f}, balanced {balanced.makespan:.1f}; at the batch's mean costs "
        f"{random.mean_makespan:.1f}; bounds: random {random.lower_bound:.1f}–{random.upper_bound:.1f}, balanced "
        f"{balanced.lower_bound:.1f}–{balanced.upper_bound:.1f}",
        "idle per rank (ms): bubble = the schedule's (every microbatch at its stage's mean), variation = the "
        "extra from microbatches differing",
        "rank │ random bubble │ random variation │ balanced bubble │ balanced variation",
    ]
    for rank in range(len(random.idle)):
        lines.append(f"{rank:>4} │ {random.bubble[rank]:>13.1f} │ {random.variation[rank]:>16.1f} │ "
                     f"{balanced.bubble[rank]:>15.1f} │ {balanced.variation[rank]:>18.1f}")
    for name, split in (("random", random), ("balanced", balanced)):
        if split.makespan < split.mean_makespan:
            lines.append(f"{name}: the order idles less than at the mean costs, by "
                         f"{split.mean_makespan - split.makespan:.1f} ms: no idle from variation")
        elif split.total_variation > 0:
            changes = {cause.value: sum(rank[cause] for rank in split.cause_change) for cause in split.cause_change[0]}
            shown = ", ".join(f"{cause} {change:+.1f}" for cause, change in
                              sorted(changes.items(), key=lambda item: -abs(item[1])) if abs(change) >= 0.05)
            lines.append(f"{name}: idle against the mean costs by cause, summed over ranks (ms): {shown}")
    return lines


def write_outputs(timeline: Timeline, args: argparse.Namespace) -> None:
    """Write the ``--plot`` and ``--trace`` files when asked, saying where each went."""
    if args.plot:
        from ..viz import plot_timeline

        plot_timeline(timeline, args.plot)
        report_written(args.plot)
    if args.trace:
        from ..viz import write_trace

        write_trace(timeline, args.trace)
        report_written(args.trace)


def show_timeline(timeline: Timeline, *, width: int = 100, step_table: bool = False, activation_sizes: bool = True,
                  console: Console | None = None) -> None:
    """Print the Gantt, the optional step table and the per-rank table.

    ``activation_sizes``: whether the costs gave activation bytes (else the table shows no byte column).
    """
    from ..viz import rank_table, text_gantt
    from ..viz import step_table as steps_of
    from ..viz.tables import BUBBLE_LEGEND

    console = console or make_console()
    schedule = timeline.schedule
    console.print(
        f"[bold]{schedule.name}[/bold]: {schedule.num_stages} stages on {schedule.num_ranks} ranks, "
        f"{schedule.num_microbatches} microbatches — makespan {format_time(timeline.makespan)} ms, "
        f"bubble ratio {timeline.bubble_ratio:.1%}"
    )
    if timeline.iterations > 1:
        console.print(
            f"{timeline.iterations} steps, step boundary {timeline.optimizer}: steady step time "
            f"{format_time(timeline.steady_step_time)} ms (first step {format_time(timeline.step_times[0])} ms); "
            "the chart shows the first step"
        )
    # soft_wrap: a chart wider than the terminal is cut by the terminal, not re-flowed (and stays linear).
    console.print(text_gantt(timeline, width=width, columns=console.width), markup=False, highlight=False,
                  soft_wrap=True)
    if step_table:
        from ..viz.steps import STEP_TABLE_KEY

        console.print(STEP_TABLE_KEY, markup=False, highlight=False)
        console.print(steps_of(timeline), markup=False, highlight=False, soft_wrap=True)
    console.print(rank_table(timeline, activation_sizes=activation_sizes))
    console.print(BUBBLE_LEGEND, markup=False, highlight=False)
