"""The dual-rate pipeline against honest baselines, on real processes (lesson 16, Q3).

    python benchmarks/dual_rate.py                # 3 s (idle-core) budget, 3 seeds, every method
    python benchmarks/dual_rate.py --quick        # 0.5 s, one seed, four methods (for tests)
    python benchmarks/dual_rate.py --json         # per method: name, samples_per_s, final_loss, ...
    python benchmarks/dual_rate.py --write        # also update docs/dual_rate.md and docs/img/dual_rate_*.png

Every method trains the built-in conv encoder + MLP head on the temporal task
(a camera frame every 4 control steps) on two gloo processes, one vision rank
and one action rank; see :mod:`pipeplan.dualrate.study` for the methods,
the idle-core clock and the time-to-target rule. Also written: the closed form
against the simulator over rate ratios, and a simulated Gantt of both rates on
the measured costs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import add_write_flag, measured_line, replace_between, run_command  # noqa: E402

from pipeplan import StageCosts, build_schedule, simulate  # noqa: E402
from pipeplan.analytic import dual_rate_period  # noqa: E402
from pipeplan.dualrate.metrics import dual_rate_metrics  # noqa: E402
from pipeplan.dualrate.runtime import DualRateConfig, DualRateCosts  # noqa: E402
from pipeplan.dualrate.study import METHODS, QUICK_METHODS, Study, run_study  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "dual_rate.md"
IMG = ROOT / "docs" / "img"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def table(study: Study) -> str:
    """The markdown table of the comparison."""
    lines = [
        "| method | samples/s (idle cores) | samples/s measured (loaded) | final held-out MSE (mean ± std) "
        "| time to target, s (mean ± std) | reached | Δt histogram |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in study.summary():
        loss = row["spread"]["final_loss"]
        reach = row["spread"].get("time_to_target_s")
        reach_text = "—" if reach is None else f"{reach['mean']:.2f} ± {reach['std']:.2f}"
        if row["time_to_target_s"] is None and reach is not None:
            reach_text += " (reached only)"
        lines.append(
            f"| {row['name']} | {row['samples_per_s']:,.0f} | {row['measured_samples_per_s']:,.0f} "
            f"| {loss['mean']:.5f} ± {loss['std']:.5f} | {reach_text} | {row['reached_target']} "
            f"| {row['staleness_histogram']} |"
        )
    costs = study.costs
    lines += [
        "",
        f"Budget {study.budget_s:g} s on idle cores per run; seeds {list(study.seeds)}; target loss "
        f"{study.target_loss:.5f} (the synchronous pipeline's final smoothed training loss, the highest of its seeds). "
        f"Calibrated CPU costs (ms, one thread, minimum of 15): vision F/B/U "
        f"{'/'.join(f'{c:.2f}' for c in costs.vision)} (B without stashing {costs.vision_recompute_backward:.2f}, "
        f"frozen F {costs.vision_frozen_forward:.2f}); action F/B/U {'/'.join(f'{c:.2f}' for c in costs.action)}.",
    ]
    return "\n".join(lines)


def findings(study: Study) -> str:
    """Plain sentences computed from the numbers (the docs add the reading)."""
    rows = {row["name"]: row for row in study.summary()}
    sync = rows["synchronous"]
    out = []
    trained = [r for r in rows.values() if r["name"] != "frozen encoder"]
    best_time = min((r for r in trained if r["time_to_target_s"] is not None),
                    key=lambda r: r["time_to_target_s"], default=None)
    best_loss = min(trained, key=lambda r: r["final_loss"])
    if best_time is not None and sync["time_to_target_s"] is not None:
        out.append(f"* Fastest to the target: **{best_time['name']}**, {best_time['time_to_target_s']:.2f} s against "
                   f"the synchronous pipeline's {sync['time_to_target_s']:.2f} s "
                   f"({sync['time_to_target_s'] / best_time['time_to_target_s']:.1f}× sooner).")
    if best_time is not None and sync["samples_to_target"] is not None and best_time["samples_to_target"]:
        out.append(f"* Samples to the target: synchronous {sync['samples_to_target']:,.0f}, {best_time['name']} "
                   f"{best_time['samples_to_target']:,.0f}: per sample the synchronous pipeline learns more (a fresh "
                   "vision update every step); per second the dual-rate one trains more samples.")
    out.append(f"* Lowest final held-out loss: **{best_loss['name']}**, {best_loss['final_loss']:.5f} "
               f"(synchronous {sync['final_loss']:.5f}).")
    if "dual-rate λ=1" in rows:
        plain = rows["dual-rate λ=1"]
        out.append(f"* Throughput: dual-rate trains {plain['samples_per_s'] / sync['samples_per_s']:.1f}× the samples "
                   f"per second of the synchronous pipeline on idle cores "
                   f"({plain['samples_per_s']:,.0f} vs {sync['samples_per_s']:,.0f}); measured on this loaded machine "
                   f"{plain['measured_samples_per_s']:,.0f} vs {sync['measured_samples_per_s']:,.0f}.")
        for name, row in rows.items():
            if name.startswith("dual-rate λ=0") and "Δt≤2" not in name:
                spread_plain = plain["spread"]["final_loss"]
                spread = row["spread"]["final_loss"]
                overlap = spread["min"] <= spread_plain["max"] and spread_plain["min"] <= spread["max"]
                out.append(f"* {name} vs λ=1: final loss {row['final_loss']:.5f} vs {plain['final_loss']:.5f}"
                           + (" (the seeds' ranges overlap)" if overlap else " (the seeds' ranges do not overlap)") + ".")
    if "frozen encoder" in rows:
        frozen = rows["frozen encoder"]
        out.append(f"* Frozen encoder: {frozen['samples_per_s']:,.0f} samples/s but final loss "
                   f"{frozen['final_loss']:.5f}; reached the target in {frozen['reached_target']} seeds.")
    return "\n".join(out)


# -------------------------------------------------------------------- plots
def _median_band(curves: list[list[tuple[float, int, float]]], axis: int, points: int = 120) -> tuple[Any, ...]:
    import numpy as np

    end = min(curve[-1][axis] for curve in curves)
    grid = np.linspace(end / points, end, points)
    values = np.array([np.interp(grid, [p[axis] for p in curve], [p[2] for p in curve]) for curve in curves])
    return grid, np.median(values, axis=0), values.min(axis=0), values.max(axis=0)


def plot_losses(study: Study, path: Path) -> None:
    """Smoothed training loss against idle-core seconds and against samples (median and range over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_time, by_samples) = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for index, (name, runs) in enumerate(study.runs.items()):
        curves = [study.idle_curve(run) for run in runs]
        style = "--" if "Δt≤2" in name else "-"
        color = f"C{index % 10}"
        for axes, axis in ((by_time, 0), (by_samples, 1)):
            grid, median, low, high = _median_band(curves, axis)
            axes.plot(grid, median, style, color=color, label=name, linewidth=1.4)
            axes.fill_between(grid, low, high, color=color, alpha=0.12)
    trained = [study.idle_curve(run)[-1][1] for name, runs in study.runs.items() if name != "frozen encoder"
               for run in runs]
    by_samples.set_xlim(0, 1.05 * max(trained))
    for axes in (by_time, by_samples):
        axes.axhline(study.target_loss, color="black", linewidth=0.8, linestyle=":")
        axes.set_yscale("log")
        axes.grid(alpha=0.3)
    by_time.set_xlabel("seconds on idle cores (samples / calibrated samples per second)")
    by_samples.set_xlabel("training samples (the frozen encoder's line runs on past the right edge)")
    by_time.set_ylabel("training MSE (mean of the last 25 steps)")
    by_samples.legend(fontsize=7, loc="upper right")
    figure.suptitle(f"Dual-rate vs synchronous, {len(study.seeds)} seeds (line: median, band: range); dotted: target")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_staleness(study: Study, path: Path) -> None:
    """Histogram of the measured Δt of every vision gradient, per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in study.summary() if row["name"] != "frozen encoder"]
    figure, axes = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / len(rows)
    for index, row in enumerate(rows):
        histogram = row["staleness_histogram"]
        total = sum(histogram.values())
        deltas = sorted(histogram)
        axes.bar([d + (index - len(rows) / 2) * width for d in deltas], [histogram[d] / total for d in deltas],
                 width=width, label=row["name"], color=f"C{index % 10}")
    axes.set_xlabel("Δt of a vision gradient (vision updates between its forward and its update)")
    axes.set_ylabel("fraction of gradients")
    axes.set_xticks([0, 1, 2])
    axes.legend(fontsize=7, ncol=2)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def closed_form_check(costs: DualRateCosts, *, frames: int = 48) -> list[dict[str, float]]:
    """For k = 1..16: samples/s of the closed form and of the simulator on the calibrated costs."""
    vision = costs.vision
    action = costs.action
    stage_costs = StageCosts([vision[0], action[0]], [vision[1], action[1]], update=[vision[2], action[2]])
    rows = []
    for ratio in (1, 2, 3, 4, 6, 8, 12, 16):
        for staleness in (0, 1):
            schedule = build_schedule("dual-rate", num_stages=2, num_microbatches=frames * ratio,
                                      rate_ratio=ratio, max_staleness=staleness)
            metrics = dual_rate_metrics(simulate(schedule, stage_costs), batch_size=32)
            period = dual_rate_period([vision], [action], rate_ratio=ratio, max_staleness=staleness)
            rows.append({"rate_ratio": ratio, "max_staleness": staleness,
                         "closed_form_samples_per_s": ratio * 32 / (period / 1e3),
                         "simulated_samples_per_s": metrics.steady_samples_per_s or 0.0,
                         "vision_utilisation": metrics.utilisation[0], "action_utilisation": metrics.utilisation[1]})
    return rows


def plot_closed_form(rows: list[dict[str, float]], path: Path) -> None:
    """Closed-form samples/s against k (lines) and the simulator's steady state (points)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for staleness, label in ((1, "overlap (Δt ≤ 1)"), (0, "no overlap (Δt = 0)")):
        part = [r for r in rows if r["max_staleness"] == staleness]
        axes.plot([r["rate_ratio"] for r in part], [r["closed_form_samples_per_s"] for r in part], "-", label=f"closed form, {label}")
        axes.plot([r["rate_ratio"] for r in part], [r["simulated_samples_per_s"] for r in part], "o", color="black",
                  markersize=4)
    axes.plot([], [], "o", color="black", markersize=4, label="simulator, steady state")
    axes.set_xlabel("rate ratio k (action steps per vision update)")
    axes.set_ylabel("action samples / s (idle cores)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_gantts(costs: DualRateCosts, directory: Path) -> None:
    """Simulated Gantt charts on the calibrated costs: the synchronous pipeline and the dual-rate one."""
    from pipeplan.viz import plot_timeline

    vision, action = costs.vision, costs.action
    stage_costs = StageCosts([vision[0], action[0]], [vision[1], action[1]], update=[vision[2], action[2]])
    sync = simulate(build_schedule("dual-rate", num_stages=2, num_microbatches=12, rate_ratio=1, max_staleness=0),
                    stage_costs)
    dual = simulate(build_schedule("dual-rate", num_stages=2, num_microbatches=48, rate_ratio=4), stage_costs)
    plot_timeline(sync, directory / "dual_rate_gantt_sync.png", memory=False,
                  title=f"synchronous (rate ratio 1, no overlap): 12 steps in {sync.makespan:.0f} ms (simulated)")
    plot_timeline(dual, directory / "dual_rate_gantt.png",
                  title=f"dual-rate (k = 4, Δt ≤ 1): 48 steps in {dual.makespan:.0f} ms (simulated); "
                        "memory: frames held by the vision rank, steps by the action rank")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="0.5 s budget, one seed, four methods")
    parser.add_argument("--budget", type=float, default=None, help="idle-core seconds per run (default 3; quick 0.5)")
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (default 3; quick 1)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_write_flag(parser, DOC)  # and its plots in docs/img
    args = parser.parse_args(argv)
    budget = args.budget if args.budget is not None else (0.5 if args.quick else 3.0)
    seeds = tuple(range(args.seeds if args.seeds is not None else (1 if args.quick else 3)))
    methods = QUICK_METHODS if args.quick else tuple(METHODS)
    began = time.perf_counter()
    study = run_study(budget_s=budget, seeds=seeds, methods=methods, base=DualRateConfig(rate_ratio=4))
    elapsed = time.perf_counter() - began
    checks = closed_form_check(study.costs)
    if args.json:
        payload = study.to_dict()
        payload["closed_form_vs_simulator"] = checks
        payload["benchmark_wall_s"] = elapsed
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(table(study))
        print()
        print(findings(study))
        print(f"\n(benchmark took {elapsed:.0f} s)")
    if args.write:
        IMG.mkdir(parents=True, exist_ok=True)
        plot_losses(study, IMG / "dual_rate_loss.png")
        plot_staleness(study, IMG / "dual_rate_staleness.png")
        plot_closed_form(checks, IMG / "dual_rate_closed_form.png")
        plot_gantts(study.costs, IMG)
        worst = max(abs(r["simulated_samples_per_s"] / r["closed_form_samples_per_s"] - 1) for r in checks)
        machine = f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs, {elapsed:.0f} s"
        command = run_command(["dual_rate.py", *(sys.argv[1:] if argv is None else argv)])
        body = "\n".join([
            table(study),
            "",
            findings(study),
            "",
            f"Closed form vs simulator on these costs, k = 1..16, with and without overlap: largest relative "
            f"difference of the steady-state samples/s {worst:.1e}.",
            "",
            measured_line(command, machine=machine),
        ])
        replace_between(DOC, "dual-rate-results", body)
        print(f"wrote {DOC.relative_to(ROOT)} and {IMG.relative_to(ROOT)}/dual_rate_*.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
