"""The dual-rate pipeline on the command line (lesson 16, Q3).

    $ pipeplan dual-rate --json --quick                 # the comparison: per method samples/s, loss, time to target
    $ pipeplan simulate --schedule dual-rate --rate-ratio 4 --forward 30,4 --update 1,0.5 -m 64
    $ pipeplan run --schedule dual-rate --rate-ratio 4 --damping 0.95
    $ pipeplan demo --story dual-rate

This module holds the ``dual-rate`` verb, the options the ``simulate`` and ``run``
verbs add for the dual-rate schedule, the ``run`` report and the demo's story;
the work itself is :mod:`pipeplan.dualrate.runtime`,
:mod:`pipeplan.dualrate.study`, :mod:`pipeplan.schedules.dual_rate` and
:mod:`pipeplan.dualrate.metrics`.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

from .._validation import positive_float, positive_int
from ..errors import InvalidInputError
from ..limits import MAX_LOCAL_BATCH, MAX_LOCAL_PROCESSES, MAX_STEPS, check_gantt_size
from ._common import make_console, print_json, progress, require_torch, text_width

__all__ = [
    "register",
    "add_rate_arguments",
    "refuse_rate_flags",
    "add_run_arguments",
    "rate_options",
    "run_verb",
    "simulate_lines",
    "dual_rate_story",
    "STUDY_STARTUP_S",
]


def register(subparsers: Any) -> None:
    """Add the ``dual-rate`` verb (the measured comparison)."""
    parser = subparsers.add_parser(
        "dual-rate",
        help="the dual-rate pipeline against the synchronous one, measured on real processes",
        description="Train the built-in policy with every method (synchronous, dual-rate with and without "
                    "damping, staleness-scaled LR, frozen encoder) at equal idle-core budget and compare.",
    )
    parser.add_argument("--quick", action="store_true", help="0.5 s budget, one seed, four methods")
    parser.add_argument("--budget", type=_text, default=None, metavar="SECONDS", help="idle-core seconds per run (default 1; quick 0.5)")
    parser.add_argument("--seeds", type=_text, default=None, metavar="N", help="number of seeds (default 3; quick 1)")
    parser.add_argument("--rate-ratio", type=_text, default="4", metavar="K", help="control steps per camera frame (default 4)")
    parser.add_argument("--json", action="store_true", help="print the per-method summary as JSON")
    parser.set_defaults(func=_study_verb)


def _text(value: str) -> str:
    """Keep the raw text: numbers are checked by pipeplan's validators, which say what is allowed in one line."""
    return value


def _number(field: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidInputError(f"{field} must be a number, got {text!r}") from None


def _integer(field: str, text: str | None, *, minimum: int = 1, maximum: int | None = None,
             why: str = "") -> int | None:
    if text is None:
        return None
    return positive_int(field, _number(field, text), minimum=minimum, maximum=maximum, why=why)


# ---------------------------------------------------------------- options
def add_rate_arguments(parser: argparse.ArgumentParser) -> None:
    """``--rate-ratio``, ``--vision-stages``, ``--max-staleness``, ``--buffer-frames`` (dual-rate schedule shape)."""
    group = parser.add_argument_group("dual-rate schedule")
    group.add_argument("--rate-ratio", type=_text, default=None, metavar="K",
                       help="dual-rate: action steps per vision update, an integer >= 1 (default 4)")
    group.add_argument("--vision-stages", type=_text, default=None, metavar="N",
                       help="dual-rate: how many of the first stages are the vision side (default 1)")
    group.add_argument("--max-staleness", type=_text, default=None, metavar="N",
                       help="dual-rate: frames the vision side may run ahead, >= 0 (default 1; 0: no overlap)")
    group.add_argument("--buffer-frames", type=_text, default=None, metavar="N",
                       help="dual-rate: latent slots on the action side (default max-staleness + 1)")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``run`` verb's dual-rate options (on top of :func:`add_rate_arguments`)."""
    add_rate_arguments(parser)
    group = parser.add_argument_group("dual-rate training")
    group.add_argument("--damping", type=_text, default=None, metavar="FRACTION",
                       help="dual-rate: λ in (0, 1] of the λ^Δt damping of stale vision gradients (default 1)")
    group.add_argument("--staleness-scaling", choices=("damping", "inverse"), default="damping",
                       help="dual-rate: λ^Δt, or the staleness-aware learning rate α/Δt (default damping)")
    group.add_argument("--no-stash", action="store_true",
                       help="dual-rate: no weight stashing (the stale backward recomputes on the current weights)")
    group.add_argument("--frames", type=_text, default=None, metavar="N", help="dual-rate: frames to train (default 16)")


_RUN_FLAGS = ("rate_ratio", "vision_stages", "max_staleness", "buffer_frames", "damping", "frames")


def refuse_rate_flags(args: argparse.Namespace) -> None:
    """Refuse the dual-rate options given to ``run`` with another schedule (they would be ignored unchecked)."""
    given = [f"--{key.replace('_', '-')}" for key in _RUN_FLAGS if getattr(args, key, None) is not None]
    if getattr(args, "no_stash", False):
        given.append("--no-stash")
    if getattr(args, "staleness_scaling", "damping") != "damping":
        given.append("--staleness-scaling")
    if given:
        raise InvalidInputError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to --schedule dual-rate, "
                                f"not to {getattr(args, 'schedule', None)!r}")


