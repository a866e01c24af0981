"""Every schedule on uniform and on lesson 16's dumbbell costs, simulated (a table for the docs).

    python benchmarks/schedule_table.py            # print the table
    python benchmarks/schedule_table.py --write    # also record it in docs/schedules.md

For P = 4 and 8 ranks and m = P, 2P, 4P microbatches, each schedule runs on:

* ``uniform``: forward 10 on every rank;
* ``dumbbell``: lesson 16's forward [30, 10, 10, 20] (P = 8: [30, 10 × 6, 20]);

with the backward twice the forward and, when a schedule splits it, W a third
of the backward (B = input gradient = two thirds). Costs are per rank: a schedule
with several chunks per rank (interleaved with v = 2, ZB-V) splits each rank's
forward, backward and activation bytes evenly over its two chunks, so every
rank carries the same work and the same bytes per microbatch as in 1F1B.
Activation bytes are 1 per rank per microbatch; the W stash is the whole
activation (the conservative default), so memory is counted until W.

Columns: makespan, the global bubble ratio, the zero-bubble paper's span
bubble rate, peak activation bytes per rank, and the gap of the makespan to
:func:`pipeplan.analytic.makespan_lower_bound`. ``adaptive`` is shown with one
stage per rank, without a memory limit and with 1F1B's first-rank peak (P) as
its limit, and on ZB-V's placement (``adaptive V``) with the same limit P.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import computed_line, print_or_write, signed  # noqa: E402

from pipeplan import StageCosts, analytic, build_schedule, simulate  # noqa: E402
from pipeplan.schedules.zb_v import zb_v_placement  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "schedules.md"
COMMAND = "python benchmarks/schedule_table.py --write"
RANKS = (4, 8)


def rank_forward(kind: str, ranks: int) -> list[float]:
    """Forward time of each rank's layers for one microbatch."""
    if kind == "uniform":
        return [10.0] * ranks
    return [30.0] + [10.0] * (ranks - 2) + [20.0]


def stage_costs(per_rank: list[float], placement: list[int]) -> StageCosts:
    """Split each rank's forward (and so backward, W, bytes) evenly over the stages it holds."""
    chunks = [placement.count(rank) for rank in range(len(per_rank))]
    forward = [per_rank[rank] / chunks[rank] for rank in placement]
    backward = [2.0 * f for f in forward]
    return StageCosts(
        forward,
        backward,
        [b / 3.0 for b in backward],
        activation_bytes=[1.0 / chunks[rank] for rank in placement],
    )


def runs(ranks: int, microbatches: int, per_rank: list[float]):
    """(label, schedule, costs, options) of every schedule on this shape."""
    one = list(range(ranks))
    looped = [s % ranks for s in range(2 * ranks)]
    vee = zb_v_placement(ranks)
    costs_one = stage_costs(per_rank, one)
    yield "gpipe", build_schedule("gpipe", num_stages=ranks, num_microbatches=microbatches), costs_one
    yield "1f1b", build_schedule("1f1b", num_stages=ranks, num_microbatches=microbatches), costs_one
    costs_looped = stage_costs(per_rank, looped)
    yield "interleaved v=2", build_schedule(
        "interleaved", num_stages=2 * ranks, num_microbatches=microbatches, virtual_stages=2
    ), costs_looped
    yield "zb-h1", build_schedule("zb-h1", num_stages=ranks, num_microbatches=microbatches), costs_one
    yield "zb-h2", build_schedule("zb-h2", num_stages=ranks, num_microbatches=microbatches), costs_one
    costs_vee = stage_costs(per_rank, vee)
    yield "zb-v", build_schedule("zb-v", num_stages=2 * ranks, num_microbatches=microbatches), costs_vee
    yield "adaptive", build_schedule(
        "adaptive", num_stages=ranks, num_microbatches=microbatches, costs=costs_one
    ), costs_one
    yield f"adaptive ≤ {ranks}", build_schedule(
        "adaptive", num_stages=ranks, num_microbatches=microbatches, costs=costs_one, memory_limit=ranks
    ), costs_one
    yield f"adaptive V ≤ {ranks}", build_schedule(
        "adaptive", num_stages=2 * ranks, num_microbatches=microbatches, costs=costs_vee,
        placement=vee, memory_limit=ranks,
    ), costs_vee


def table() -> str:
    """The markdown table (one row per cost set, P, m and schedule)."""
    lines = [
        "| costs | P | m | schedule | makespan | bubble ratio | span bubble rate | peak bytes per rank | gap to bound |",
        "|---|---:|---:|---|---:|---:|---:|---|---:|",
    ]
    for kind in ("uniform", "dumbbell"):
        for ranks in RANKS:
            per_rank = rank_forward(kind, ranks)
            for microbatches in (ranks, 2 * ranks, 4 * ranks):
                for label, schedule, costs in runs(ranks, microbatches, per_rank):
                    timeline = simulate(schedule, costs)
                    bound = analytic.makespan_lower_bound(schedule, costs)
                    peaks = "/".join(f"{p:g}" for p in timeline.peak_bytes)
                    lines.append(
                        f"| {kind} | {ranks} | {microbatches} | {label} | {timeline.makespan:.1f} | "
                        f"{timeline.bubble_ratio:.3f} | {timeline.span_bubble_rate:.3f} | {peaks} | "
                        f"{signed(100 * (timeline.makespan / bound - 1), '.1f')}% |"
                    )
    return "\n".join(lines)


def block() -> str:
    """What ``--write`` records between the ``schedule-table`` markers (tests/test_docs_tables.py checks it)."""
    note = (
        "Times in the costs' unit; peak bytes: 1 = one microbatch's activations of a rank's whole share "
        "of the model."
    )
    return f"{note}\n\n{table()}\n\n{computed_line(COMMAND)}"


def main(argv: list[str] | None = None) -> int:
    return print_or_write(DOC, "schedule-table", block, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
