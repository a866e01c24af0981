"""Benchmark: does the profile predict the runtime? Every schedule, 2 and 4 processes, several runs.

    python benchmarks/fidelity.py --write               # 3 runs, recorded in docs/fidelity.md
    python benchmarks/fidelity.py --runs 1 --nproc 2 --schedules 1f1b,zb-h1    # print only
    python benchmarks/fidelity.py --backend nccl --doc docs/fidelity_gpu.md --write   # one GPU per process

Protocol, per process count ``P`` and per run (each run is the whole workflow once):

1. **Profile once** (:func:`pipeplan.runtime.loop.profile_model`, what ``pipeplan
   profile`` does): the default model's layers on one microbatch with the
   threads each rank will have, then ``P`` processes calibrate the link
   (ping-pong) and core sharing; then the layers again with ``statistic="min"``
   (each time's fastest run) for the *fastest* column, and the speed probe (the
   same work alone in this process) for the *drift* column.
2. For each schedule (``zb-h1`` first, the others rotating from run to run),
   between two speed probes: one ``pipeplan run --profile`` equivalent
   (:func:`pipeplan.runtime.loop.run_pipeline`, warm-up steps then measured
   steps) with that profile: nothing is re-measured, the partition is balanced
   on the profile, and the prediction (:func:`pipeplan.predict.predict`) comes
   from the profile alone.
3. Reported per schedule: predicted makespan, the measured median makespan
   (of each run's median step; min–max across runs), the error (median over
   runs, with its min and max) and its sign, the per-action mean absolute error
   of durations and starts, and the error of a **calibrated** prediction
   (per-kind factors fitted on the same run's ``zb-h1`` step,
   :func:`pipeplan.predict.fit_kind_factors`), reported apart; the error of
   each schedule's predicted ratio to the same run's ``1f1b`` (*vs 1f1b*), the
   speed probe's drift, and the fastest step against the ``min`` profile.
4. **Where the error comes from**, measured: per action kind the mean
   duration error (predicted − measured, % of measured), the first step's
   makespan over the median one, the idle time before actions that wait for no
   message or a message already produced (*ready gaps*), and the makespan error of predictions that
   each leave one ingredient out: core sharing, messages, or the split's real
   cost (the pre-profile convention, in which ``I`` + ``W`` of a split cost no
   more than the full backward).

The machine's load average is printed beside every run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from pipeplan.calibration import Calibration
from pipeplan.units import format_bandwidth
from pipeplan.predict.compare import compare
from pipeplan.layers import LayerProfile
from pipeplan.predict import fit_kind_factors, predict, scale_profile
from pipeplan.runtime.loop import RunConfig, model_step, profile_model, run_pipeline, threads_per_process

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pipeline_args import measure_and_record, pipeline_parser, run_line  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "fidelity.md"
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "adaptive")
CALIBRATION_SCHEDULE = "zb-h1"
REFERENCE_SCHEDULE = "1f1b"
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


class _SpeedProbe:
    """The machine's speed now: one microbatch's forward and backward of the whole model, alone, in this process.

    Timed (median of ``repeats``) right after each profile and before and after
    every run, with the threads a rank has. ``drift`` is the run's mean of its two
    probes over the probe at profile time: how much faster (< 1) or slower (> 1)
    the machine computed the same work than when it was profiled. It is a
    diagnostic of the machine, not an input of the prediction.
    """

    def __init__(self, args: argparse.Namespace, nproc: int) -> None:
        self.work = model_step(RunConfig(layers=args.layers, batch_size=args.batch_size,
                                         microbatches=args.microbatches))
        self.threads = threads_per_process(nproc)
        self.samples: list[float] = []

    def __call__(self, repeats: int = 7) -> float:
        previous = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            times = []
            for run in range(repeats + 1):
                began = time.perf_counter()
                self.work()
                times.append((time.perf_counter() - began) * 1e3)
            self.samples.append(statistics.median(times[1:]))
            return self.samples[-1]
        finally:
            torch.set_num_threads(previous)


def _ready_gaps(timeline: Any) -> tuple[float, float]:
    """Mean per rank (ms) of the time an action waited although it could have started.

    An action could start once its rank's previous action ended and every
    message it consumes had been *produced* (the producer's end on its own rank;
    the clocks of a measured timeline are aligned). The time from then to its
    start is the runtime's own bookkeeping between actions, the message's time
    on the wire and in the receiver's wake-up, and any wait for a core; the
    prediction charges only the wire time. Returns ``(before actions that wait
    for no message, before actions fed by a message)``.
    """
    producers: dict[Any, list[Any]] = {}
    for message in timeline.schedule.messages():
        producers.setdefault(message.consumer, []).append(message.producer)
    local = remote = 0.0
    for rank in range(timeline.num_ranks):
        previous = None
        for record in timeline.records(rank):
            if previous is not None:
                fed = producers.get(record.action, [])
                ready = max([previous] + [timeline.end_of(p) for p in fed])
                if fed:
                    remote += max(0.0, record.start - ready)
                else:
                    local += max(0.0, record.start - ready)
            previous = record.end
    return local / timeline.num_ranks, remote / timeline.num_ranks


def _one_config(nproc: int, args: argparse.Namespace) -> dict[str, Any]:
    probe = _SpeedProbe(args, nproc)
    rows: dict[str, dict[str, Any]] = {
        name: {key: [] for key in ("predicted", "measured", "error", "calibrated_error", "drift", "fast_error",
                                   "local_gaps", "fed_gaps", "no_sharing", "no_messages", "ideal_split", "mae", "start_mae",
                                   "first", "kinds", "loads", "layers", "grad_ok")}
        for name in args.schedules
    }
    profiles = []
    factors: list[dict[str, float]] = []
    for run in range(args.runs):
        load_before = os.getloadavg()[0]
        profile = profile_model(None, layers=args.layers, batch_size=args.batch_size, microbatches=args.microbatches,
                                nproc=nproc, repeats=args.repeats, warmup=2, backend=args.backend, max_spread=None)
        at_profile = probe()
        # The same layers' fastest runs: compared with the fastest step, a check of the model that
        # the machine's slow moments (which only ever add time) cannot move much.
        fastest = profile_model(None, layers=args.layers, batch_size=args.batch_size,
                                microbatches=args.microbatches, nproc=nproc, repeats=args.repeats, warmup=2,
                                backend=args.backend, max_spread=None, calibrate=False, statistic="min")
        fastest = fastest.replaced(calibration=profile.calibration)
        profiles.append((profile, load_before))
        print(f"P={nproc} run {run + 1}: profiled (load {load_before:.2f}), probe {at_profile:.2f} ms, "
              f"{profile.calibration}", flush=True)
        fitted: dict[str, float] | None = None
        # The calibration run goes first, so its factors can predict every other schedule of this run;
        # the others rotate from run to run, so no schedule always runs longest after its profile.
        others = [name for name in args.schedules if name != CALIBRATION_SCHEDULE]
        shift = run % len(others) if others else 0
        order = [n for n in args.schedules if n == CALIBRATION_SCHEDULE] + others[shift:] + others[:shift]
        for name in order:
            before = probe()
            config = RunConfig(schedule=name, pp=nproc, microbatches=args.microbatches, batch_size=args.batch_size,
                               layers=args.layers, steps=args.steps, warmup=args.warmup, profile=profile,
                               timeout=300.0)
            report = run_pipeline(config, backend=args.backend)
            drift = (before + probe()) / 2 / at_profile
            row = rows[name]
            predicted, measured = report["predicted_timeline"], report["timeline"]
            comparison = compare(predicted, measured)
            median = report["makespan_ms"]["median"]
            layers = report["config"]["layers_per_stage"]
            row["predicted"].append(predicted.makespan)
            row["measured"].append(median)
            row["error"].append(predicted.makespan / median - 1)
            row["drift"].append(drift)
            local_gap, fed_gap = _ready_gaps(measured)
            row["local_gaps"].append(local_gap)
            row["fed_gaps"].append(fed_gap)
            row["fast_error"].append(predict(fastest, measured.schedule, layers).makespan
                                     / min(report["makespan_ms"]["all"]) - 1)
            row["layers"].append(tuple(layers))
            row["grad_ok"].append(report["gradient_check"]["ok"])
            row["mae"].append(comparison.mean_abs_duration_error)
            row["start_mae"].append(comparison.mean_abs_start_error)
            row["first"].append(report["makespan_ms"]["first_step"] / median)
            row["kinds"].append(_kind_errors(predicted, measured))
            row["loads"].append(os.getloadavg()[0])
            for label, options in (("no_sharing", {"sharing": False}), ("no_messages", {"messages": False}),
                                   ("ideal_split", {"real_split": False})):
                row[label].append(predict(_variant(profile, **options), measured.schedule, layers).makespan
                                  / median - 1)
            if name == CALIBRATION_SCHEDULE:
                fitted = fit_kind_factors(predicted, measured)
                factors.append(fitted)
            if fitted is not None:
                calibrated = predict(scale_profile(profile, fitted), measured.schedule, layers).makespan
                row["calibrated_error"].append(calibrated / median - 1)
            print(f"  run {run + 1} {name:12s} predicted {predicted.makespan:8.2f} measured {median:8.2f} "
                  f"({row['error'][-1]:+.1%}) drift ×{drift:.2f} load {row['loads'][-1]:.2f}", flush=True)
    return {"nproc": nproc, "profiles": profiles, "rows": rows, "factors": factors, "probes": probe.samples}


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


def _relative_errors(rows: dict[str, dict[str, Any]], name: str) -> list[float]:
    """Per run: (predicted ÷ the reference's predicted) ÷ (measured ÷ the reference's measured) − 1.

    The reference schedule ran seconds apart on the same profile, so the
    machine's speed of that minute cancels out of the ratio: what is left is
    the model's error in how much faster or slower one schedule is than another.
    """
    reference = rows.get(REFERENCE_SCHEDULE)
    if reference is None:
        return []
    row = rows[name]
    return [(p / rp) / (m / rm) - 1 for p, m, rp, rm in
            zip(row["predicted"], row["measured"], reference["predicted"], reference["measured"])]


def _relative_cell(rows: dict[str, dict[str, Any]], name: str) -> str:
    """The *vs 1f1b* cell: ``ref`` on the reference's own row, ``n/a`` without one."""
    if name == REFERENCE_SCHEDULE:
        return "ref"
    relative = _relative_errors(rows, name)
    return _spread(relative) if relative else "n/a"


