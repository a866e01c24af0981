"""The honest comparison: dual-rate variants against the synchronous pipeline and a frozen encoder.

Every method trains the same policy on the same temporal task (same seeds, same
SGD settings) on the same two processes (one vision rank, one action rank) for the
same wall-clock budget::

    from pipeplan.dualrate.study import run_study
    study = run_study(budget_s=4.0, seeds=(0, 1, 2))
    for row in study.summary():
        print(row["name"], row["samples_per_s"], row["final_loss"], row["time_to_target_s"])

Methods (:data:`METHODS`): the synchronous pipeline (the dual-rate schedule at
rate ratio 1 without overlap: vision forward, backward and update on every
step, exact gradients; the tests show it equals
:class:`~pipeplan.runtime.PipelineRuntime`'s pipeline bit for bit); dual-rate with λ = 1;
dual-rate with ``λ^Δt`` damping for a few λ; the frozen (initial) vision encoder
at the camera rate; and, with a staleness bound of 2, dual-rate with λ = 1, with
λ = 0.9 and with the staleness-aware learning rate α/Δt. (With the bound 1 every
gradient has Δt ≤ 1, where α/Δt scales by 1: it *is* the λ = 1 run.)

The clock. This machine is shared (two cores, several other jobs), so measured
wall-clock throughput swings by several times from run to run for reasons that
have nothing to do with the method. The budget is therefore set on *idle cores*:
every action of the policy is timed in isolation first (minimum CPU time,
:func:`~pipeplan.dualrate.runtime.measure_dual_rate_costs`), the closed form
(:func:`pipeplan.analytic.dual_rate_period`) turns those costs into each method's
steady-state samples per second, and each method trains for as many frames as
fit in the budget at that rate. The runs are real (real processes, real stale
gradients); only the seconds on the time axis come from the model, and the
measured wall-clock numbers are reported beside them.

Time to target: the first (idle-core) second at which a run's training loss,
averaged over its last :data:`SMOOTHING` steps, falls to the target; the default
target is the highest final smoothed loss of the synchronous pipeline's seeds (so
every synchronous seed reaches it within the budget): it reads "how soon does each
method get where the synchronous pipeline surely gets in the whole budget". Runs are interleaved (seed by seed, method by method) so
machine load drifts hit every method alike; a short warm-up run comes first.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._validation import positive_float
from ..errors import InvalidInputError
from .runtime import DualRateConfig, DualRateCosts, DualRateRun, measure_dual_rate_costs, run_dual_rate_configs

__all__ = ["METHODS", "QUICK_METHODS", "SMOOTHING", "Study", "method_configs", "run_study", "smoothed"]

#: Training steps the loss is averaged over for curves and time to target.
SMOOTHING = 25

#: name → options of :class:`DualRateConfig` (on top of the study's base configuration).
METHODS: dict[str, dict[str, Any]] = {
    "synchronous": {"rate_ratio": 1, "max_staleness": 0},
    "dual-rate λ=1": {},
    "dual-rate λ=0.95": {"damping": 0.95},
    "dual-rate λ=0.9": {"damping": 0.9},
    "dual-rate λ=0.5": {"damping": 0.5},
    "frozen encoder": {"train_vision": False},
    "dual-rate λ=1, Δt≤2": {"max_staleness": 2},
    "dual-rate λ=0.9, Δt≤2": {"max_staleness": 2, "damping": 0.9},
    "dual-rate α/Δt, Δt≤2": {"max_staleness": 2, "staleness_scaling": "inverse"},
}
#: The subset ``--quick`` runs.
QUICK_METHODS = ("synchronous", "dual-rate λ=1", "dual-rate λ=0.9", "frozen encoder")


def method_configs(base: DualRateConfig, names: Sequence[str]) -> dict[str, DualRateConfig]:
    """The configuration of each named method on top of ``base``.

    Raises:
        InvalidInputError: an unknown method name.
    """
    out = {}
    for name in names:
        if name not in METHODS:
            raise InvalidInputError(f"method must be one of {', '.join(METHODS)}, got {name!r}")
        out[name] = replace(base, name=name, camera_ratio=base.camera_period, **METHODS[name])
    return out


def smoothed(run: DualRateRun, window: int = SMOOTHING) -> list[tuple[float, int, float]]:
    """``(seconds, samples, mean training loss of the last window steps)`` per step."""
    out = []
    total = 0.0
    losses = [loss for _t, _n, loss in run.curve]
    for index, (seconds, samples, loss) in enumerate(run.curve):
        total += loss
        if index >= window:
            total -= losses[index - window]
        out.append((seconds, samples, total / min(index + 1, window)))
    return out


def _reach(run: DualRateRun, target: float) -> tuple[float, int] | None:
    """``(seconds, samples)`` when the smoothed training loss first reaches ``target``."""
    for seconds, samples, loss in smoothed(run):
        if loss <= target:
            return seconds, samples
    return None


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None and v == v]
    return statistics.fmean(present) if present and len(present) == len(values) else None


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


@dataclass
class Study:
    """Every run of the comparison: ``runs[method]`` holds one run per seed (in ``seeds`` order)."""

    runs: dict[str, list[DualRateRun]]
    seeds: tuple[int, ...]
    budget_s: float
    target_loss: float
    costs: DualRateCosts

    def idle_samples_per_s(self, name: str) -> float:
        """Method ``name``'s samples per second on idle cores (closed form on the calibrated costs)."""
        return self.costs.samples_per_s(self.runs[name][0].config)

    def idle_curve(self, run: DualRateRun) -> list[tuple[float, int, float]]:
        """``smoothed(run)`` with its time axis in idle-core seconds (samples / idle samples per second)."""
        rate = self.costs.samples_per_s(run.config)
        return [(samples / rate, samples, loss) for _t, samples, loss in smoothed(run)]

    def summary(self) -> list[dict[str, Any]]:
        """Per method: name, samples/s, frames/s, final held-out loss, time to target, staleness, seeds.

        ``samples_per_s`` and ``time_to_target_s`` are on idle cores (the closed form
        on the calibrated costs; the time is the samples the run needed to reach the
        target at that rate); ``measured_*`` are the wall-clock numbers of this
        (loaded) machine. Means over seeds; ``time_to_target_s`` is ``None`` unless
        every seed reached the target. ``spread`` holds mean/std/min/max and
        ``per_seed`` the values.
        """
        rows = []
        for name, runs in self.runs.items():
            rate = self.idle_samples_per_s(name)
            reaches = [_reach(run, self.target_loss) for run in runs]
            wall_times = [r[0] if r else None for r in reaches]
            times = [r[1] / rate if r else None for r in reaches]
            reached = [t for t in times if t is not None]
            histogram: dict[int, int] = {}
            for run in runs:
                for delta, count in run.staleness_histogram().items():
                    histogram[delta] = histogram.get(delta, 0) + count
            rows.append({
                "name": name,
                "samples_per_s": rate,
                "frames_per_s": rate / runs[0].config.rate_ratio / runs[0].config.num_envs,
                "final_loss": statistics.fmean(r.final_loss for r in runs),
                "time_to_target_s": _mean_or_none(times),
                "samples_to_target": _mean_or_none([float(r[1]) if r else None for r in reaches]),
                "measured_samples_per_s": statistics.fmean(r.samples_per_s for r in runs),
                "measured_time_to_target_s": _mean_or_none(wall_times),
                "seeds": list(self.seeds),
                "reached_target": f"{len(reached)}/{len(runs)}",
                "staleness_histogram": dict(sorted(histogram.items())),
                "spread": {
                    "final_loss": _spread([r.final_loss for r in runs]),
                    "measured_samples_per_s": _spread([r.samples_per_s for r in runs]),
                    **({"time_to_target_s": _spread(reached)} if reached else {}),
                },
                "per_seed": {
                    "final_loss": [r.final_loss for r in runs],
                    "time_to_target_s": times,
                    "measured_samples_per_s": [r.samples_per_s for r in runs],
                    "measured_time_to_target_s": wall_times,
                    "steps": [r.steps for r in runs],
                },
            })
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the setup and the per-method summary."""
        return {"budget_s": self.budget_s, "target_loss": self.target_loss, "seeds": list(self.seeds),
                "costs_ms": {"vision_F_B_U": list(self.costs.vision), "action_F_B_U": list(self.costs.action),
                             "vision_recompute_B": self.costs.vision_recompute_backward,
                             "vision_frozen_F": self.costs.vision_frozen_forward},
                "methods": self.summary()}


def run_study(
    *,
    budget_s: float = 3.0,
    seeds: Sequence[int] = (0, 1, 2),
    methods: Sequence[str] = tuple(METHODS),
    base: DualRateConfig | None = None,
    target_loss: float | None = None,
    timeout: float = 600.0,
) -> Study:
    """Run every method for ``budget_s`` idle-core seconds per seed on two processes.

    Args:
        budget_s: training budget of every run, seconds on idle cores (see the module doc).
        seeds: task and initialisation seeds (>= 1 of them).
        methods: names from :data:`METHODS`.
        base: the shared configuration (rate ratio, model size, learning rate...);
            default ``DualRateConfig(rate_ratio=4)``.
        target_loss: the time-to-target threshold; default: the synchronous
            pipeline's final smoothed training loss, the highest over seeds (requires
            ``"synchronous"`` among the methods).
        timeout: seconds before a stuck run fails.

    Raises:
        InvalidInputError: a bad budget, no seeds, an unknown method, or no target.
    """
    budget = positive_float("budget_s", budget_s, unit="seconds")
    seeds = tuple(int(seed) for seed in seeds)
    if not seeds:
        raise InvalidInputError("seeds must hold at least one seed")
    if target_loss is None and "synchronous" not in methods:
        raise InvalidInputError("give target_loss, or include 'synchronous' to take its final loss as the target")
    base = replace(base or DualRateConfig(), time_budget=None, return_weights=False)
    costs = measure_dual_rate_costs(base)
    configs = {
        name: replace(config, max_frames=max(1, math.ceil(budget * 1e3 / costs.period(config))))
        for name, config in method_configs(base, methods).items()
    }
    plan = [replace(base, name="warm-up", max_frames=20)]
    for seed in seeds:
        plan += [replace(config, seed=seed) for config in configs.values()]
    results = run_dual_rate_configs(plan, timeout=timeout)[1:]
    runs: dict[str, list[DualRateRun]] = {name: [] for name in configs}
    for run in results:
        runs[run.config.name].append(run)
    if target_loss is None:
        target_loss = max(smoothed(run)[-1][2] for run in runs["synchronous"])
    return Study(runs, seeds, budget, float(target_loss), costs)
