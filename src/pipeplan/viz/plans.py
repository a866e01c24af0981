"""The planner's ranked table: each plan, the baselines a user would run and the one-knob changes.

    from pipeplan.viz.plans import plan_table
    console.print(plan_table(result))        # result from pipeplan.planner.search
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from .tables import format_bytes

__all__ = ["plan_table", "plan_row", "recompute_legend", "PLAN_COLUMNS"]

PLAN_COLUMNS = ("#", "tp×pp×dp", "dp mode", "schedule", "b×m", "layers per stage", "recompute", "step ms",
                "samples/s", "MFU", "bubble", "worst GPU / capacity", "× best baseline")

_SHORT = {"none": "-", "selective": "s", "full": "f"}


def recompute_legend(plan: Any) -> str:
    """What the recompute column's letters mean for ``plan``'s model (empty without modules)."""
    units = _units(plan)
    if not units:
        return ""
    return (f"recompute per module ({' / '.join(units)}): - none, s selective, f full; * differs between stages "
            "(per stage in --json)")


def _units(plan: Any) -> list[str]:
    """The modules whose recompute the plan sets, in model order."""
    return list(plan.recompute_by_module)


def _recompute_label(plan: Any) -> str:
    modes = plan.recompute or ("none",)
    by_module = plan.recompute_by_module
    if by_module:
        mixed = "*" if len(set(modes)) > 1 else ""
        return "/".join(_SHORT[by_module[name]] for name in _units(plan)) + mixed
    if len(set(modes)) == 1:
        return modes[0]
    return "".join(_SHORT[mode] for mode in modes)


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
        f"{plan.tp}×{plan.pp}×{plan.dp}",
        plan.dp_mode if plan.dp > 1 else "—",
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


_BASELINE_LABELS = {"reference-fsdp": "its repository (reference)", "megatron-recommended": "Megatron recommended"}


def plan_table(result: Any, *, title: str | None = None) -> Table:
    """Ranked plans, then the baselines, then the best plan changing one knob of the Megatron baseline."""
    table = Table(title=title)
    for column in PLAN_COLUMNS:
        table.add_column(column, justify="left" if column in ("schedule", "layers per stage", "dp mode") else "right")
    for index, plan in enumerate(result.plans):
        table.add_row(*plan_row(str(index + 1), plan, result.ratio_to_best_baseline(plan)))
    baselines = [b for b in getattr(result, "baselines", ()) if b.plan is not None]
    if baselines:
        table.add_section()
        for baseline in baselines:
            table.add_row(*plan_row(_BASELINE_LABELS.get(baseline.name, baseline.name), baseline.plan,
                                    result.ratio_to_best_baseline(baseline.plan) if baseline.fits else None))
    if result.one_knob:
        table.add_section()
        for knob, plan in result.one_knob.items():
            table.add_row(*plan_row(f"Megatron, only {knob.replace('_', ' ')}", plan,
                                    result.ratio_to_best_baseline(plan)))
    return table
