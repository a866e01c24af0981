"""Benchmark: does the profile predict the runtime? Every schedule, 2 and 4 processes, several runs.

    python benchmarks/fidelity.py                       # 3 runs, writes docs/fidelity.md
    python benchmarks/fidelity.py --runs 1 --nproc 2 --schedules 1f1b,zb-h1 --no-write
    python benchmarks/fidelity.py --device cuda --write  # one GPU process per stage (gpu_check.sh)

Protocol, per process count ``P``:

1. **Profile once** (:func:`pipeplan.runtime.loop.profile_model`, what ``pipeplan
   profile`` does): the default model's layers on one microbatch with the
   threads each rank will have, then ``P`` processes calibrate the link
   (ping-pong) and core sharing.
2. For each run and each schedule: one ``pipeplan run`` equivalent
   (:func:`pipeplan.runtime.loop.run_pipeline`, warm-up steps then measured
   steps) with that profile: nothing is re-measured, the partition is balanced
   on the profile, and the prediction (:func:`pipeplan.predict.predict`) comes
   from the profile alone.
3. Reported per schedule: predicted makespan, the measured median makespan
   (median over runs of each run's median step; min–max across runs), the
   error and its sign, the per-action mean absolute error of durations and
   starts, and the error of a **calibrated** prediction (per-kind factors
   fitted on run 1's ``zb-h1``, :func:`pipeplan.predict.fit_kind_factors`),
   reported apart.
4. **Where the error comes from**, measured: per action kind the mean
   duration error (predicted − measured, % of measured), the first step's
   makespan over the median one, and the makespan error of predictions that
   each leave one ingredient out: core sharing, messages, or the split's real
   cost (the pre-profile convention, in which ``B`` + ``W`` of a split cost no
   more than the full backward).

The machine's load average is printed beside every run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from pipeplan.calibration import Calibration
from pipeplan.compare import compare
from pipeplan.layers import LayerProfile
from pipeplan.predict import fit_kind_factors, predict, scale_profile
from pipeplan.runtime.loop import RunConfig, profile_model, run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import replace_between  # noqa: E402
from _pipeline_args import pipeline_parser, run_header, started_now  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "fidelity.md"
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "adaptive")
CALIBRATION_SCHEDULE = "zb-h1"
TARGET = 0.10


def _variant(profile: LayerProfile, *, sharing: bool = True, messages: bool = True,
             real_split: bool = True) -> LayerProfile:
    """The profile with one ingredient of the prediction left out (for the breakdown)."""
    calibration = profile.calibration or Calibration()
    calibration = Calibration(
        latency=calibration.latency if messages else 0.0,
        bandwidth=calibration.bandwidth if messages else float("inf"),
        slowdown=calibration.slowdown if sharing else (1.0,),
        backend=calibration.backend,
    )
    halves = profile.backward_input
    weight = profile.weight
    if not real_split and halves is not None:
        # The old convention: a split's halves add up to the full backward.
        totals = [i + w for i, w in zip(halves, weight)]
        halves = tuple(b * i / t if t > 0 else b for b, i, t in zip(profile.backward, halves, totals))
        weight = tuple(b * w / t if t > 0 else 0.0 for b, w, t in zip(profile.backward, profile.weight, totals))
    return profile.replaced(weight=weight, backward_input=halves, calibration=calibration)


def _kind_errors(predicted: Any, measured: Any) -> dict[str, float]:
    """Per kind: mean (predicted − measured) duration as a fraction of the mean measured duration."""
    comparison = compare(predicted, measured)
    out = {}
    for kind, stats in comparison.by_kind().items():
        out[str(kind)] = stats["mean_duration_error"] / stats["mean_measured_duration"]
    return out


def _one_config(nproc: int, args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    profile = profile_model(None, layers=args.layers, batch_size=args.batch_size, microbatches=args.microbatches,
                            nproc=nproc, repeats=args.repeats, warmup=2, backend=args.backend,
                            max_spread=None)
    print(f"P={nproc}: profiled (load {load_before:.2f}), calibration {profile.calibration}", flush=True)
    rows: dict[str, dict[str, Any]] = {name: {"measured": [], "mae": [], "start_mae": [], "first": [],
                                              "kinds": [], "loads": []} for name in args.schedules}
    factors: dict[str, float] | None = None
    for run in range(args.runs):
        for name in args.schedules:
            config = RunConfig(schedule=name, pp=nproc, microbatches=args.microbatches, batch_size=args.batch_size,
                               layers=args.layers, steps=args.steps, warmup=args.warmup, profile=profile,
                               timeout=300.0)
            report = run_pipeline(config, backend=args.backend)
            row = rows[name]
            predicted, measured = report["predicted_timeline"], report["timeline"]
            comparison = compare(predicted, measured)
            row.update(predicted=predicted.makespan, layers=report["config"]["layers_per_stage"],
                       timeline_pair=(predicted, measured), schedule=measured.schedule,
                       grad_ok=report["gradient_check"]["ok"])
            row["measured"].append(report["makespan_ms"]["median"])
            row["mae"].append(comparison.mean_abs_duration_error)
            row["start_mae"].append(comparison.mean_abs_start_error)
            row["first"].append(report["makespan_ms"]["first_step"] / report["makespan_ms"]["median"])
            row["kinds"].append(_kind_errors(predicted, measured))
            row["loads"].append(os.getloadavg()[0])
            if run == 0 and name == CALIBRATION_SCHEDULE:
                factors = fit_kind_factors(predicted, measured)
            error = predicted.makespan / report["makespan_ms"]["median"] - 1
            print(f"  run {run + 1} {name:12s} predicted {predicted.makespan:8.2f} measured "
                  f"{report['makespan_ms']['median']:8.2f} ({error:+.1%}) load {row['loads'][-1]:.2f}", flush=True)
    for name, row in rows.items():
        measured = statistics.median(row["measured"])
        row["measured_median"] = measured
        row["error"] = row["predicted"] / measured - 1
        schedule, layers = row["schedule"], row["layers"]
        for label, options in (("no_sharing", {"sharing": False}), ("no_messages", {"messages": False}),
                               ("ideal_split", {"real_split": False})):
            row[label] = predict(_variant(profile, **options), schedule, layers).makespan / measured - 1
        if factors is not None:
            calibrated = predict(scale_profile(profile, factors), schedule, layers).makespan
            row["calibrated_error"] = calibrated / measured - 1
    return {"nproc": nproc, "profile": profile, "rows": rows, "factors": factors, "load_before": load_before}


def _profile_rows(nproc: int, profile: LayerProfile) -> list[str]:
    """One row per kind of layer (the name after the index), blocks averaged."""
    kinds: dict[str, list[int]] = {}
    for index, name in enumerate(profile.names):
        kinds.setdefault(name.split(":", 1)[-1], []).append(index)
    halves = profile.backward_input or tuple(b - w for b, w in zip(profile.backward, profile.weight))
    rows = []
    for kind, indices in kinds.items():
        def mean(values: tuple[float, ...]) -> float:
            return statistics.mean(values[i] for i in indices)

        ratio = (mean(halves) + mean(profile.weight)) / mean(profile.backward)
        label = kind + (f" (×{len(indices)})" if len(indices) > 1 else "")
        rows.append(f"| {nproc} | {label} | {mean(profile.forward):.2f} | {mean(profile.backward):.2f} | "
                    f"{mean(halves):.2f} | {mean(profile.weight):.2f} | {ratio:.2f} |")
    return rows


def _table(results: list[dict[str, Any]], args: argparse.Namespace, started: str) -> str:
    lines = [
        *run_header("fidelity.py", args.argv, started, args.backend),
        f"Model: default VLA (`--layers {args.layers}`), batch {args.batch_size} in {args.microbatches} "
        f"microbatches; {args.warmup} warm-up + {args.steps} measured steps per run, {args.runs} run(s) per "
        "schedule; one profile per process count. Times in ms. *measured*: median over runs of each run's "
        "median-step makespan (min–max across runs). *error*: predicted / measured − 1 from the profile alone; "
        f"*calibrated*: per-kind factors fitted on run 1's `{CALIBRATION_SCHEDULE}`. *MAE*: mean |predicted − "
        "measured| action duration (start) in the median step. *load*: 1-minute load average during the runs.",
        "",
        "| P | schedule | partition | predicted | measured | runs min–max | error | sign | calibrated | "
        "MAE dur | MAE start | load |",
        "|---:|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for result in results:
        for name, row in result["rows"].items():
            sign = "over" if row["error"] > 0 else "under"
            calibrated = f"{row['calibrated_error']:+.1%}" if "calibrated_error" in row else "n/a"
            lines.append(
                f"| {result['nproc']} | {name} | {row['layers']} | {row['predicted']:.1f} | "
                f"{row['measured_median']:.1f} | {min(row['measured']):.1f}–{max(row['measured']):.1f} | "
                f"{row['error']:+.1%} | {sign} | {calibrated} | {statistics.mean(row['mae']):.2f} | "
                f"{statistics.mean(row['start_mae']):.2f} | {statistics.mean(row['loads']):.2f} |"
            )
    within = [abs(row["error"]) <= TARGET for result in results for row in result["rows"].values()]
    lines += ["", f"Within ±{TARGET:.0%} from the profile alone: {sum(within)} of {len(within)}.", "",
              "Where the error comes from (same runs). Per kind: mean duration error, % of the measured mean "
              "(F forward, B full backward, I and W the halves of a split backward; – where a schedule has none). "
              "*first step*: first (warm-up) step's makespan / median step's. Then the makespan error of "
              "predictions that each leave one ingredient out.",
              "",
              "| P | schedule | F | B | I | W | first step | without core sharing | without messages | "
              "with the ideal split |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for result in results:
        for name, row in result["rows"].items():
            cells = []
            for kind in ("F", "B", "I", "W"):
                values = [run[kind] for run in row["kinds"] if kind in run]
                cells.append(f"{statistics.mean(values):+.0%}" if values else "–")
            split = any("I" in run for run in row["kinds"])
            lines.append(
                f"| {result['nproc']} | {name} | {' | '.join(cells)} | {statistics.mean(row['first']):.2f}× | "
                f"{row['no_sharing']:+.1%} | {row['no_messages']:+.1%} | "
                f"{(format(row['ideal_split'], '+.1%') if split else '–')} |"
            )
    lines += ["", "The profiles (ms per microbatch, median over the profile's runs; blocks: their mean). "
              "*I + W / B*: what a real split backward costs over the full backward.", "",
              "| P | layer | F | B (full) | I | W | I + W / B |", "|---:|---|---:|---:|---:|---:|---:|"]
    for result in results:
        lines += _profile_rows(result["nproc"], result["profile"])
    lines.append("")
    for result in results:
        calibration = result["profile"].calibration
        if calibration is None:
            continue
        lines.append(
            f"P={result['nproc']} calibration: latency {calibration.latency:.3f} ms, bandwidth "
            f"{calibration.bandwidth:.3g} B/ms, core sharing slowdown "
            + ", ".join(f"{k + 1} busy ×{f:.2f}" for k, f in enumerate(calibration.slowdown))
            + f"; threads per process {result['profile'].measurement.get('threads_per_process')}; "
            f"load {result['load_before']:.2f} when profiled; calibrated factors "
            + (", ".join(f"{k} ×{v:.2f}" for k, v in (result["factors"] or {}).items()) or "none") + ".  "
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = pipeline_parser(__doc__, batch_size=64, microbatches=8, doc_path=DOC)
    parser.add_argument("--schedules", default=",".join(SCHEDULES))
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    args.schedules = [s for s in args.schedules.split(",") if s]
    started = started_now()
    results = [_one_config(int(p), args) for p in args.nproc.split(",")]
    table = _table(results, args, started)
    print(table)
    if args.write:
        replace_between(args.doc, "fidelity-table", table)
        print(f"wrote {args.doc}")
    failed = [row for result in results for row in result["rows"].values() if not row["grad_ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
