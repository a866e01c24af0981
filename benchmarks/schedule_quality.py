"""How close the adaptive schedule comes to the zero-bubble paper and to the lower bound.

Part 1 replays the zero-bubble paper's 1.5B rows (Qi et al., "Zero Bubble Pipeline
Parallelism", ICLR 2024, appendix table of profiled F/B/W/comm times and bubble rates):
p = 8, h = 2304, a = 24, s = 1024; activation memory per microbatch M_B = 34h + 5as
and weight-gradient stash M_W = 32h (per token, the paper's Table 1); memory limit
k·p·M_B. It reports adaptive's span bubble (objective "span") against the paper's
ZB-1p (k = 1) and ZB-2p (k = 2), and its makespan (objective "makespan") against
``analytic.makespan_lower_bound``.

Part 2 runs unequal costs (lesson 16's dumbbell and its re-balanced split, P = 4 and
8, m = 2P and 4P, limits p and 2p microbatches per rank) and reports the gap to the
bound. Part 3 plays several steps of each objective's order with the optimizer step
waiting for every rank or overlapping. Part 4 times adaptive at P = 16, m = 64 and
P = 32, m = 128 (CPU seconds). Part 5 runs issue 23's seeded corpus (P = 8; F uniform in
[5, 40]; B in [0.8F, 1.2F]; W in [0.3F, 0.7F]; T_comm 0.5; m in {2P, 4P}; limit P·M_B and
2P·M_B) against the zero-bubble repository's heuristic, imported from the checkout given
by ``--zb-checkout`` or ``$ZB_CHECKOUT`` (never copied into pipeplan; the part is skipped
without it), and against torch 2.13's ZBVZeroBubble / DualPipeV / InterleavedZeroBubble
orders on their placements; it reports the gaps to ``analytic.memory_lower_bounds``.

    python benchmarks/schedule_quality.py            # print the tables
    python benchmarks/schedule_quality.py --write    # also record them in docs/schedules.md
    python benchmarks/schedule_quality.py --corpus-only --zb-checkout /tmp/zb --problems 80
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from pipeplan import CommModel, StageCosts, analytic, build_schedule, simulate
from pipeplan.partition import PartitionOptions, partition_layers
from pipeplan.schedules.adaptive import adaptive
from pipeplan.schedules.zb_v import zb_v_placement
from _markers import add_write_flag, measured_line, replace_between, run_command, signed
from schedule_corpus import corpus_tables

DOC = Path(__file__).resolve().parent.parent / "docs" / "schedules.md"
#: What tests/test_docs_tables.py checks of the block (the rest is measured, or needs the heuristic's checkout).
CHECKED = ("the paper and unequal-costs tables but their seconds (the objective table and torch's corpus rows "
           "too with `PIPEPLAN_DOCS_TABLES=all`)")

# The paper's 1.5B rows: m, F, B (input gradient), W, comm (ms); ZB-1p and ZB-2p bubble rates.
PAPER_ROWS = [
    (24, 18.522, 18.086, 9.337, 0.601, 0.1585, 0.0433),
    (32, 18.513, 18.086, 9.331, 0.626, 0.1242, 0.0039),
    (64, 18.546, 18.097, 9.321, 0.762, 0.0674, 0.0026),
]
HIDDEN, HEADS, SEQ, STAGES = 2304, 24, 1024, 8
M_B = 34 * HIDDEN + 5 * HEADS * SEQ  # activation bytes per token until the input gradient
M_W = 32 * HIDDEN  # bytes per token the weight gradient still needs


def paper_costs(forward: float, backward: float, weight: float) -> StageCosts:
    """Uniform per-stage costs of one paper row (``backward`` = B + W: the full backward)."""
    return StageCosts(
        forward=[forward] * STAGES, backward=[backward + weight] * STAGES, weight=[weight] * STAGES,
        activation_bytes=[M_B] * STAGES, weight_stash_bytes=[M_W] * STAGES,
    )


def paper_table() -> list[str]:
    lines = [
        "| m | k | paper span bubble | adaptive span bubble (objective span) | gap | "
        "makespan (objective makespan) | lower bound | gap to bound | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, forward, backward, weight, comm_latency, zb1, zb2 in PAPER_ROWS:
        costs = paper_costs(forward, backward, weight)
        comm = CommModel(latency=comm_latency)
        for k, paper in ((1, zb1), (2, zb2)):
            limit = k * STAGES * M_B
            started = time.process_time()
            by_span = adaptive(STAGES, m, costs=costs, comm=comm, memory_limit=limit, objective="span")
            by_makespan = adaptive(STAGES, m, costs=costs, comm=comm, memory_limit=limit, objective="makespan")
            seconds = (time.process_time() - started) / 2
            span_rate = simulate(by_span, costs, comm).span_bubble_rate
            makespan = simulate(by_makespan, costs, comm).makespan
            bound = analytic.makespan_lower_bound(by_makespan, costs, comm)
            lines.append(
                f"| {m} | {k} | {paper:.4f} | {span_rate:.4f} | {signed(span_rate - paper, '+.4f')} | "
                f"{makespan:.2f} | {bound:.2f} | {signed(makespan / bound - 1, '.2%')} | {seconds:.2f} |"
            )
    return lines


def lesson_stage_forwards(num_stages: int, *, rebalanced: bool) -> list[float]:
    """Lesson 16's model split into ``num_stages``: 32 layers of 2 ms forward, a 16 ms vision
    encoder on the first stage and an 8 ms action head on the last (seed 000, lesson 16);
    an even split of the layers (the dumbbell) or the exact re-balanced one."""
    layers, layer_ms, first, last = 32, 2.0, 16.0, 8.0
    if rebalanced:
        counts = partition_layers([layer_ms] * layers, num_stages, PartitionOptions(first_extra=first, last_extra=last)).layers_per_stage
    else:
        counts = (layers // num_stages,) * num_stages
    forward = [count * layer_ms for count in counts]
    forward[0] += first
    forward[-1] += last
    return forward


def unequal_table() -> list[str]:
    lines = [
        "| costs | P | m | limit (microbatches per rank) | 1f1b | adaptive makespan | lower bound | gap |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in ("dumbbell", "re-balanced"):
        for p in (4, 8):
            forward = lesson_stage_forwards(p, rebalanced=name == "re-balanced")
            costs = StageCosts(forward=forward)  # backward 2F, W half of it; 1 byte per microbatch
            comm = CommModel(latency=0.5)
            for m in (2 * p, 4 * p):
                baseline = simulate(build_schedule("1f1b", num_stages=p, num_microbatches=m), costs, comm).makespan
                for k in (1, 2):
                    schedule = adaptive(p, m, costs=costs, comm=comm, memory_limit=k * p, objective="makespan")
                    makespan = simulate(schedule, costs, comm).makespan
                    bound = analytic.makespan_lower_bound(schedule, costs, comm)
                    lines.append(
                        f"| {name} | {p} | {m} | {k * p} | {baseline:.1f} | {makespan:.1f} | {bound:.1f} | "
                        f"{signed(makespan / bound - 1, '.2%')} |"
                    )
    return lines


def objective_table(iterations: int = 6, problems: int = 40) -> list[str]:
    """Steady-state step time of each objective's order under each optimizer mode.

    Paper rows first, then seeded random unequal costs (P in {4, 8}, m in {P, 2P, 3P},
    limit P or 2P microbatches per rank): how often each objective's order is faster.
    """
    lines = [
        f"| problem | order by | barrier step ({iterations} steps) | overlap step ({iterations} steps) |",
        "|---|---|---|---|",
    ]
    for m, forward, backward, weight, comm_latency, _, _ in PAPER_ROWS[:2]:
        costs = paper_costs(forward, backward, weight)
        comm = CommModel(latency=comm_latency)
        for k in (1, 2):
            for objective in ("makespan", "span"):
                schedule = adaptive(STAGES, m, costs=costs, comm=comm, memory_limit=k * STAGES * M_B,
                                    objective=objective)
                steps = [
                    simulate(schedule, costs, comm, iterations=iterations, optimizer=mode).steady_step_time
                    for mode in ("barrier", "overlap")
                ]
                lines.append(f"| paper m = {m}, k = {k} | {objective} | {steps[0]:.2f} | {steps[1]:.2f} |")
    rng = random.Random(1)
    better = {mode: {"makespan": 0, "span": 0, "tie": 0} for mode in ("barrier", "overlap")}
    for _ in range(problems):
        ranks = rng.choice([4, 8])
        m = rng.choice([ranks, 2 * ranks, 3 * ranks])
        forward = [rng.uniform(0.5, 3.0) for _ in range(ranks)]
        costs = StageCosts(forward, [2 * f for f in forward], [0.7 * f for f in forward])
        comm = CommModel(latency=0.1)
        limit = rng.choice([ranks, 2 * ranks])
        steps = {}
        for objective in ("makespan", "span"):
            schedule = adaptive(ranks, m, costs=costs, comm=comm, memory_limit=limit, objective=objective)
            steps[objective] = {
                mode: simulate(schedule, costs, comm, iterations=iterations, optimizer=mode).steady_step_time
                for mode in ("barrier", "overlap")
            }
        for mode in better:
            a, b = steps["makespan"][mode], steps["span"][mode]
            better[mode]["tie" if abs(a - b) <= 1e-9 * max(a, b) else ("makespan" if a < b else "span")] += 1
    for mode, counts in better.items():
        lines.append(
            f"| {problems} random unequal problems, {mode} | faster order | makespan: {counts['makespan']}, "
            f"span: {counts['span']}, same: {counts['tie']} | |"
        )
    return lines


def speed_table() -> list[str]:
    """CPU seconds of adaptive (issue 23's targets: under 1 s at P = 32, m = 128; under 3 s on the V of 64 chunks)."""
    lines = ["| placement | P | m | actions | CPU seconds (objective makespan) | CPU seconds (objective span) |",
             "|---|---|---|---|---|---|"]
    for p, m, layout in ((16, 64, "one per rank"), (32, 128, "one per rank"), (32, 128, "V (2 chunks per rank)")):
        stages = 2 * p if layout.startswith("V") else p
        placement = list(zb_v_placement(p)) if stages > p else list(range(p))
        share = p / stages  # a chunk carries its share of the rank's work
        costs = StageCosts(forward=[share] * stages, backward=[2.0 * share] * stages, weight=[0.9 * share] * stages,
                           activation_bytes=[share] * stages)
        comm = CommModel(latency=0.05)
        times = []
        for objective in ("makespan", "span"):
            started = time.process_time()
            adaptive(stages, m, costs=costs, comm=comm, memory_limit=2.0 * p, objective=objective,
                     placement=placement)
            times.append(time.process_time() - started)
        lines.append(f"| {layout} | {p} | {m} | {3 * stages * m} | {times[0]:.2f} | {times[1]:.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser, DOC)
    parser.add_argument("--zb-checkout", default=None, help="zero-bubble repository checkout (or $ZB_CHECKOUT)")
    parser.add_argument("--problems", type=int, default=80, help="corpus size (part 5)")
    parser.add_argument("--torch-problems", type=int, default=80, help="corpus problems run against torch's orders")
    parser.add_argument("--corpus-only", action="store_true", help="print part 5 only (no --write)")
    args = parser.parse_args()
    corpus_lines = corpus_tables(args.zb_checkout, args.problems, args.torch_problems)
    if args.corpus_only:
        print("\n".join(corpus_lines))
        return
    sections = [
        "Zero-bubble paper, 1.5B rows (p = 8; memory limit k·p·M_B):", "", *paper_table(), "",
        "Unequal costs (communication 0.5 ms per message; gap to `analytic.makespan_lower_bound`):", "",
        *unequal_table(), "",
        "Which objective to pick: steady-state step time over several steps, the optimizer step "
        "waiting for every rank (barrier) or each rank going on when its own part is done (overlap):", "",
        *objective_table(), "",
        "Speed (uniform costs, limit 2p microbatches per rank):", "", *speed_table(), "",
        *corpus_lines, "",
        measured_line(run_command(), checked=CHECKED),
    ]
    text = "\n".join(sections)
    print(text)
    if args.write:
        replace_between(DOC, "schedule-quality", text)


if __name__ == "__main__":
    main()
