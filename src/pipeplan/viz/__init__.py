"""Views of a timeline: text Gantt, step table, rank table, plot, Chrome/Perfetto trace; the planner's table.

Every view takes any :class:`~pipeplan.timeline.Timeline` (simulated or measured;
full, split or no backward; one or several stages per rank)::

    from pipeplan.viz import text_gantt, rank_table, write_trace
    tl = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8), costs)
    print(text_gantt(tl)); write_trace(tl, "step.json")

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