_RATIO_WHY = "action steps per vision update, as many as run --steps at most"


def rate_options(args: argparse.Namespace) -> dict[str, int]:
    """The dual-rate schedule options the arguments give (only those given)."""
    options: dict[str, Any] = {
        "rate_ratio": _integer("--rate-ratio", args.rate_ratio, maximum=MAX_STEPS, why=_RATIO_WHY),
        "vision_stages": _integer("--vision-stages", args.vision_stages),
        "max_staleness": _integer("--max-staleness", args.max_staleness, minimum=0, maximum=MAX_STEPS,
                                  why="frames, as many as a run trains at most"),
        "buffer_frames": _integer("--buffer-frames", args.buffer_frames, maximum=MAX_STEPS,
                                  why="latent slots, as many frames as a run trains at most"),
    }
    return {key: value for key, value in options.items() if value is not None}


# ------------------------------------------------------------- simulate
def simulate_lines(timeline: Any, costs: Any, comm: Any) -> list[str]:
    """What ``pipeplan simulate`` adds for a dual-rate schedule: both rates, closed form, staleness, memory."""
    from ..analytic import dual_rate_period
    from ..dualrate.metrics import dual_rate_metrics

    schedule = timeline.schedule
    shape = schedule.shape
    metrics = dual_rate_metrics(timeline)
    vision = [(costs.forward[s], costs.backward[s], costs.update[s]) for s in range(shape.num_vision_stages)]
    action = [(costs.forward[s], costs.backward[s], costs.update[s]) for s in range(shape.num_vision_stages,
                                                                                      shape.num_stages)]
    boundaries = comm.boundary_times(shape.num_stages)
    period = dual_rate_period(vision, action, rate_ratio=shape.rate_ratio, max_staleness=shape.max_staleness,
                              comm=max(boundaries, default=0.0))
    lines = [
        f"dual-rate: k = {shape.rate_ratio} action steps per vision update, {shape.num_frames} frames, "
        f"{shape.num_steps} action steps, staleness bound {shape.max_staleness}",
        f"  action side {metrics.samples_per_s:.4g} steps/s, vision side {metrics.frames_per_s:.4g} frames/s "
        f"(whole run; times in ms)",
        f"  steady state: {metrics.steady_period:.6g} ms per frame simulated, closed form {period:.6g} ms"
        if metrics.steady_period is not None else
        f"  closed-form steady state: {period:.6g} ms per frame (run >= 8 frames to compare with the simulator)",
        "  utilisation per rank: " + ", ".join(f"{u:.0%}" for u in metrics.utilisation),
        "  Δt of each frame's gradient: " + "; ".join(
            f"vision stage {s}: {_runs(values)}" for s, values in metrics.staleness.items()),
        f"  memory: at most {metrics.peak_latents} latents buffered on the action side; frames held per vision "
        f"stage {list(metrics.peak_frames)}",
    ]
    if len({round(b, 12) for b in boundaries}) > 1:
        lines.append("  (closed form with the largest boundary's message time for every message)")
    return lines


def _runs(values: tuple[int, ...]) -> str:
    """``0, 1 ×5`` for ``(0, 1, 1, 1, 1, 1)``."""
    parts: list[str] = []
    index = 0
    while index < len(values):
        end = index
        while end + 1 < len(values) and values[end + 1] == values[index]:
            end += 1
        count = end - index + 1
        parts.append(f"{values[index]}" + (f" ×{count}" if count > 1 else ""))
        index = end + 1
    return ", ".join(parts)


