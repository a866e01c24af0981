"""How many actions per second the simulator handles (issue: large case under 1 s).

    python benchmarks/simulate_speed.py            # print the table
    python benchmarks/simulate_speed.py --write    # also record it in docs/simulator.md

Times ``pipeplan.simulate`` on 1F1B with unequal stage costs, validation included
(what a user calls), and separately the schedule build. Best of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import replace_between  # noqa: E402

import pipeplan  # noqa: E402

CASES = ((8, 64), (64, 1024))


def best_of(repeats: int, call) -> float:
    """Smallest wall time of ``repeats`` calls, seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="record the table in docs/simulator.md")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for stages, microbatches in CASES:
        forward = rng.uniform(5, 30, stages)
        costs = pipeplan.StageCosts(forward, 2 * forward)
        schedule = pipeplan.build_schedule("1f1b", num_stages=stages, num_microbatches=microbatches)
        build = best_of(args.repeats, lambda: pipeplan.build_schedule(
            "1f1b", num_stages=stages, num_microbatches=microbatches))
        sim = best_of(args.repeats, lambda: pipeplan.simulate(schedule, costs))
        rendezvous = best_of(args.repeats, lambda: pipeplan.simulate(
            schedule, costs, pipeplan.CommModel(latency=0.1, send_mode="rendezvous")))
        actions = schedule.num_actions
        rows.append(f"| {stages} | {microbatches} | {actions:,} | {build:.3f} | {sim:.3f} | "
                    f"{actions / sim:,.0f} | {rendezvous:.3f} |")
    header = (
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()} with `python benchmarks/simulate_speed.py --write` "
        f"(best of {args.repeats}).\n\n"
        "| P | m | actions | build s | simulate s (eager, validated) | actions/s | simulate s (rendezvous) |\n"
        "|---|---|---|---|---|---|---|"
    )
    table = header + "\n" + "\n".join(rows)
    print(table)
    if args.write:
        replace_between(Path(__file__).resolve().parent.parent / "docs" / "simulator.md", "simulate-speed", table)


if __name__ == "__main__":
    main()