def _spread(values: list[float], fmt: str = "+.1%") -> str:
    """``median (min … max)`` of per-run values."""
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)} … {format(max(values), fmt)})"


def _table(results: list[dict[str, Any]], args: argparse.Namespace, started: str) -> str:
    lines = [
        f"Model: default VLA (`--layers {args.layers}`), batch {args.batch_size} in {args.microbatches} "
        f"microbatches; {args.runs} run(s) per process count, each a fresh `pipeplan profile` followed by every "
        f"schedule ({args.warmup} warm-up + {args.steps} measured steps each) with that profile. Times in ms, "
        "medians over the runs. *measured*: a run's median-step makespan (min–max across runs). *error*: "
        "predicted / measured − 1 from the profile alone, median over runs (min … max); *calibrated*: the "
        f"same with per-kind factors fitted on the run's own `{CALIBRATION_SCHEDULE}` step. *drift*: the "
        "machine's speed probe (one microbatch's forward and backward of the whole model, alone) before and "
        "after the run over the same probe right after the profile, median over runs (min … max): how much "
        "slower (> 1) the machine was than when it was profiled (a diagnostic of the machine; the prediction "
        "does not use it). *vs 1f1b*: the error of the predicted ratio to the same run's `1f1b` (each "
        "schedule's predicted ÷ 1f1b's predicted against measured ÷ measured), median over runs (min … max): "
        "the machine's speed of that minute cancels out of it. *fastest*: the same prediction from the "
        "layers' fastest runs (a second profile, "
        "`--statistic min`, same calibration) against the run's fastest step, median over runs (min … max): "
        "the model checked where the machine's slow moments, which only ever add time, weigh least. *MAE*: mean "
        "|predicted − measured| action duration (start) in the median step. *load*: 1-minute load average "
        "after each run.",
        "",
        "| P | schedule | partition | predicted | measured | runs min–max | error | sign | calibrated | "
        "vs 1f1b | drift | fastest | MAE dur | MAE start | load |",
        "|---:|---|---|---:|---:|---:|---|---|---|---|---|---|---:|---:|---:|",
    ]
    for result in results:
        for name, row in result["rows"].items():
            error = statistics.median(row["error"])
            sign = "over" if error > 0 else "under"
            calibrated = _spread(row["calibrated_error"]) if row["calibrated_error"] else "n/a"
            partitions = " / ".join(str(list(p)) for p in dict.fromkeys(row["layers"]))
            lines.append(
                f"| {result['nproc']} | {name} | {partitions} | {statistics.median(row['predicted']):.1f} | "
                f"{statistics.median(row['measured']):.1f} | {min(row['measured']):.1f}–{max(row['measured']):.1f} | "
                f"{_spread(row['error'])} | {sign} | {calibrated} | "
                f"{_relative_cell(result['rows'], name)} | "
                f"{_spread(row['drift'], '.2f')} | "
                f"{_spread(row['fast_error'])} | {statistics.mean(row['mae']):.2f} | "
                f"{statistics.mean(row['start_mae']):.2f} | {statistics.mean(row['loads']):.2f} |"
            )
    medians = [abs(statistics.median(row["error"])) for result in results for row in result["rows"].values()]
    every = [abs(e) for result in results for row in result["rows"].values() for e in row["error"]]
    fast = [abs(statistics.median(row["fast_error"])) for result in results for row in result["rows"].values()]
    relative_medians = [abs(statistics.median(r)) for result in results for name in result["rows"]
                        if name != REFERENCE_SCHEDULE and (r := _relative_errors(result["rows"], name))]
    swings = [d for result in results for row in result["rows"].values() for d in row["drift"]]
    lines += ["", f"Within ±{TARGET:.0%} from the profile alone: {sum(m <= TARGET for m in medians)} of "
              f"{len(medians)} medians, {sum(e <= TARGET for e in every)} of {len(every)} single runs; "
              "relative to the same run's "
              f"{REFERENCE_SCHEDULE}: {sum(m <= TARGET for m in relative_medians)} of {len(relative_medians)} medians; "
              f"fastest step against the fastest profile: {sum(m <= TARGET for m in fast)} "
              f"of {len(fast)} medians. The speed "
              f"probe moved ×{min(swings):.2f} … ×{max(swings):.2f} between a profile and a run; over the whole "
              "benchmark the same work alone took " + "; ".join(
                  f"{min(r['probes']):.1f} … {max(r['probes']):.1f} ms (median {statistics.median(r['probes']):.1f}, "
                  f"{len(r['probes'])} probes, P={r['nproc']})" for r in results) + ".", "",
              "Where the error comes from (same runs). Per kind: mean duration error, % of the measured mean "
              "(F forward, B full backward, I and W the halves of a split backward; – where a schedule has none). "
              "*first step*: first (warm-up) step's makespan / median step's. *ready gaps*: per rank and step "
              "(ms), the time actions waited although the rank was free and their inputs had been produced, "
              "before actions that wait for no message / before actions fed by one (the prediction charges "
              "none / only the wire time, 0.03–0.1 ms a message here): the runtime's bookkeeping between "
              "actions, the receiver's wake-up, any wait for a core. Then the makespan "
              "error (median over runs) of predictions that each leave one ingredient out.",
              "",
              "| P | schedule | F | B | I | W | first step | ready gaps: local / fed | without core sharing | "
              "without messages | with the ideal split |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for result in results:
        for name, row in result["rows"].items():
            cells = []
            for kind in ("F", "B", "I", "W"):
                values = [run[kind] for run in row["kinds"] if kind in run]
                cells.append(f"{statistics.mean(values):+.0%}" if values else "–")
            split = any("I" in run for run in row["kinds"])
            lines.append(
                f"| {result['nproc']} | {name} | {' | '.join(cells)} | {statistics.mean(row['first']):.2f}× | "
                f"{statistics.median(row['local_gaps']):.1f} / {statistics.median(row['fed_gaps']):.1f} | "
                f"{statistics.median(row['no_sharing']):+.1%} | {statistics.median(row['no_messages']):+.1%} | "
                f"{(format(statistics.median(row['ideal_split']), '+.1%') if split else '–')} |"
            )
    lines += ["", "Run 1's profile (ms per microbatch, median over the profile's repeats; blocks: their mean). "
              "*I + W / B*: what a real split backward costs over the full backward.", "",
              "| P | layer | F | B (full) | I | W | I + W / B |", "|---:|---|---:|---:|---:|---:|---:|"]
    for result in results:
        lines += _profile_rows(result["nproc"], result["profiles"][0][0])
    lines += ["", "Each run's calibration (latency ms; core sharing slowdown for 1, 2, ... busy processes), "
              "the load average when it was profiled and the factors fitted on its "
              f"`{CALIBRATION_SCHEDULE}` step:", ""]
    for result in results:
        for run, ((profile, load), fitted) in enumerate(zip(result["profiles"], result["factors"] + [{}] * 9)):
            calibration = profile.calibration
            if calibration is None:
                continue
            lines.append(
                f"* P={result['nproc']} run {run + 1}: latency {calibration.latency:.3f} ms, bandwidth "
                f"{format_bandwidth(calibration.bandwidth)}, slowdown "
                + " / ".join(f"{f:.2f}" for f in calibration.slowdown)
                + f"; load {load:.2f}; factors "
                + (", ".join(f"{k} ×{v:.2f}" for k, v in fitted.items()) or "none")
            )
    return "\n".join([*lines, "", run_line("fidelity.py", args.argv, started, args.backend)])


def main(argv: list[str] | None = None) -> int:
    parser = pipeline_parser(__doc__, batch_size=64, microbatches=8, doc_path=DOC)
    parser.add_argument("--schedules", default=",".join(SCHEDULES))
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    args.schedules = [s for s in args.schedules.split(",") if s]
    results = measure_and_record(args, _one_config, _table, "fidelity-table")
    failed = [row for result in results for row in result["rows"].values() if not all(row["grad_ok"])]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