# ------------------------------------------------------------------ run
#: ``run`` flags the dual-rate run does not use, with their defaults: one given is refused, not ignored.
_UNUSED_BY_DUAL_RATE = {"microbatches": ("-m", None), "dp": ("--dp", 1), "virtual_stages": ("--virtual-stages", 2),
                        "layers": ("--layers", None), "steps": ("--steps", 3), "warmup": ("--warmup", 1),
                        "partition": ("--partition", "auto"), "model": ("--model", None),
                        "profile": ("--profile", None), "recompute": ("--recompute", "none")}


def _refuse_unused_run_flags(args: argparse.Namespace) -> None:
    given = [flag for key, (flag, default) in _UNUSED_BY_DUAL_RATE.items() if getattr(args, key, default) != default]
    if given:
        raise InvalidInputError(f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply to --schedule "
                                "dual-rate (it trains the built-in policy for --frames frames; see --help)")


def run_verb(args: argparse.Namespace) -> int:
    """``pipeplan run --schedule dual-rate``: one real dual-rate run, its Gantt, metrics and the replay check."""
    require_torch("pipeplan run --schedule dual-rate")
    from ..dualrate.metrics import dual_rate_metrics
    from ..dualrate.runtime import DualRateConfig, replay_dual_rate, run_dual_rate

    _refuse_unused_run_flags(args)
    options = rate_options(args)
    processes = positive_int("--nproc", args.nproc, minimum=2, maximum=MAX_LOCAL_PROCESSES,
                             why="processes on this machine, each importing torch")
    check_gantt_size(text_width(args), processes, field="--width")
    vision = options.pop("vision_stages", processes - 1)
    if vision != processes - 1:
        raise InvalidInputError(
            f"--vision-stages must be --nproc - 1 = {processes - 1} (one action rank), got {vision}"
        )
    config = DualRateConfig(
        rate_ratio=options.get("rate_ratio", 4),
        num_vision_stages=vision,
        max_staleness=options.get("max_staleness", 1),
        buffer_frames=options.get("buffer_frames"),
        damping=1.0 if args.damping is None else _number("--damping", args.damping),
        staleness_scaling=args.staleness_scaling,
        stash_weights=not args.no_stash,
        max_frames=_integer("--frames", args.frames, maximum=MAX_STEPS, why="frames trained, as run --steps") or 16,
        num_envs=positive_int("--batch-size", args.batch_size, maximum=MAX_LOCAL_BATCH,
                              why="examples per step of a model run on this machine"),
        return_weights=vision == 1,
    )
    run = run_dual_rate(config, timeout=positive_float("--timeout", args.timeout, unit="seconds"))
    timeline = run.timeline()
    metrics = dual_rate_metrics(timeline, batch_size=config.num_envs)
    check: dict[str, Any] = {"checked": False}
    if vision == 1:
        reference = replay_dual_rate(config)
        difference = max(float((run.weights[n] - reference[n]).abs().max()) for n in reference)
        check = {"checked": True, "max_abs_diff": difference, "tolerance": 1e-5, "ok": difference <= 1e-5}
    ok = check.get("ok", True)
    if args.json:
        print_json({"config": {**run.to_dict()["config"]}, "run": {k: v for k, v in run.to_dict().items()
                                                                 if k not in ("config", "curve")},
                    "metrics": metrics.to_dict(), "replay_check": check, "measured": timeline.to_dict()})
        return 0 if ok else 1
    from ..viz import rank_table, text_gantt

    console = make_console()
    console.print(
        f"pipeplan run: dual-rate on {config.world_size} processes (gloo): {vision} vision rank(s), 1 action rank; "
        f"k = {config.rate_ratio}, staleness bound {config.max_staleness}, "
        + (f"λ = {config.damping:g}" if config.staleness_scaling == "damping" else "α/Δt")
        + f", weight stashing {'on' if config.stash_weights else 'off'}, {run.frames} frames, {run.steps} steps "
        f"of {config.num_envs} samples", markup=False, highlight=False)
    console.print(text_gantt(timeline, width=args.width), markup=False, highlight=False)
    console.print(rank_table(timeline, activation_sizes=False))  # a measured run records no activation sizes
    lines = [
        f"measured: {run.samples_per_s:,.0f} samples/s, {run.frames_per_s:.1f} frames/s over {run.wall_s:.2f} s; "
        f"utilisation per rank " + ", ".join(f"{u:.0%}" for u in metrics.utilisation),
        f"Δt of the vision gradients: {run.staleness_histogram()} (schedule: "
        f"{_runs(config.shape(run.frames).staleness(vision - 1))})",
        f"final held-out MSE {run.final_loss:.5f}; training loss {run.curve[0][2]:.4f} → {run.curve[-1][2]:.4f}",
    ]
    if check["checked"]:
        lines.append(f"replay check: max abs weight difference {check['max_abs_diff']:.2e} vs the same algorithm in "
                     f"one process ({'ok' if check['ok'] else 'FAILED'}, tolerance 1e-05)")
    for line in lines:
        console.print(line, markup=False, highlight=False)
    return 0 if ok else 1


