"""``plan --mix FILE``: the plan of the searched space with the smallest expected step over batches drawn from a shape mix.

    $ pipeplan plan --preset pi0 --gpus 8 --global-batch 256 --mix examples/mix_cameras.csv

:func:`add_mix_argument` registers the flag; :func:`plan_mix` reads and checks the
mix before the search (one line, exit 2: a bad file, ``--spec`` or ``--profile``, a
field the preset lacks, a shape it refuses) and builds the workload of each shape
the way ``plan`` builds its own; :meth:`PlanMix.rank` searches the space again at the
mix's mean sample and times its plans on the mix by branch and bound, with plan 1 and the
baselines (:mod:`pipeplan.planner.mix_search`, :mod:`pipeplan.planner.mix_rank`);
:func:`show_mix` prints the table and the note on the best plan. ``--json`` adds the
ranking as ``mix``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from ..batches.mix import Mix, read_mix
from ..errors import InvalidInputError
from ..planner import Cluster, SearchOptions, SearchResult, Workload
from ..planner.mix_rank import MixRanking, MixRow
from ..planner.mix_search import JENSEN_SLACK, search_on_mix
from ..units import format_figures
from ..viz.plans import NO_PIPELINE
from ._mix_model import check_mix_model, mix_model_shape, mix_namespace
from ._spec_args import planned_shape

__all__ = ["add_mix_argument", "plan_mix", "PlanMix", "show_mix"]


def add_mix_argument(parser: Any) -> None:
    """Add ``--mix FILE``."""
    parser.add_argument("--mix", metavar="FILE", default=None,
                        help="with --preset or --spec: a shape mix (CSV or JSON: shape fields such as cameras, then count or "
                             "weight); finds the plan with the smallest expected step over global batches drawn from it, "
                             "balanced over ranks and microbatches (a search at the mix's mean sample, then branch and "
                             "bound; docs/uneven_batches.md)")


@dataclass(frozen=True)
class PlanMix:
    """The mix of ``--mix`` and the workload the search would use at each of its shapes."""

    mix: Mix
    workloads: tuple[Workload, ...]
    global_batch: int

    def rank(self, result: SearchResult, cluster: Cluster, options: SearchOptions) -> MixRanking:
        """The plan fastest on the mix (:func:`~pipeplan.planner.mix_search.search_on_mix`), beside ``result``'s plan 1.

        ``result``, ``cluster``, ``options``: the search at the planned shape and how it ran.
        """
        return search_on_mix(self.mix, self.workloads, cluster, self.global_batch, options, main=result).ranking


def plan_mix(args: argparse.Namespace, build: Callable[[argparse.Namespace], Workload]) -> PlanMix | None:
    """``--mix``'s mix and per-shape workloads (``build(args)`` as ``plan`` builds its own), or ``None`` without it.

    A mix row's fields replace the planned shape's (``--cameras`` etc., else the preset's
    defaults; a ``--spec`` file's own shape, :mod:`pipeplan.cli._mix_model`); the fields it
    leaves out keep them.

    Raises:
        InvalidInputError: ``--mix`` with ``--profile`` (measured at one shape); a mix file that
            :func:`~pipeplan.batches.mix.read_mix` refuses; a field the preset or the spec file
            does not have; a shape its builder refuses (the message names the file and row).
    """
    if getattr(args, "mix", None) is None:
        return None
    if not (args.preset or args.spec or args.profile):
        return None  # no model at all: plan's own check names the three ways to give one
    mix = read_mix(args.mix)
    check_mix_model(args, mix)
    workloads = []
    for row, shape in enumerate(mix.shapes, start=1):
        try:
            workloads.append(build(mix_namespace(args, shape)))
        except InvalidInputError as error:
            raise InvalidInputError(f"mix {mix.source} row {row} ({mix.label(row - 1)}): {error}") from None
    return PlanMix(mix, tuple(workloads), args.global_batch)


def _ms(value: float | None) -> str:
    return "—" if value is None else format_figures(value)


def _layout(row: MixRow) -> list[str]:
    plan = row.plan
    if plan is None:
        return ["—"] * 4
    return [f"{plan.tp}×{plan.pp}×{plan.dp}", plan.dp_mode if plan.dp > 1 else "—",
            plan.schedule if plan.pp > 1 else NO_PIPELINE,
            f"{plan.micro_batch_size}×{plan.num_microbatches}"]


def mix_table(ranking: MixRanking) -> Table:
    """The plans by expected step on the mix, then the baselines."""
    table = Table(title=f"on the mix {ranking.mix.source}: plans by the expected step over drawn batches (ms)")
    for name in ("mix #", "plan #", "tp×pp×dp", "dp mode", "schedule", "b×m", "planned", "mean sample", "bound",
                 "expected", "p95", "random split", "random p95"):
        table.add_column(name, justify="left" if name in ("dp mode", "schedule") else "right")
    baselines = False
    for row in ranking.rows:
        if row.baseline and not baselines:
            table.add_section()
            baselines = True
        first = str(row.rank) if row.rank is not None else ("—" if not row.baseline else row.label)
        table.add_row(first, "" if row.planned_rank is None else str(row.planned_rank), *_layout(row),
                      _ms(row.planned_ms), _ms(row.mean_sample_ms), _ms(row.bound_ms), _ms(row.expected_ms),
                      _ms(row.p95_ms), _ms(row.random_ms), _ms(row.random_p95_ms))
    return table


def _shapes(mix: Mix) -> str:
    return ", ".join(f"{mix.label(index)} {weight:.0%}" for index, weight in enumerate(mix.weights))


def mix_lines(ranking: MixRanking, global_batch: int, planned_shape: str = "") -> list[str]:
    """The lines under the table: the mix, the best plan's change (or not), what is held fixed, the cost.

    ``planned_shape``: the shape the search planned at, in words (``"cameras=3"``).
    """
    draws = sorted({row.draws for row in ranking.rows if row.re_ranked})
    drawn = (f"{draws[-1]}" if len(draws) == 1 else f"{draws[0]}–{draws[-1]} (fewer for long schedules)") if draws else "0"
    lines = [f"mix: {_shapes(ranking.mix)}; {drawn} global batches of {global_batch} samples drawn (seed "
             f"{ranking.seed}), the same for every plan"]
    if ranking.listed:
        beyond = ("the search listed every plan of the space" if ranking.beyond_ms is None else
                  f"every plan beyond them steps {format_figures(ranking.beyond_ms / (1 - JENSEN_SLACK))} ms or more "
                  f"at the mean sample, taken as {format_figures(ranking.beyond_ms)} ms or more on the mix (a "
                  f"{JENSEN_SLACK:.0%} margin)")
        lines.append(f"searched at the mix's mean sample: {ranking.listed} plans listed"
                     f"{f' ({ranking.searches} searches, the list doubled)' if ranking.searches > 1 else ''}, "
                     f"{ranking.timed} timed on the drawn batches, {ranking.bounded} ruled out by their bound "
                     f"(timed in order of the bound until it reached the best expected step); {beyond}: "
                     + ("the best plan on the mix is the best of the listed plans; beyond them, within the measured margin"
                        if ranking.exact else
                        "not proven the best of the space (the list reached its longest)"))
    best = ranking.best
    first = next((row for row in ranking.plans if row.planned_rank == 1), None)
    if best is None:
        lines.append("best plan on the mix: none re-ranked")
    elif ranking.best_changed and first is not None and first.expected_ms is not None and best.expected_ms is not None:
        tie = " (a tie at 3 significant figures)" if ranking.best_ties else ""
        which = f"plan {best.planned_rank}" if best.planned_rank is not None else "a plan not shown above"
        lines.append(f"best plan changes on the mix: {which} ({' '.join(_layout(best))}) is expected "
                     f"{format_figures(best.expected_ms)} ms per step (p95 {_ms(best.p95_ms)}), plan 1 "
                     f"({' '.join(_layout(first))}) {format_figures(first.expected_ms)} ms (p95 {_ms(first.p95_ms)}): "
                     f"{first.expected_ms / best.expected_ms:.2f}× faster on the mix{tie}")
    else:
        lines.append(f"best plan on the mix: plan 1 still, expected {_ms(best.expected_ms)} ms per step "
                     f"(p95 {_ms(best.p95_ms)}; mean sample {_ms(best.mean_sample_ms)})")
    for row in ranking.rows:
        if row.note and not row.note.startswith("not timed"):  # the bounded rows say so in their bound column
            lines.append(f"{row.label}: {row.note}")
    at = f" ({planned_shape})" if planned_shape else ""
    lines.append(f"planned: the search's step at the planned shape{at}; mean sample: every sample at the mix's mean cost; "
                 "bound: a lower bound of the expected step that times no drawn batch (docs/uneven_batches.md); "
                 "expected and p95: mean and 95th percentile over the drawn batches, split over data-parallel "
                 "replicas and microbatches by pipeplan's balancing (only the most loaded replica's pipeline timed); "
                 "random split: replicas take the batch as drawn; messages between stages priced per microbatch from "
                 "its samples' bytes; exposed gradient reduction and the optimizer step held at the plan's own at "
                 "the mean sample (docs/uneven_batches.md); "
                 f"{ranking.cpu_seconds:.2f} CPU s")
    return lines


def show_mix(console: Any, ranking: MixRanking, args: argparse.Namespace) -> None:
    """Print :func:`mix_table` and :func:`mix_lines` (the planned shape from ``args``)."""
    shape = planned_shape(args) or mix_model_shape(args) or {}
    console.print(mix_table(ranking))
    for line in mix_lines(ranking, args.global_batch, ",".join(f"{key}={shape[key]}" for key in ranking.mix.fields
                                                                if key in shape)):
        console.print(line, markup=False, highlight=False)



# ------------------------------------------------- --export, --plot, --trace on the mix
def mix_pick(ranking: MixRanking) -> int | None:
    """0-based index in the search's plans of the plan ``--plot``/``--trace`` draw on the mix, or ``None``: plan 1's.

    The plan fastest on the mix when it is not plan 1 and does not tie with it at the
    shown figures (a tie keeps plan 1); ``None`` otherwise (nothing changes).
    """
    best = ranking.best
    if best is None or not ranking.best_changed or ranking.best_ties or best.planned_rank is None:
        return None
    return best.planned_rank - 1


def mix_outputs_note(ranking: MixRanking, args: argparse.Namespace) -> str | None:
    """The one line saying which plan ``--plot``/``--trace`` drew on the mix (``None``: neither given, or plan 1)."""
    flags = [flag for flag, given in (("--plot", getattr(args, "plot", None)), ("--trace", getattr(args, "trace", None)))
             if given]
    pick = mix_pick(ranking)
    if not flags or pick is None:
        return None
    return (f"{' and '.join(flags)}: plan {pick + 1}, the fastest on the mix {ranking.mix.source} "
            f"(plan 1 is the fastest at the planned shape)")


def mix_export_choice(ranking: MixRanking, result: SearchResult, target: str) -> Any:
    """``--export``'s :class:`~pipeplan.planner.engine_choice.EngineChoice` on the mix, or ``None``: the search's own.

    The first plan in the mix's order (:attr:`MixRanking.plans` by expected step) that the
    engine runs, when it is not plan 1 (nor ties with it on the mix); ``why`` says so, and
    the engine's refusal of plan 1 if it refuses it. ``None`` when that plan is plan 1 or
    the engine runs none of the plans re-ranked (the export is then what ``plan`` writes
    without ``--mix``).
    """
    from ..engines import by_target
    from ..planner.engine_choice import EngineChoice, plan_changes

    if mix_pick(ranking) is None:
        return None
    record = by_target(target)
    first = next(row for row in ranking.plans if row.planned_rank == 1)
    for row in ranking.plans:
        if not row.re_ranked or row.planned_rank is None:
            continue
        index = row.planned_rank - 1
        plan = result.plans[index]
        if record.refusal(plan):
            continue
        if index == 0:
            return None
        refused = record.refusal(result.best)
        why = (f"the fastest on the mix {ranking.mix.source} that {target} runs is plan {index + 1}: expected "
               f"{_ms(row.expected_ms)} ms per step (p95 {_ms(row.p95_ms)}), plan 1 {_ms(first.expected_ms)} ms"
               + (f"; {target} cannot run plan 1: {refused}" if refused else ""))
        return EngineChoice(target, plan, index, why, tuple(plan_changes(result.best, plan)))
    return None


def show_mix_choice(console: Any, choice: Any, ratio: float | None) -> None:
    """The plan an export on the mix is written for: why, its table row, what changed from plan 1."""
    from ..viz.plans import plan_layout, plan_row

    console.print(f"{choice.target}: {choice.why}", markup=False, highlight=False, soft_wrap=True)
    console.print(plan_layout([plan_row(choice.label, choice.plan, ratio)],
                              title=f"{choice.target} is written for plan {choice.index + 1} (on the mix)",
                              width=console.width))
    console.print("changed from plan 1: " + "; ".join(choice.changes), markup=False, highlight=False, soft_wrap=True)
