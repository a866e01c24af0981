"""Seconds to partition 10,000 layers into 128 stages, per adversarial case and tie-break.

    python benchmarks/partition_speed.py            # print the table
    python benchmarks/partition_speed.py --write    # also record it in docs/partition.md

Cases: ``random`` (uniform in [0.5, 2]), ``dominant-first`` (the
issue's ``1 + (i % 7)·0.3`` with layer 0 at 500: a vision encoder given as one
block), ``dominant-first-last`` (also the last layer at 500), ``dominant-middle``
(layer 5,000 at 500), ``uniform`` (all layers 1), ``zero-cost`` (every other
layer costs 0), ``zero-prefix`` (the first half costs 0) and ``all-zero``. Each
is solved with every tie-break; the time is process CPU time (the machine is
shared), the minimum over ``--repeats`` runs. The bottleneck of every tie-break
is checked to be the same.
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
from _markers import add_write_flag, measured_line, replace_between, run_command  # noqa: E402

from pipeplan.partition import PartitionOptions, partition_layers  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "partition.md"
NUM_LAYERS, NUM_STAGES = 10_000, 128
TIE_BREAKS = ("lexicographic", "variance", "none")
TARGET_SECONDS = 1.0


def cases() -> dict[str, list[float]]:
    """The adversarial layer-time lists (F + B + W per layer)."""
    cyclic = [1.0 + (i % 7) * 0.3 for i in range(NUM_LAYERS)]
    first = list(cyclic)
    first[0] = 500.0
    both = list(first)
    both[-1] = 500.0
    middle = list(cyclic)
    middle[NUM_LAYERS // 2] = 500.0
    return {
        "random": np.random.default_rng(0).uniform(0.5, 2.0, NUM_LAYERS).tolist(),
        "dominant-first": first,
        "dominant-first-last": both,
        "dominant-middle": middle,
        "uniform": [1.0] * NUM_LAYERS,
        "zero-cost": [float(i % 2) for i in range(NUM_LAYERS)],
        "zero-prefix": [0.0] * (NUM_LAYERS // 2) + [1.0] * (NUM_LAYERS - NUM_LAYERS // 2),
        "all-zero": [0.0] * NUM_LAYERS,
    }


def measure(costs: list[float], tie_break: str, repeats: int) -> tuple[float, float]:
    """(min CPU seconds over ``repeats``, bottleneck)."""
    best = float("inf")
    bottleneck = 0.0
    for _ in range(repeats):
        started = time.process_time()
        result = partition_layers(costs, NUM_STAGES, PartitionOptions(tie_break=tie_break))  # type: ignore[arg-type]
        best = min(best, time.process_time() - started)
        bottleneck = result.bottleneck
    return best, bottleneck


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser, DOC)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = []
    worst = 0.0
    for name, costs in cases().items():
        seconds = {}
        bottlenecks = set()
        for tie_break in TIE_BREAKS:
            seconds[tie_break], bottleneck = measure(costs, tie_break, args.repeats)
            bottlenecks.add(bottleneck)
        if len(bottlenecks) != 1:
            raise SystemExit(f"{name}: tie-breaks disagree on the bottleneck: {sorted(bottlenecks)}")
        worst = max(worst, *seconds.values())
        rows.append(f"| {name} | " + " | ".join(f"{seconds[t]:.3f}" for t in TIE_BREAKS) + " |")
        print(rows[-1], flush=True)
    machine = (f"{platform.machine()}, {os.cpu_count()} cores (shared with other jobs), "
               f"Python {platform.python_version()}, numpy {np.__version__}")
    header = (
        f"L = {NUM_LAYERS:,}, S = {NUM_STAGES}, CPU seconds, minimum of {args.repeats} runs "
        f"(target < {TARGET_SECONDS:g} s). Worst: {worst:.3f} s.\n\n"
        "| case | " + " | ".join(TIE_BREAKS) + " |\n|---|" + "---:|" * len(TIE_BREAKS)
    )
    table = header + "\n" + "\n".join(rows) + "\n\n" + measured_line(run_command(), machine=machine)
    print(table)
    if args.write:
        replace_between(DOC, "partition-speed", table)


if __name__ == "__main__":
    main()
