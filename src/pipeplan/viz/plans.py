"""The planner's ranked table: each plan, the baselines a user would run and the one-knob changes.

    from pipeplan.viz.plans import plan_table, plan_legend, full_partitions
    console.print(plan_table(result, ties=[None, 0]))   # result from pipeplan.planner.search
    for line in plan_legend(result, capacity="80 GiB") + full_partitions(result, width=120): print(line)

The table keeps every cell short: a partition longer than
:data:`PARTITION_CELL` characters is cut at a rank and ends in ``…``, and
:func:`full_partitions` prints those in full under it, wrapped between ranks.
:func:`plan_legend` explains the notation the table shows, and only that.
Memory is in GiB (:func:`pipeplan.units.format_gib`), or for a table whose every plan needs under
1 GiB (a small model) in MiB or KiB (:func:`pipeplan.units.format_memory_column`); the capacity is stated once
in the legend, not on every row. A plan without a pipeline (pp = 1) shows schedule ``—``.

Narrow terminals: given ``width`` (the console's columns), :func:`plan_table` returns the one
table when it fits, else the same rows split into two, three or four tables of fewer columns
(:data:`NARROW_LAYOUTS`), each led by the row label, so no value is cut or wrapped
(:func:`split_note` says so under it)::

    console.print(plan_table(result, ties=ties, width=console.width))
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.cells import cell_len
from rich.table import Table

from ..units import FIGURES, format_figures, format_memory_column

__all__ = ["plan_table", "plan_row", "plan_legend", "full_partitions", "recompute_legend", "show_choice",
           "plan_layout", "split_note", "PLAN_COLUMNS", "PARTITION_CELL", "NARROW_LAYOUTS", "NO_PIPELINE"]

PLAN_COLUMNS = ("#", "tp×pp×dp", "dp mode", "schedule", "b×m", "layers per stage", "recompute", "step ms",
                "samples/s", "MFU", "bubble", "worst GPU", "× best baseline")

#: The schedule cell of a plan without a pipeline (pp = 1): no schedule runs (``--json`` keeps the name).
NO_PIPELINE = "—"

#: Column groups tried in order when the one table is wider than the terminal: each group is one
#: table (the row label ``#`` leads every one); the first layout whose tables all fit is used.
NARROW_LAYOUTS: tuple[tuple[tuple[str, ...], ...], ...] = (
    (("tp×pp×dp", "dp mode", "schedule", "b×m", "layers per stage", "recompute"),
     ("step ms", "samples/s", "MFU", "bubble", "worst GPU", "× best baseline")),
    (("tp×pp×dp", "dp mode", "schedule", "b×m"),
     ("layers per stage", "recompute"),
     ("step ms", "samples/s", "MFU", "bubble", "worst GPU", "× best baseline")),
    (("tp×pp×dp", "dp mode", "schedule", "b×m"),
     ("layers per stage", "recompute"),
     ("step ms", "samples/s", "MFU"),
     ("bubble", "worst GPU", "× best baseline")),
)

_LEFT = ("schedule", "layers per stage", "dp mode")

#: Longest "layers per stage" cell, characters (longer ones are cut at a rank; :func:`full_partitions`).
PARTITION_CELL = 28

_SHORT = {"none": "-", "selective": "s", "full": "f", "op": "o"}


def _short(mode: str) -> str:
    """A mode's letter: ``-``, ``s``, ``f``, ``o`` (torchtitan's per-op), ``eN`` (``every:N``), ``bN`` / ``uN``
    (Megatron-LM's ``block:N`` / ``uniform:N``)."""
    head, _, count = mode.partition(":")
    return _SHORT.get(mode) or head[:1] + count


def recompute_legend(plan: Any) -> str:
    """What the recompute column's letters mean for ``plan``'s model (empty without modules)."""
    units = _units(plan)
    if not units:
        return ""
    used = set(plan.recompute_by_module.values())
    extra = (", o op" if "op" in used else "") + "".join(
        f", {head[0]}N {head}:N" for head in ("every", "block", "uniform") if any(m.startswith(head + ":") for m in used))
    return (f"recompute per module ({' / '.join(units)}): - none, s selective, f full{extra}; * differs between "
            "stages (per stage in --json)")


def _units(plan: Any) -> list[str]:
    """The modules whose recompute the plan sets, in model order."""
    return list(plan.recompute_by_module)


def _recompute_label(plan: Any) -> str:
    modes = plan.recompute or ("none",)
    by_module = plan.recompute_by_module
    if by_module:
        mixed = "*" if len(set(modes)) > 1 else ""
        return "/".join(_short(by_module[name]) for name in _units(plan)) + mixed
    if len(set(modes)) == 1:
        return modes[0]
    return "".join(_short(mode) for mode in modes)


def _rank_layers(plan: Any) -> list[str]:
    """Per rank, its layers: ``"8"``, or its chunks' layers joined by ``+`` (``"3+2"``: chunks of 3 and 2)."""
    sizes = plan.layers_per_stage
    if plan.virtual_stages == 1:
        return [str(n) for n in sizes]
    return ["+".join(str(sizes[s]) for s in plan.stages_of(rank)) for rank in range(plan.pp)]


def _layers_label(plan: Any) -> str:
    """The partition cell: every rank's layers, cut at a rank with ``…`` past :data:`PARTITION_CELL`."""
    parts = _rank_layers(plan)
    text = ",".join(parts)
    if len(text) <= PARTITION_CELL:
        return text
    kept: list[str] = []
    for part in parts:
        if len(",".join([*kept, part])) + 2 > PARTITION_CELL:
            break
        kept.append(part)
    return ",".join(kept) + ",…"


def _worst(plan: Any) -> float | None:
    """The fullest GPU's peak of ``plan``, bytes (``None``: not computed)."""
    return None if plan.worst_rank is None else float(plan.peak_memory[plan.worst_rank])


def _column_unit(plans: Sequence[Any]) -> list[float]:
    """A worst-GPU figure that sets the column's unit: the largest of ``plans``' (0 for none)."""
    return [max([value for value in map(_worst, plans) if value is not None], default=0.0)]


def plan_row(label: str, plan: Any, ratio: float | None, *, tie: int | None = None,
             column: Sequence[float] = ()) -> list[str]:
    """One table row for ``plan`` (see :data:`PLAN_COLUMNS`); ``tie``: the 0-based plan its step time ties with.

    ``column``: the other worst-GPU figures of its table (bytes), so the column has one unit
    (:func:`pipeplan.units.format_memory_column`).
    """
    schedule = plan.schedule_label
    worst = _worst(plan)
    memory = "—"
    if worst is not None:
        memory = format_memory_column([worst, *column])[0]
        if not plan.fits:
            memory += " (over)"
    step = "—" if plan.step_time is None else format_figures(plan.step_time)
    if tie is not None:
        step += f" = #{tie + 1}"
    return [
        label,
        f"{plan.tp}×{plan.pp}×{plan.dp}",
        plan.dp_mode if plan.dp > 1 else "—",
        schedule if plan.pp > 1 else NO_PIPELINE,
        f"{plan.micro_batch_size}×{plan.num_microbatches}",
        _layers_label(plan),
        _recompute_label(plan),
        # three significant figures: what the cost model can claim (docs/cost_model.md)
        step,
        "—" if plan.samples_per_second is None else format_figures(plan.samples_per_second),
        "—" if plan.mfu is None else f"{plan.mfu:.1%}",
        "—" if plan.bubble_ratio is None else f"{plan.bubble_ratio:.1%}",
        memory,
        "—" if ratio is None else f"{ratio:.2f}×",
    ]


def show_choice(console: Any, choice: Any, ratio: float | None) -> None:
    """The plan an export is written for (:class:`~pipeplan.planner.engine_choice.EngineChoice`).

    Plan 1: ``deepspeed (plan 1)``. Another: the engine's refusal of plan 1, the plan it
    runs as a full table row (``ratio``: its step time against the best baseline's), and
    ``changed from plan 1:`` knob by knob with the predicted step.
    """
    if choice.index == 0:
        console.print(f"[bold]{choice.target}[/bold] (plan 1)")
        return
    console.print(f"{choice.target} cannot run plan 1: {choice.why}", markup=False, highlight=False, soft_wrap=True)
    where = (f"plan {choice.index + 1} of the table" if choice.index is not None else
             "the best plan of a search over only what it runs; in no row above")
    console.print(plan_layout([plan_row(choice.label, choice.plan, ratio)], title=f"{choice.target} runs instead ({where})",
                              width=console.width))
    console.print("changed from plan 1: " + "; ".join(choice.changes), markup=False, highlight=False, soft_wrap=True)


def _rows(result: Any) -> list[tuple[str, Any, bool]]:
    """Every row of the table after the ranked plans: (label, plan, whether it fits), baselines then one-knob."""
    rows = [(getattr(b, "label", b.name), b.plan, bool(b.fits))
            for b in getattr(result, "baselines", ()) if b.plan is not None]
    return rows + [(f"Megatron, only {knob.replace('_', ' ')}", plan, True) for knob, plan in result.one_knob.items()]


def plan_table(result: Any, *, title: str | None = None, ties: Sequence[int | None] | None = None,
               width: int | None = None) -> Table | Group:
    """Ranked plans, then the baselines, then the best plan changing one knob of the Megatron baseline.

    ``ties[i]``: the earlier plan plan ``i``'s step time ties with (0-based), marked ``= #N``.
    ``width``: the terminal's columns; where the one table is wider, the rows split over
    the tables of :data:`NARROW_LAYOUTS` (:func:`plan_layout`). ``None``: always one table.
    """
    extra = _rows(result)
    column = _column_unit([*result.plans, *(plan for _label, plan, _fits in extra)])
    rows = [plan_row(str(index + 1), plan, result.ratio_to_best_baseline(plan),
                     tie=None if ties is None else ties[index], column=column) for index, plan in enumerate(result.plans)]
    sections = [len(rows)]
    baselines = len([b for b in getattr(result, "baselines", ()) if b.plan is not None])
    for position, (label, plan, fits) in enumerate(extra):
        if position == baselines and position:
            sections.append(len(rows))
        rows.append(plan_row(label, plan, result.ratio_to_best_baseline(plan) if fits else None, column=column))
    return plan_layout(rows, title=title, width=width, sections=sections)


def _widths(rows: Sequence[Sequence[str]], index: int) -> tuple[int, int]:
    """Column ``index``'s (least, natural) content width: least keeps every value on one line (a label
    and a header break between words only); natural puts every cell and the header on one line."""
    column = PLAN_COLUMNS[index]
    cells = [row[index] for row in rows]
    words = [word for cell in cells for word in cell.split()] if index == 0 else cells
    least = max([*map(cell_len, words), *(cell_len(word) for word in column.split())], default=1)
    natural = max([*map(cell_len, cells), cell_len(column)])
    return least, natural


def _overhead(columns: int) -> int:
    """Characters a rich table's box and padding take around ``columns`` columns (``│ x │ y │``)."""
    return 3 * columns + 1


def _layout_width(rows: Sequence[Sequence[str]], indices: Sequence[int]) -> tuple[list[int], list[int]]:
    least, natural = zip(*(_widths(rows, index) for index in indices))
    return list(least), list(natural)


def _table(rows: Sequence[Sequence[str]], indices: Sequence[int], *, title: str | None,
           sections: Sequence[int], width: int | None) -> Table:
    """One rich table of the columns ``indices`` (the label first) of ``rows``.

    ``width``: the terminal's columns; where the natural widths do not fit, every column gets a fixed
    width from its least (no value wraps) upward, the label's first (fewer lines per row).
    """
    table = Table(title=title)
    fixed: list[int | None] = [None] * len(indices)
    if width is not None:
        least, natural = _layout_width(rows, indices)
        if sum(natural) + _overhead(len(indices)) > width:
            spare = width - sum(least) - _overhead(len(indices))
            fixed = list(least)
            for position in range(len(indices)):
                grow = max(0, min(spare, natural[position] - least[position]))
                fixed[position] = least[position] + grow
                spare -= grow
    for position, index in enumerate(indices):
        column = PLAN_COLUMNS[index]
        table.add_column(column, justify="left" if column in _LEFT else "right", overflow="fold",
                         width=fixed[position])
    for position, row in enumerate(rows):
        table.add_row(*(row[index] for index in indices), end_section=position + 1 in sections and position + 1 < len(rows))
    return table


def _fits(rows: Sequence[Sequence[str]], indices: Sequence[int], width: int) -> bool:
    """Whether the columns ``indices`` of ``rows`` fit ``width`` with no value wrapped or cut."""
    least, _natural = _layout_width(rows, indices)
    return sum(least) + _overhead(len(indices)) <= width


def plan_layout(rows: Sequence[Sequence[str]], *, title: str | None = None, width: int | None = None,
                sections: Sequence[int] = ()) -> Table | Group:
    """Rows of :func:`plan_row` as one table, or split by :data:`NARROW_LAYOUTS` to fit ``width`` columns.

    ``sections``: row counts after which a rule is drawn. The layout chosen is the first
    whose tables all fit ``width`` without wrapping a value; none fitting, the last (values
    then fold onto a second line, never cut).
    """
    everything = list(range(len(PLAN_COLUMNS)))
    if width is None or _fits(rows, everything, width):
        return _table(rows, everything, title=title, sections=sections, width=width)
    groups: list[list[int]] = []
    for layout in NARROW_LAYOUTS:
        groups = [[0, *(PLAN_COLUMNS.index(column) for column in group)] for group in layout]
        if all(_fits(rows, group, width) for group in groups):
            break
    return Group(*(_table(rows, group, title=title if part == 0 else None, sections=sections, width=width)
                   for part, group in enumerate(groups)))


def split_note(table: Table | Group) -> str | None:
    """The line under a split table saying so (``None`` for one table)."""
    if isinstance(table, Table):
        return None
    return (f"the table is split in {len(table.renderables)} for this terminal's width, each part one row per plan "
            "under the same # label; a wider terminal (COLUMNS) shows it as one")


def _shown(result: Any) -> list[tuple[str, Any]]:
    """Every plan the table shows, with its row's label."""
    return [(f"#{index + 1}", plan) for index, plan in enumerate(result.plans)] + [
        (label, plan) for label, plan, _fits in _rows(result)]


def plan_legend(result: Any, *, capacity: str | None = None, ties: Sequence[int | None] | None = None) -> list[str]:
    """What the table's notation means, one line each, for what ``result``'s table shows only.

    ``capacity``: the GPU's memory as :func:`pipeplan.units.format_capacity` writes it.
    """
    plans = [plan for _label, plan in _shown(result)]
    lines = ["tp×pp×dp: tensor × pipeline × data-parallel GPUs; b×m: micro-batch size × microbatches per step "
             "(a pipeline's; global batch = b·m·dp)"]
    if any(plan.pp == 1 for plan in plans):
        lines.append(f"schedule {NO_PIPELINE}: no pipeline (pp = 1), every GPU runs the whole model")
    chunked = sorted({plan.virtual_stages for plan in plans if plan.virtual_stages > 1})
    partition = "layers per stage: the layers each rank holds, rank 0 first"
    if chunked:
        partition += ("; v=N: N chunks (virtual stages) per rank, and 3+1+4 is one rank's chunks of 3, 1 and 4 "
                      "layers in model order")
    if any(_layers_label(plan).endswith("…") for plan in plans):
        partition += "; … cut here, in full below"
    lines.append(partition)
    recompute = recompute_legend(result.plans[0]) if result.plans else ""
    if recompute:
        lines.append(recompute)
    elif any(not plan.recompute_by_module and plan.uniform_recompute is None for plan in plans):
        lines.append("recompute per stage: - none, s selective, f full")
    if ties is not None and any(tie is not None for tie in ties):
        lines.append(f"= #N: ties with plan N at the cost model's resolution ({FIGURES} significant figures: less "
                     "than one unit of the last figure apart)")
    worst = "worst GPU: the fullest GPU's peak, weights + gradients + optimizer state + activations"
    if capacity:
        worst += f"; each GPU {capacity}"
    if any(not plan.fits for plan in plans):
        worst += "; (over): does not fit"
    lines.append(worst)
    lines += [f"note: {note}" for note in getattr(result, "notes", ())]
    return lines


def full_partitions(result: Any, *, width: int = 120) -> list[str]:
    """The partitions the table cut, in full: one entry per plan, wrapped between ranks, never inside one."""
    lines: list[str] = []
    for label, plan in _shown(result):
        if not _layers_label(plan).endswith("…"):
            continue
        head = f"{label} ({plan.pp} ranks): "
        lines += textwrap.wrap(", ".join(_rank_layers(plan)), width=max(width, len(head) + 20),
                               initial_indent=head, subsequent_indent=" " * 4, break_long_words=False,
                               break_on_hyphens=False)
    return lines
