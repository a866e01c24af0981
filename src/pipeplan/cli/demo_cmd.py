"""``pipeplan demo``: worked stories on built-in models, the planner's first.

    $ pipeplan demo                   # π0 on 8 and 64 H100s: the plans against openpi's and Megatron's layouts
    $ pipeplan demo --story lesson16  # lesson 16: the dumbbell bubble and its cure
    $ pipeplan demo --story seed002   # the unit-step tables of GPipe and 1F1B
    $ pipeplan demo --story seed003   # seed 003's 4-stage pipeline on real torch modules
    $ pipeplan demo --story dual-rate # lesson 16 Q3: a slow camera, a fast controller, measured

Every number printed comes from :func:`pipeplan.simulate` or :mod:`pipeplan.analytic`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from .. import analytic
from .._validation import positive_int
from ..costs import StageCosts
from ..limits import check_gantt_size
from ..partition import PartitionOptions, partition_layers
from ..schedules import build_schedule, check_schedule_size
from ..simulate import simulate
from ._common import make_console, progress, refuse_unless, require_torch
from ..timeline import IdleCause, Timeline

__all__ = ["register", "lesson16_story", "pi0_story", "DUMBBELL_FORWARD"]

#: Lesson 16's dumbbell: a 30 ms vision stage, two 10 ms middle stages, a 20 ms action head.
DUMBBELL_FORWARD = (30.0, 10.0, 10.0, 20.0)
#: Lesson 16's layer model, forward times: 32 transformer layers of 2 ms, a 16 ms vision encoder,
#: an 8 ms action head (backward = 2 × forward, so F + B is three times these).
LAYERS, LAYER_COST, VISION_COST, ACTION_COST = 32, 2.0, 16.0, 8.0
#: The lesson's microbatch counts in part 3, as multiples of ``-m``.
MORE_MICROBATCHES = (1, 4, 16, 64)


def register(subparsers: Any) -> None:
    """Add the ``demo`` verb."""
    parser = subparsers.add_parser(
        "demo",
        help="worked stories: a VLA-shaped pipeline's bubble and cure, the seed lessons, π0 on H100s",
        description=(
            "Tell one worked story with numbers computed here (the simulator, the planner, real CPU processes). "
            "Stories and their defaults: pi0 (default): π0 planned on 8 and 64 H100s against openpi's layout and "
            "Megatron-LM's recommended one (the planner chooses m), about 6 CPU s. "
            "lesson16: a 30|10|10|20 ms dumbbell on 4 ranks, m = 8, "
            "Gantt 80 columns, about 1 s. seed002: seed 002's unit-step tables of GPipe and 1F1B, N = 3 stages, "
            "M = 4 microbatches (fixed). seed003: seed 003's pipeline of N = 4 stages on real torch modules, "
            "M = m = 8, Gantt 96 columns. dual-rate: lesson 16 Q3, a slow camera and a fast controller, "
            "measured on 2 processes (about 20 s; needs torch). "
            "M is the microbatch count and N the stage count in every story."),
    )
    parser.add_argument("--story", choices=("pi0", "lesson16", "seed002", "seed003", "dual-rate"), default="pi0",
                        help="which story to tell (default pi0: planning π0 on H100s; the others are the lessons)")
    parser.add_argument("-m", "--microbatches", type=int, default=None,
                        help="microbatches per step (default 8, twice the 4 ranks of lesson16 and seed003; not "
                             "with seed002, which uses the seed's 4, nor pi0)")
    parser.add_argument("--width", type=int, default=None,
                        help="Gantt width in characters (default 80; seed003: 96; pi0: the Gantt of a best plan "
                             "that pipelines, drawn only if one does; not with seed002)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry of ``pipeplan demo``."""
    console = make_console()
    if args.story == "seed002":
        refuse_unless(args.microbatches is None, "-m/--microbatches", "to --story seed002 (the seed's tables use 4)")
        refuse_unless(args.width is None, "--width", "to --story seed002 (its step tables have one column per step)")
    micro = positive_int("-m/--microbatches", 8 if args.microbatches is None else args.microbatches)
    width = positive_int("--width", (96 if args.story == "seed003" else 80) if args.width is None else args.width)
    check_gantt_size(width, len(DUMBBELL_FORWARD), field="--width")
    if args.story == "seed002":
        from ..viz import step_table

        for name in ("gpipe", "1f1b"):
            timeline = simulate(build_schedule(name, num_stages=3, num_microbatches=4),
                                StageCosts.uniform(3, forward=1.0, backward=1.0))
            console.print(f"[bold]{name}[/bold], N = 3 stages, M = 4 microbatches, F = B = 1 step "
                          "(seed 002 writes M for the stages and N for the microbatches; pipeplan's stories use M "
                          "for microbatches and N for stages, as seed 003 does; numbered from 0):")
            console.print(step_table(timeline), markup=False, highlight=False)
        return 0
    if args.story == "dual-rate":
        from .dual_rate_cmd import dual_rate_story

        dual_rate_story(console)
        return 0
    if args.story == "seed003":
        require_torch("pipeplan demo --story seed003")
        from ..lessons.pipeline import run_demo

        with progress(1, f"seed 003: measuring 4 stages × {micro} microbatches on torch modules"):
            text = run_demo(num_stages=4, num_microbatches=micro, chart_width=width)
        console.print(text, markup=False, highlight=False, soft_wrap=True)
        return 0
    if args.story == "pi0":
        refuse_unless(args.microbatches is None, "-m/--microbatches", "to --story pi0 (the planner chooses m)")
        with progress(2, "π0: searching the plans for 8 H100s") as advance:
            pi0_story(console, width=width, advance=advance)
        return 0
    stages = len(DUMBBELL_FORWARD)
    largest = MORE_MICROBATCHES[-1] * micro
    check_schedule_size("1f1b", num_stages=stages, num_microbatches=largest, backward="full", simulated=True,
                        names=("stages", f"{MORE_MICROBATCHES[-1]} × -m (part 3's largest step)"))
    work = _story_microbatches(micro)
    with progress(work, f"lesson 16, m = {micro}") as advance:
        lesson16_story(console, num_microbatches=micro, width=width, advance=advance)
    return 0


