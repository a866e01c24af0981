"""Benchmark: the lesson's claim, measured — re-balancing a dumbbell from its profile, 2 and 4 processes.

    python benchmarks/rebalance.py --write              # 3 runs, recorded in docs/fidelity.md
    python benchmarks/rebalance.py --runs 1 --nproc 2   # print only

For each process count ``P``: profile the dumbbell model once (``pipeplan
profile --model dumbbell``), then run the same schedule on the even split (by
layer count) and on pipeplan's split balanced on the profile
(``--partition auto``: :func:`pipeplan.partition.partition_layers`), alternating
the two in every run. Reported: each split's predicted makespan (from the
profile alone, :func:`pipeplan.predict.predict`) and measured median makespan,
the speedup of the balanced split (target ≥ 1.3×) and both prediction errors
(target within 10%). The machine's load average is printed beside the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from pipeplan.partition import even_split, partition_layers
from pipeplan.predict import predict
from pipeplan.runtime.loop import RunConfig, profile_model, run_pipeline
from pipeplan.schedules import build_schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pipeline_args import measure_and_record, pipeline_parser, run_line  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "fidelity.md"
TARGET_SPEEDUP = 1.3
TARGET_ERROR = 0.10
MAX_SPLITS = 20_000  # splits the exhaustive ceiling predicts at most (84 for 10 layers on 4 stages)


def _one_config(nproc: int, args: argparse.Namespace) -> dict[str, Any]:
    profile = profile_model("dumbbell", layers=args.layers, batch_size=args.batch_size,
                            microbatches=args.microbatches, nproc=nproc, repeats=args.repeats, warmup=2,
                            backend=args.backend, max_spread=None)
    splits = {
        "even": list(even_split(profile.num_layers, nproc)),
        "balanced": list(partition_layers(profile, nproc).layers_per_stage),
    }
    schedule = build_schedule(args.schedule, num_stages=nproc, num_microbatches=args.microbatches)
    out: dict[str, Any] = {"nproc": nproc, "profile": profile, "splits": {},
                           "best_possible": _best_possible(profile, schedule)}
    for name, layers in splits.items():
        out["splits"][name] = {"layers": layers, "predicted": predict(profile, schedule, layers).makespan,
                               "measured": [], "loads": []}
    for run in range(args.runs):
        order = list(splits) if run % 2 == 0 else list(reversed(splits))
        for name in order:
            config = RunConfig(schedule=args.schedule, pp=nproc, microbatches=args.microbatches,
                               batch_size=args.batch_size, model="dumbbell", layers=args.layers,
                               partition=splits[name], steps=args.steps, warmup=args.warmup, profile=profile,
                               timeout=300.0)
            report = run_pipeline(config, backend=args.backend)
            row = out["splits"][name]
            row["measured"].append(report["makespan_ms"]["median"])
            row["loads"].append(os.getloadavg()[0])
            print(f"P={nproc} run {run + 1} {name:8s} {splits[name]} predicted {row['predicted']:.1f} "
                  f"measured {row['measured'][-1]:.1f} load {row['loads'][-1]:.2f}", flush=True)
    return out


def _best_possible(profile: Any, schedule: Any) -> tuple[list[int], float]:
    """The split the prediction rates fastest over *every* split (exhaustive) and its predicted makespan.

    The ceiling of what re-balancing can buy on this machine, as far as the
    profile (with its core sharing) predicts it; ``partition_layers`` balances
    for ranks with a core each, which this may beat where processes share cores.
    """
    stages = schedule.num_stages
    best: tuple[list[int], float] = ([], math.inf)
    if math.comb(profile.num_layers - 1, stages - 1) > MAX_SPLITS:
        return best  # too many to try; the summary says so
    for cuts in itertools.combinations(range(1, profile.num_layers), stages - 1):
        bounds = (0, *cuts, profile.num_layers)
        layers = [bounds[i + 1] - bounds[i] for i in range(stages)]
        makespan = predict(profile, schedule, layers).makespan
        if makespan < best[1]:
            best = (layers, makespan)
    return best


def _table(results: list[dict[str, Any]], args: argparse.Namespace, started: str) -> str:
    lines = [
        f"Model: `--model dumbbell --layers {args.layers}`, batch {args.batch_size} in {args.microbatches} "
        f"microbatches, schedule `{args.schedule}`; {args.warmup} warm-up + {args.steps} measured steps per run, "
        f"{args.runs} run(s) per split (the splits alternate). Times in ms; *measured*: median over runs of each "
        "run's median-step makespan (min–max across runs); *error*: predicted / measured − 1.",
        "",
        "| P | split | layers per stage | predicted | measured | runs min–max | error | load |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    summary = []
    for result in results:
        rows = result["splits"]
        for name, row in rows.items():
            measured = statistics.median(row["measured"])
            row["measured_median"] = measured
            row["error"] = row["predicted"] / measured - 1
            lines.append(f"| {result['nproc']} | {name} | {row['layers']} | {row['predicted']:.1f} | "
                         f"{measured:.1f} | {min(row['measured']):.1f}–{max(row['measured']):.1f} | "
                         f"{row['error']:+.1%} | {statistics.mean(row['loads']):.2f} |")
        speedup = rows["even"]["measured_median"] / rows["balanced"]["measured_median"]
        predicted_speedup = rows["even"]["predicted"] / rows["balanced"]["predicted"]
        calibration = result["profile"].calibration
        sharing = "" if calibration is None else (
            f"; core sharing measured ×{calibration.slowdown_for(result['nproc']):.2f} with {result['nproc']} busy")
        best_layers, best_makespan = result["best_possible"]
        ceiling = (f"the best of every split by the prediction, {best_layers}, would be "
                   f"{rows['even']['predicted'] / best_makespan:.2f}× the even split" if best_layers
                   else f"more than {MAX_SPLITS} splits, so the best of them was not predicted")
        summary.append(f"P={result['nproc']}: balanced is {speedup:.2f}× faster measured "
                       f"({predicted_speedup:.2f}× predicted; target ≥ {TARGET_SPEEDUP}×){sharing}; {ceiling}.  ")
    return "\n".join(lines + [""] + summary + ["", run_line("rebalance.py", args.argv, started, args.backend)])


def main(argv: list[str] | None = None) -> int:
    parser = pipeline_parser(__doc__, batch_size=64, microbatches=16, doc_path=DOC)
    parser.add_argument("--schedule", default="1f1b")
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    measure_and_record(args, _one_config, _table, "rebalance-table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