# ---------------------------------------------------------------- study
def _study_verb(args: argparse.Namespace) -> int:
    require_torch("pipeplan dual-rate")
    from ..dualrate.runtime import DualRateConfig
    from ..dualrate.study import METHODS, QUICK_METHODS, run_study

    budget = positive_float("--budget", _number("--budget", args.budget), unit="seconds") if args.budget else (
        0.5 if args.quick else 1.0)
    if budget > STUDY_MAX_BUDGET_S:
        raise InvalidInputError(f"--budget must be <= {STUDY_MAX_BUDGET_S:g} seconds per training run, got {budget:g} "
                                "(every method and seed runs that long)")
    seeds = _integer("--seeds", args.seeds, maximum=STUDY_MAX_SEEDS,
                     why="each seed is one training run per method") or (1 if args.quick else 3)
    ratio = _integer("--rate-ratio", args.rate_ratio, maximum=MAX_STEPS, why=_RATIO_WHY) or 4
    methods = QUICK_METHODS if args.quick else tuple(METHODS)
    runs = len(methods) * seeds
    expected = runs * budget + STUDY_STARTUP_S
    # Always said, terminal or not: the study runs for a minute or more with nothing else to show.
    print(f"pipeplan dual-rate: {len(methods)} methods × {seeds} seed{'s' if seeds > 1 else ''} = {runs} training "
          f"runs of {budget:g} s (idle-core time) on 2 processes, plus ~{STUDY_STARTUP_S:.0f} s to start and "
          f"measure the costs: about {expected:.0f} s, longer on a busy machine (--quick: 4 methods, 1 seed)",
          file=sys.stderr, flush=True)
    with _elapsed_progress(expected, f"training {runs} runs"):
        study = run_study(budget_s=budget, seeds=range(seeds), methods=methods, base=DualRateConfig(rate_ratio=ratio))
    if args.json:
        print_json(study.to_dict())
        return 0
    _study_table(make_console(), study)
    return 0


#: The longest training run (idle-core seconds) and the most seeds a study takes: beyond them it
#: would run for days; ``--budget 1e30`` was accepted.
STUDY_MAX_BUDGET_S = 3600.0
STUDY_MAX_SEEDS = 100

#: Seconds a study spends outside its training runs on an idle machine: two processes importing
#: torch, the cost measurement and the warm-up run (``--quick --budget 0.2``: 15.5 s in all, 0.8 s of it training).
STUDY_STARTUP_S = 15.0


@contextmanager
def _elapsed_progress(expected_s: float, description: str) -> Iterator[None]:
    """A progress bar on stderr (a terminal only) that fills with elapsed time over ``expected_s``.

    The runs happen in other processes and report nothing until they end; the bar stops
    short of full until they do.
    """
    with progress(expected_s, description) as advance:
        done = threading.Event()

        def tick() -> None:
            shown = 0.0
            started = time.monotonic()
            while not done.wait(0.5):
                target = min(time.monotonic() - started, 0.99 * expected_s)
                advance(target - shown)
                shown = target

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()


def _study_table(console: Console, study: Any) -> None:
    from rich.table import Table

    table = Table(title=f"{study.budget_s:g} s per run on idle cores, seeds {list(study.seeds)}, "
                        f"target loss {study.target_loss:.5f}")
    for column in ("method", "samples/s (idle)", "samples/s (measured)", "final MSE", "time to target s", "Δt"):
        table.add_column(column, justify="left" if column in ("method", "Δt") else "right")
    for row in study.summary():
        table.add_row(row["name"], f"{row['samples_per_s']:,.0f}", f"{row['measured_samples_per_s']:,.0f}",
                      f"{row['final_loss']:.5f}",
                      "—" if row["time_to_target_s"] is None else f"{row['time_to_target_s']:.2f}",
                      str(row["staleness_histogram"]))
    console.print(table)


