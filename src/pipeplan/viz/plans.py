"""The planner's ranked table: each plan, the Megatron-LM default and the one-knob changes.

    from pipeplan.viz.plans import plan_table
    console.print(plan_table(result))        # result from pipeplan.planner.search
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from .tables import format_bytes

__all__ = ["plan_table", "plan_row", "PLAN_COLUMNS"]

PLAN_COLUMNS = ("rank", "pp×dp", "schedule", "b×m", "layers per stage", "recompute", "step ms", "samples/s",
                "MFU", "bubble", "worst rank / capacity", "× Megatron")


def _recompute_label(plan: Any) -> str:
    modes = plan.recompute or ("none",)
    if len(set(modes)) == 1:
        return modes[0]
    short = {"none": "-", "selective": "s", "full": "f"}
    return "".join(short[mode] for mode in modes)


def _layers_label(plan: Any) -> str:
    sizes = plan.layers_per_stage
    if plan.virtual_stages == 1:
        return ",".join(str(n) for n in sizes)
    # chunks grouped by rank: 3+2,4+1 means rank 0 holds chunks of 3 and 2 layers
    return ",".join("+".join(str(sizes[s]) for s in plan.stages_of(rank)) for rank in range(plan.pp))


def _three_figures(value: float) -> str:
    """``1608.04`` → ``"1610"``, ``0.98341`` → ``"0.983"``: three significant figures, no exponent."""
    return f"{float(f'{value:.3g}'):g}" if abs(value) < 1e15 else f"{value:.3g}"


def plan_row(label: str, plan: Any, ratio: float | None) -> list[str]:
    """One table row for ``plan`` (see :data:`PLAN_COLUMNS`)."""
    schedule = plan.schedule_label
    worst = plan.worst_rank
    memory = "—"
    if worst is not None:
        memory = format_bytes(plan.peak_memory[worst])
        if plan.memory_capacity:
            memory += f" / {format_bytes(plan.memory_capacity)}"
        if not plan.fits:
            memory += " (over)"
    return [
        label,
        f"{plan.pp}×{plan.dp}",
        schedule,
        f"{plan.micro_batch_size}×{plan.num_microbatches}",
        _layers_label(plan),
        _recompute_label(plan),
        # three significant figures: what the cost model can claim (docs/cost_model.md)
        "—" if plan.step_time is None else _three_figures(plan.step_time),
        "—" if plan.samples_per_second is None else _three_figures(plan.samples_per_second),
        "—" if plan.mfu is None else f"{plan.mfu:.1%}",
        "—" if plan.bubble_ratio is None else f"{plan.bubble_ratio:.1%}",
        memory,
        "—" if ratio is None else f"{ratio:.2f}×",
    ]


def plan_table(result: Any, *, title: str | None = None) -> Table:
    """Ranked plans, then the Megatron-LM default and the best plan changing one knob of it."""
    table = Table(title=title)
    for column in PLAN_COLUMNS:
        table.add_column(column, justify="left" if column in ("schedule", "layers per stage") else "right")
    for index, plan in enumerate(result.plans):
        table.add_row(*plan_row(str(index + 1), plan, result.ratio(plan)))
    if result.baseline is not None:
        table.add_section()
        table.add_row(*plan_row("Megatron default", result.baseline, 1.0))
        for knob, plan in result.one_knob.items():
            table.add_row(*plan_row(f"only {knob.replace('_', ' ')}", plan, result.ratio(plan)))
    return table
