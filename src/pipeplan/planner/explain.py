"""Why one plan beats another, in one line: bubble, exposed communication, optimizer, memory.

    from pipeplan.planner.explain import explain
    explain(result.best, result.best_baseline.plan, "Megatron's recommended layout")
    # "1.05× faster than Megatron's recommended layout (783 → 747 ms): exposed data-parallel communication 31.2 → 4.1 ms, ..."

The step is ``pipeline + exposed data-parallel time + optimizer`` (docs/planner.md);
the line names the parts that differ most, largest first, so a user sees what
the plan buys: fewer bubbles, communication hidden or sharded away, a cheaper
step, or memory that allows a larger micro-batch.
"""

from __future__ import annotations

from ..plan import Plan
from ..units import format_figures, format_memory_column

__all__ = ["explain"]


def _ms(plan: Plan, value: float | None) -> float:
    return 0.0 if value is None else value * plan.time_unit * 1e3


def explain(plan: Plan, baseline: Plan, name: str) -> str:
    """One line: ``plan``'s step against ``baseline``'s (named ``name``), by the parts that differ most."""
    ours, theirs = _ms(plan, plan.step_time), _ms(baseline, baseline.step_time)
    if not ours or not theirs:
        return f"{name} has no step time to compare with"
    parts = [
        ("pipeline idle (bubble)", _ms(plan, (plan.pipeline_time or 0) * (plan.bubble_ratio or 0)),
         _ms(baseline, (baseline.pipeline_time or 0) * (baseline.bubble_ratio or 0))),
        ("compute", _ms(plan, (plan.pipeline_time or 0) * (1 - (plan.bubble_ratio or 0))),
         _ms(baseline, (baseline.pipeline_time or 0) * (1 - (baseline.bubble_ratio or 0)))),
        ("exposed data-parallel communication", _ms(plan, plan.exposed_dp_time),
         _ms(baseline, baseline.exposed_dp_time)),
        ("optimizer step", _ms(plan, plan.optimizer_time), _ms(baseline, baseline.optimizer_time)),
    ]
    parts.sort(key=lambda part: -abs(part[2] - part[1]))
    changes = [f"{label} {format_figures(theirs_)} → {format_figures(ours_)} ms" for label, ours_, theirs_ in parts
               if abs(theirs_ - ours_) >= 0.005 * theirs][:3]
    verdict = "the same as" if abs(ours - theirs) <= 0.005 * theirs else (
        f"{theirs / ours:.2f}× faster than" if ours < theirs else f"{ours / theirs:.2f}× slower than")
    line = f"{verdict} {name} ({format_figures(theirs)} → {format_figures(ours)} ms per step)"
    if changes:
        line += ": " + ", ".join(changes)
    if plan.memory and baseline.memory:
        theirs_gib, ours_gib = format_memory_column([max(baseline.peak_memory), max(plan.peak_memory)])
        line += f"; worst GPU {theirs_gib} → {ours_gib}"
    return line
