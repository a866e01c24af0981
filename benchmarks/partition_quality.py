"""Slowest stage ÷ optimum for pipeplan and common splitters, plus solve times.

    python benchmarks/partition_quality.py            # print the tables
    python benchmarks/partition_quality.py --write    # also record them in docs/partition.md

Instances (seeded): ``random`` (layer times uniform in [0.5, 2]), ``dumbbell``
(a heavy first and last layer: embedding 8×, logits 12× a block), and ``vla``
(a vision encoder that is one indivisible layer of 12 blocks' time, a projector,
LLM blocks, an action head; image preprocessing as a first-stage extra and the
action loss as a last-stage extra), for L from 8 to 200 layers and S from 2 to 16
stages. Every stage's time includes its extras.

Splitters compared:

* ``pipeplan``: :func:`pipeplan.partition_layers` (exact; its ratio must be 1.000).
* ``even``: Megatron's default, ``L // S`` layers per stage (the remainder first).
* ``params``: DeepSpeed's ``partition_method="parameters"``, i.e. stages balanced
  on parameter counts (``ds_utils.partition_balanced``, computed exactly here).
* ``torchgpipe``: ``torchgpipe.balance.balance_cost`` (the block-partition
  heuristic behind ``balance_by_time``) on the per-layer times, extras folded
  into the first/last layer as a per-layer profiler would measure them;
  skipped with a note when torchgpipe is not installed.

The optimum comes from an independent O(S·L²) dynamic program (numpy), not from
pipeplan's solver.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import add_write_flag, measured_line, replace_between, run_command  # noqa: E402

import pipeplan  # noqa: E402
from pipeplan.partition import even_split  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "partition.md"
#: What tests/test_docs_tables.py checks of the block (solve times and the speed table are measured).
CHECKED = "the first table but its solve ms"
SHAPES = ((8, 2), (8, 4), (32, 4), (32, 8), (64, 8), (64, 16), (200, 8), (200, 16))


def make_instance(kind: str, num_layers: int, rng: np.random.Generator):
    """``(times, params, first_extra, last_extra)`` of one instance."""
    if kind == "random":
        times = rng.uniform(0.5, 2.0, num_layers)
        params = rng.uniform(0.5, 2.0, num_layers)
        return times, params, 0.0, 0.0
    if kind == "dumbbell":
        times = rng.uniform(0.9, 1.1, num_layers)
        params = np.ones(num_layers)
        times[0], times[-1] = 8.0, 12.0
        params[0] = params[-1] = 6.0  # embedding and logits hold the vocabulary
        return times, params, 0.0, 0.0
    # vla: [vision encoder][projector][LLM blocks...][action head]
    blocks = num_layers - 3
    times = np.concatenate([[12.0], [0.3], rng.uniform(0.9, 1.1, blocks), [2.0]])
    params = np.concatenate([[3.0], [0.2], np.full(blocks, 1.0), [0.5]])
    return times, params, 4.0, 1.5


def stage_times(times, sizes, first_extra, last_extra) -> np.ndarray:
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    prefix = np.concatenate([[0.0], np.cumsum(times)])
    values = prefix[bounds[1:]] - prefix[bounds[:-1]]
    values[0] += first_extra
    values[-1] += last_extra
    return values


def reference_optimum(times, num_stages, first_extra, last_extra) -> float:
    """Min-max over contiguous non-empty stages by the textbook O(S·L²) DP."""
    prefix = np.concatenate([[0.0], np.cumsum(times)])
    num_layers = len(times)
    extra = np.zeros(num_stages)
    extra[0] += first_extra
    extra[-1] += last_extra
    best = np.full(num_layers + 1, np.inf)
    best[1:] = prefix[1:] + extra[0]
    for k in range(1, num_stages):
        new = np.full(num_layers + 1, np.inf)
        for j in range(k + 1, num_layers + 1):
            starts = np.arange(k, j)
            new[j] = np.min(np.maximum(best[starts], prefix[j] - prefix[starts] + extra[k]))
        best = new
    return float(best[num_layers])


def torchgpipe_split(times, num_stages, first_extra, last_extra):
    try:
        from torchgpipe.balance import balance_cost
    except Exception:  # noqa: BLE001 - torchgpipe absent or broken with this torch
        return None
    folded = np.array(times, dtype=float)
    folded[0] += first_extra
    folded[-1] += last_extra
    return balance_cost(folded.tolist(), num_stages)


def median_time(repeats: int, call) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def quality_rows(rng: np.random.Generator, repeats: int = 3) -> tuple[list[str], dict[str, list[float]]]:
    """One row per instance (ratios to the optimum; solve ms the median of ``repeats``) and the ratios by splitter."""
    rows = []
    worst: dict[str, list[float]] = {"pipeplan": [], "even": [], "params": [], "torchgpipe": []}
    for kind in ("random", "dumbbell", "vla"):
        for num_layers, num_stages in SHAPES:
            times, params, head, tail = make_instance(kind, num_layers, rng)
            optimum = reference_optimum(times, num_stages, head, tail)
            extras = pipeplan.PartitionOptions(first_extra=head, last_extra=tail)
            plan = pipeplan.partition_layers(times.tolist(), num_stages, extras)
            solve_ms = 1e3 * median_time(repeats, lambda: pipeplan.partition_layers(times.tolist(), num_stages, extras))
            ratios = {
                "pipeplan": plan.bottleneck / optimum,
                "even": stage_times(times, even_split(num_layers, num_stages), head, tail).max() / optimum,
                "params": stage_times(
                    times,
                    pipeplan.partition_layers(params.tolist(), num_stages,
                                              pipeplan.PartitionOptions(tie_break="none")).layers_per_stage,
                    head, tail,
                ).max() / optimum,
            }
            gpipe = torchgpipe_split(times, num_stages, head, tail)
            if gpipe is not None:
                ratios["torchgpipe"] = stage_times(times, gpipe, head, tail).max() / optimum
            for name, value in ratios.items():
                worst[name].append(value)
            tg = f"{ratios['torchgpipe']:.3f}" if "torchgpipe" in ratios else "n/a"
            rows.append(
                f"| {kind} | {num_layers} | {num_stages} | {ratios['pipeplan']:.3f} | {ratios['even']:.3f} | "
                f"{ratios['params']:.3f} | {tg} | {solve_ms:.1f} |"
            )
    return rows, worst


def speed_rows(rng: np.random.Generator, repeats: int) -> list[str]:
    rows = []
    for kind in ("random", "dumbbell", "vla", "uniform"):
        if kind == "uniform":  # every layer alike: many optimal partitions to break ties among
            times, head, tail = np.ones(10_000), 0.0, 0.0
        else:
            times, _, head, tail = make_instance(kind, 10_000, rng)
        for tie_break in ("lexicographic", "none"):
            options = pipeplan.PartitionOptions(first_extra=head, last_extra=tail, tie_break=tie_break)
            result = pipeplan.partition_layers(times.tolist(), 128, options)
            seconds = median_time(repeats, lambda: pipeplan.partition_layers(times.tolist(), 128, options))
            rows.append(f"| {kind} | 10,000 | 128 | {tie_break} (applied: {result.tie_break}) | {seconds:.3f} |")
    return rows


def quality_table(rows: list[str], worst: dict[str, list[float]]) -> list[str]:
    """The markdown lines of the quality table: a header, ``rows`` and the worst ratio of each splitter."""
    return [
        "| instance | L | S | pipeplan | even | params | torchgpipe | pipeplan solve ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "| **worst** | | | "
        + " | ".join(f"**{max(worst[name]):.3f}**" if worst[name] else "n/a"
                    for name in ("pipeplan", "even", "params", "torchgpipe"))
        + " | |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timing runs per case (median)")
    add_write_flag(parser, DOC)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows, worst = quality_rows(rng, args.repeats)
    have_torchgpipe = bool(worst["torchgpipe"])
    quality = quality_table(rows, worst)
    speed = ["| instance | L | S | tie-break | seconds (median) |", "|---|---:|---:|---|---:|",
             *speed_rows(rng, args.repeats)]
    note = "" if have_torchgpipe else "\ntorchgpipe is not installed here; its column is skipped.\n"
    header = "Ratios are slowest stage ÷ optimum (lower is better, 1.000 is optimal).\n"
    machine = (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
               f"numpy {np.__version__}")
    body = (header + "\n" + "\n".join(quality) + "\n" + note + "\n" + "\n".join(speed) + "\n\n"
            + measured_line(run_command(), machine=machine, checked=CHECKED) + "\n")
    print(body)
    if max(worst["pipeplan"]) > 1.0 + 1e-12:
        raise SystemExit("pipeplan missed the optimum on some instance")
    if args.write:
        replace_between(DOC, "partition-quality", body)


if __name__ == "__main__":
    main()