def _story_microbatches(num_microbatches: int) -> int:
    """Microbatches the lesson 16 story simulates in all (its parts' steps), the progress bar's total."""
    return num_microbatches * (1 + 2 + sum(MORE_MICROBATCHES) + 2)


def pi0_story(console: Console, *, width: int = 100, advance: Callable[..., None] | None = None) -> None:
    """π0 planned honestly: where plain sharded data parallelism is as good, and where pipelining pays.

    Two searches of the whole space (tp, pp, data-parallel mode, schedule,
    micro-batch size, recompute) against the two baselines a user would run:
    8 H100s at global batch 256 (32 samples per GPU: FSDP hides its
    communication, no pipeline needed) and 64 H100s at global batch 64 (one
    sample per GPU: FSDP's per-layer gathers over InfiniBand no longer hide, and
    tensor plus pipeline parallelism inside and across nodes wins).

    ``advance(1, description)`` is called after each of the two searches (the CLI's progress bar).
    """
    from .. import presets
    from ..planner import Cluster, Workload, search
    from ..planner.advice import capacity_text
    from ..planner.explain import explain
    from ..planner.options import DEFAULT_HEADROOM, SearchOptions
    from ..planner.resolution import tie_leaders
    from ..viz import text_gantt
    from .plan_cmd import show_plans

    spec = presets.get("pi0")
    training = spec.training
    console.rule("[bold]π0: when does pipelining pay?")
    console.print(
        f"π0 (openpi): a SigLIP vision tower, Gemma 2B and an action expert that runs in lockstep with every "
        f"Gemma layer, {spec.num_parameters() / 1e9:.2f}B parameters. openpi trains it with "
        f"{training.dp_mode if training else 'data parallelism'} and full recompute; Megatron-LM would use the "
        "least model parallelism that fits. pipeplan searches both and everything between."
    )
    bests = []
    for gpus, batch in ((8, 256), (64, 64)):
        cluster = Cluster.of("h100-80g", gpus)
        workload = Workload.from_spec(spec, cluster.device, tp_link=cluster.intra_node)
        result = search(workload, cluster, batch, SearchOptions(top=10))
        (advance or (lambda amount, description=None: None))(1, "π0: searching the plans for 64 H100s")
        console.rule(f"{gpus} × H100 80GB, global batch {batch} ({batch // gpus} per GPU)")
        ties = tie_leaders([plan.step_time for plan in result.plans])
        show_plans(console, result, title="ranked plans, the baselines, one-knob changes (step ms)",
                   capacity=capacity_text(0.0, cluster.memory_bytes, DEFAULT_HEADROOM, False), ties=ties)
        tied = sorted({plan.dp_mode for plan, tie in zip(result.plans, ties) if tie == 0} - {result.best.dp_mode})
        best, baseline = result.best, result.best_baseline
        bests.append(best)
        if baseline is None or baseline.plan is None:
            console.print("no baseline fits")
            continue
        line = explain(best, baseline.plan, baseline.prose)
        piped = [plan for plan in result.plans if plan.pp > 1]
        if best.pp == 1 and best.tp == 1:
            modes = best.dp_mode + (f", tied with {' and '.join(tied)} at the cost model's resolution" if tied else "")
            verdict = f"Plain sharded data parallelism is the best plan here ({modes}): {line}."
        elif best.pp == 1:
            verdict = (f"Tensor parallelism inside a node pays, a pipeline does not: tp={best.tp} × dp={best.dp} "
                       f"{best.dp_mode} is {line}.")
        else:
            verdict = (f"Pipelining pays: tp={best.tp} × pp={best.pp} × dp={best.dp} {best.dp_mode}, "
                       f"{best.schedule_label}, is {line}.")
        if best.pp == 1:
            verdict += (f" The best pipelined plan listed ({piped[0].schedule_label}, pp={piped[0].pp}) takes "
                        f"{(piped[0].step_time or 0.0) / (best.step_time or 1.0):.2f}× as long." if piped else
                        " No pipelined plan is among the ten fastest.")
        console.print(verdict, markup=False, highlight=False)
        if best.timeline is not None and best.pp > 1:
            console.print("\n[bold]The best plan's step[/bold] (one pipeline; ms)")
            console.print(text_gantt(best.timeline, width=width), markup=False, highlight=False)
    first, second = bests
    if first.tp * first.pp == 1 and second.tp * second.pp > 1:
        console.print(
            f"\nWith {256 // 8} samples per GPU each GPU has work enough to hide its data-parallel collectives "
            f"({_ms(first.exposed_dp_time, first)} of them exposed), and a pipeline would only add fill and drain. "
            f"With {64 // 64} sample per GPU they no longer hide across nodes: cutting the data-parallel degree with "
            f"model parallelism (tp={second.tp}, pp={second.pp}) pays.", markup=False, highlight=False)
    console.print(
        "\nYour own cluster: `pipeplan plan --preset pi0 --gpus N --global-batch B`; "
        "add --export megatron|deepspeed|torchtitan|torch for an engine's flags."
    )