# ----------------------------------------------------------------- demo
def dual_rate_story(console: Console) -> None:
    """Lesson 16, Q3, with numbers measured here: costs, the two schedules, staleness, a real comparison."""
    require_torch("pipeplan demo --story dual-rate")
    from ..analytic import dual_rate_period
    from ..costs import StageCosts
    from ..dualrate.runtime import DualRateConfig, measure_dual_rate_costs
    from ..dualrate.study import run_study
    from ..schedules import build_schedule
    from ..schedules.dual_rate import dual_rate
    from ..simulate import simulate
    from ..viz import text_gantt

    console.rule("[bold]Lesson 16, Q3: a dual-rate pipeline for a slow camera and a fast controller")
    base = DualRateConfig(rate_ratio=4)
    costs = measure_dual_rate_costs(base)
    vision, action = costs.vision, costs.action
    console.print(
        "The task: a camera frame every 4 control steps (25 Hz camera, 100 Hz control); the policy is a conv "
        "encoder (vision rank) and an MLP head (action rank).\n"
        f"Measured here, CPU ms per batch of {base.num_envs}: vision F {vision[0]:.2f}, B {vision[1]:.2f}, "
        f"U {vision[2]:.2f}; action F {action[0]:.2f}, B {action[1]:.2f}, U {action[2]:.2f}.",
        markup=False, highlight=False)
    stage_costs = StageCosts([vision[0], action[0]], [vision[1], action[1]], update=[vision[2], action[2]])
    sync = simulate(build_schedule("dual-rate", num_stages=2, num_microbatches=8, rate_ratio=1, max_staleness=0),
                    stage_costs)
    dual_schedule = dual_rate(2, 32, rate_ratio=4)
    dual = simulate(dual_schedule, stage_costs)
    console.print("\n[bold]1. Synchronous pipeline[/bold]: the vision rank runs (and updates) on every control "
                  "step, though the image changes only every 4th; the ranks take turns.")
    console.print(text_gantt(sync, width=90), markup=False, highlight=False)
    console.print("\n[bold]2. Dual-rate[/bold]: one vision update per frame, 4 action steps per frame reading the "
                  "latest latent; the vision rank computes the next frame while the action rank trains.")
    console.print(text_gantt(dual, width=90), markup=False, highlight=False)
    sync_rate = 32 / (dual_rate_period([vision], [action], rate_ratio=1, max_staleness=0) / 1e3)
    dual_speed = 4 * 32 / (dual_rate_period([vision], [action], rate_ratio=4, max_staleness=1) / 1e3)
    console.print(f"   closed form, idle cores: synchronous {sync_rate:,.0f} samples/s, dual-rate {dual_speed:,.0f} "
                  f"samples/s ({dual_speed / sync_rate:.1f}×).", markup=False, highlight=False)
    console.print(f"\n[bold]3. The price: stale vision gradients[/bold]. Δt per frame, read off the schedule: "
                  f"{_runs(dual_schedule.staleness(0))}. The lesson damps them: ∇θ_vis ← λ^Δt ∇θ_vis.")
    console.print("\n[bold]4. Measured[/bold]: real processes (gloo), 1 s idle-core budget each, one seed "
                  "(the full benchmark, 3 seeds: benchmarks/dual_rate.py; docs/dual_rate.md).")
    with _elapsed_progress(4 * 1.0 + STUDY_STARTUP_S, "training 4 runs"):
        study = run_study(budget_s=1.0, seeds=(0,), methods=("synchronous", "dual-rate λ=1", "dual-rate λ=0.9",
                                                              "frozen encoder"), base=base)
    _study_table(console, study)
    rows = {row["name"]: row for row in study.summary()}
    plain, damped, frozen = rows["dual-rate λ=1"], rows["dual-rate λ=0.9"], rows["frozen encoder"]
    console.print(
        f"   Dual-rate trains {plain['samples_per_s'] / rows['synchronous']['samples_per_s']:.1f}× the samples per "
        f"second; final held-out MSE: synchronous {rows['synchronous']['final_loss']:.4f}, λ = 1 "
        f"{plain['final_loss']:.4f}, λ = 0.9 {damped['final_loss']:.4f}, frozen encoder {frozen['final_loss']:.4f}. "
        "One seed and one second are noisy; docs/dual_rate.md has the 3-seed comparison and what it shows.",
        markup=False, highlight=False)
