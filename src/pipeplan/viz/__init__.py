"""Views of a timeline: text Gantt, step table, rank table, plot, Chrome/Perfetto trace; the planner's table.

Every view takes any :class:`~pipeplan.timeline.Timeline` (simulated or measured;
full, split or no backward; one or several stages per rank)::

    >>> import pipeplan
    >>> from pipeplan.viz import chrome_trace, text_gantt
    >>> tl = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=2),
    ...                        pipeplan.StageCosts([2, 1]))
    >>> print(text_gantt(tl, width=24))
    rank 0 |F0  F1 <<B0      B1     |
    rank 1 |....F0B0 F1B1  _________|
            0                 10
    1f1b, simulated: makespan 13 ms, 1 column = 0.542 ms
    actions: F forward  B backward; the number is the microbatch (0-based)
    idle: . fill  _ drain  > starved upstream  < starved downstream  # blocked  * overhead
    stages: rank r holds stage r
    >>> len(chrome_trace(tl)["traceEvents"])      # write_trace(tl, "step.json") writes them for ui.perfetto.dev
    45

``plot_timeline`` and ``plot_comparison`` (predicted over measured) import matplotlib only when called; the rest needs numpy and rich.
"""

from __future__ import annotations

from .compare_plot import plot_comparison
from .gantt_text import text_gantt
from .plans import plan_table
from .plot import plot_timeline
from .steps import step_table
from .tables import rank_table
from .trace import chrome_trace, comparison_trace, write_trace

__all__ = ["text_gantt", "step_table", "rank_table", "plan_table", "plot_timeline", "plot_comparison", "chrome_trace",
           "comparison_trace", "write_trace"]