def _ms(value: float | None, plan: Any) -> str:
    """A plan's time in its unit as milliseconds, three significant figures."""
    return f"{float(f'{plan.milliseconds(value or 0.0):.3g}'):g} ms"


def _idle_table(title: str, timelines: dict[str, Timeline]) -> Table:
    table = Table(title=title)
    table.add_column("plan")
    table.add_column("rank", justify="right")
    for cause in IdleCause:
        if cause is not IdleCause.OVERHEAD:
            table.add_column(cause.value.replace("_", " "), justify="right")
    table.add_column("utilisation", justify="right")
    for name, timeline in timelines.items():
        idle = timeline.idle_by_cause()
        for rank in range(timeline.num_ranks):
            cells = [f"{idle[rank][c]:.0f}" for c in IdleCause if c is not IdleCause.OVERHEAD]
            table.add_row(name if rank == 0 else "", str(rank), *cells, f"{timeline.utilisation[rank]:.0%}")
    return table


def lesson16_story(
    console: Console,
    *,
    num_microbatches: int = 8,
    width: int = 80,
    advance: Callable[..., None] | None = None,
) -> None:
    """Print lesson 16's argument with numbers from the simulator.

    ``advance(microbatches, description)`` is called after each simulated step
    (the CLI's progress bar); the story simulates :func:`_story_microbatches` in all.
    """
    from ..viz import text_gantt

    m = num_microbatches
    advance = advance or (lambda amount, description=None: None)
    forward = list(DUMBBELL_FORWARD)
    stages = len(forward)
    costs = StageCosts(forward)
    console.rule("[bold]Lesson 16: a dumbbell VLA pipeline")
    console.print(
        f"Stage forward times per microbatch (ms): vision {forward[0]:g} | {forward[1]:g} | {forward[2]:g} | "
        f"action head {forward[3]:g}; backward = 2 × forward; m = {m}, one stage per rank."
    )

    forward_only = simulate(build_schedule("1f1b", num_stages=stages, num_microbatches=m, backward="none"), costs)
    advance(m, "part 2: the full step")
    console.print(
        f"\n[bold]1. Forward phase[/bold] (the lesson's simulator): makespan {forward_only.makespan:g} ms "
        f"= Σt + (m−1)·max t = {analytic.forward_makespan(forward, m):g}; bubble {forward_only.bubble_ratio:.1%} "
        f"(closed form {analytic.asymmetric_forward_bubble(forward, m):.1%})."
    )

    steps = {name: simulate(build_schedule(name, num_stages=stages, num_microbatches=m), costs)
             for name in ("gpipe", "1f1b")}
    advance(2 * m, "part 3: more microbatches")
    console.print("\n[bold]2. The full training step[/bold]")
    for name, timeline in steps.items():
        console.print(f"   {name:>5}: makespan {timeline.makespan:g} ms, bubble {timeline.bubble_ratio:.1%}, "
                      f"peak in-flight per rank {list(timeline.peak_inflight)}")
    console.print(f"   Equal stages would give (P−1)/(m+P−1) = {analytic.uniform_bubble(stages, m):.1%}.")
    console.print(text_gantt(steps["1f1b"], width=width), markup=False, highlight=False)

    console.print("\n[bold]3. More microbatches do not cure it[/bold]")
    for count in (factor * m for factor in MORE_MICROBATCHES):
        timeline = simulate(build_schedule("1f1b", num_stages=stages, num_microbatches=count), costs, validate=False)
        advance(count)
        console.print(f"   m = {count:>4}: 1F1B bubble {timeline.bubble_ratio:.1%}")
    console.print(f"   limit 1 − mean/max = {analytic.asymmetric_bubble_limit(forward):.1%}: the fast ranks wait "
                  "for the slowest one forever.")

    console.print(f"\n[bold]4. Re-balance the layers[/bold] (forward times): {LAYERS} layers × {LAYER_COST:g} ms, "
                  f"vision encoder {VISION_COST:g} ms on stage 0, action head {ACTION_COST:g} ms on stage "
                  f"{stages - 1}. `pipeplan partition` takes F + B + W per layer, so this case is "
                  f"--layer-cost {3 * LAYER_COST:g} --first-extra {3 * VISION_COST:g} "
                  f"--last-extra {3 * ACTION_COST:g} there.")
    even = [LAYERS // stages] * stages
    extras = PartitionOptions(first_extra=3 * VISION_COST, last_extra=3 * ACTION_COST)
    balanced = list(partition_layers([3 * LAYER_COST] * LAYERS, stages, extras).layers_per_stage)
    plans: dict[str, Timeline] = {}
    for label, layers in (("even split", even), ("re-balanced", balanced)):
        times = [n * LAYER_COST for n in layers]
        times[0] += VISION_COST
        times[-1] += ACTION_COST
        timeline = simulate(build_schedule("1f1b", num_stages=stages, num_microbatches=m), StageCosts(times))
        advance(m)
        plans[label] = timeline
        shown = ", ".join(f"{t:g}" for t in times)
        console.print(f"   {label:>11}: layers {layers} → forward ms [{shown}] → "
                      f"1F1B makespan {timeline.makespan:g} ms, bubble {timeline.bubble_ratio:.1%}")
    saved = 1 - plans["re-balanced"].makespan / plans["even split"].makespan
    console.print(f"   The re-balanced plan finishes the step {saved:.0%} sooner; its bubble is the uniform "
                  f"(P−1)/(m+P−1) = {analytic.uniform_bubble(stages, m):.1%}.")
    console.print(text_gantt(plans["re-balanced"], width=width), markup=False, highlight=False)

    console.print("\n[bold]5. Where the idle time went[/bold] (ms per rank)")
    console.print(_idle_table("idle time by cause, 1F1B", {"dumbbell": steps["1f1b"], **plans}))
