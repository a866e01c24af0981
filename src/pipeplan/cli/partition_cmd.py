"""``pipeplan partition``: split layers into pipeline stages, optimally and within memory.

    $ pipeplan partition --layers 32 --layer-cost 2 --first-extra 16 --last-extra 8 --stages 4
    $ pipeplan partition profile.csv --stages 8 --memory 80GB -m 16 --export megatron
    $ pipeplan partition profile.json --stages 4 --virtual-stages 2 --json
    $ pipeplan partition --preset pi0 --stages 4 --gpu h100-80g --micro-batch-size 4

Times are milliseconds per microbatch (F + B + W for ``--layer-cost``); memory is
printed in GiB. Prints a table of layers, time and memory per stage, then the
simulated step time and bubble of an even split and of the chosen partition under
``--schedule`` (``-m`` defaults to twice the pipeline ranks). A step larger than
:data:`pipeplan.limits.REPORT_STEP_ACTIONS` actions is not simulated for the report
(it would cost more than the partition): the line says so and how to get it.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from rich.table import Table

from .. import hardware, units
from .._validation import positive_int
from ..viz.tables import format_time
from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..limits import REPORT_STEP_ACTIONS, action_count
from ..partition import PartitionOptions, PartitionResult, even_split, partition_layers
from ..plan import Plan
from ..engines import ExportFile, export_files
from ..schedule import Schedule
from ..partition.steptime import partition_schedule, simulate_partition
from ..schedules import SCHEDULES, backward_mode, check_schedule_size, schedule_info
from ..units import format_gib
from ._common import check_scaled, default_microbatches, make_console, memory_size, byte_size, print_json, progress, renamed_flag
from ._engine_args import given_knobs
from ._export_args import add_export_arguments, check_export_args, emit_export, reference_names
from ._spec_args import add_spec_arguments, profile_from_spec_args, settle_spec_options, uses_spec

__all__ = ["register", "run", "profile_from_args"]

#: The generator that orders chunks on any chunk → rank map (cost-aware list scheduling).
_CHUNKS_SCHEDULE = "adaptive"


def register(subparsers: Any) -> None:
    """Add the ``partition`` verb."""
    parser = subparsers.add_parser(
        "partition",
        help="split layers into stages: exact, memory-aware, with exports",
        description=(
            "Split layers into contiguous pipeline stages minimising the slowest stage "
            "(exactly), within a memory capacity, and export the plan."
        ),
    )
    parser.add_argument("profile", nargs="?", help="a layer profile, .csv or .json (see pipeplan.layers)")
    parser.add_argument("--layers", type=int, help="number of identical layers (instead of a profile file)")
    parser.add_argument("--layer-cost", type=float,
                        help="F + B + W time of one layer per microbatch, ms (with --layers; the whole "
                             "forward-and-backward time, not the forward time: forward is a third of it)")
    parser.add_argument("--layer-params", type=float, default=None,
                        help="parameters per layer, a count (with --layers; default 0)")
    parser.add_argument("--layer-activation", type=byte_size("--layer-activation"), default=None,
                        help="activation bytes per layer per microbatch (with --layers, e.g. 200MB)")
    parser.add_argument("--first-extra", type=float, default=None, help="fixed time on the first stage, ms")
    parser.add_argument("--last-extra", type=float, default=None, help="fixed time on the last stage, ms")
    parser.add_argument("--first-extra-bytes", type=byte_size("--first-extra-bytes"), default=None, help="fixed bytes on the first stage")
    parser.add_argument("--last-extra-bytes", type=byte_size("--last-extra-bytes"), default=None, help="fixed bytes on the last stage")
    parser.add_argument("--stages", type=int, required=True,
                        help="pipeline stages S (model pieces). Ranks (GPUs) follow from --schedule: S for "
                             "1f1b, gpipe, zb-h1/zb-h2; S/2 for zb-v and interleaved (two stages per rank). "
                             "With --virtual-stages v: S chunks on S/v ranks, as in simulate")
    parser.add_argument("--virtual-stages", type=int, default=1,
                        help="chunks (virtual stages) per rank; v > 1 chooses chunk boundaries and their ranks "
                             "(default 1)")
    parser.add_argument("--memory", type=memory_size("--memory"), default=None,
                        help="memory capacity per rank (GPU), e.g. 80GB; the stages sharing a rank must fit "
                             "together")
    parser.add_argument("--optimizer", default="adam", metavar="adam|BYTES",
                        help="optimizer state: adam (mixed-precision Adam, 16 bytes of weights, gradients and "
                             "state per parameter; default) or those bytes per parameter as a number")
    parser.add_argument("--schedule", default="1f1b", help=f"one of {', '.join(SCHEDULES)} (default 1f1b)")
    parser.add_argument("-m", "--microbatches", type=int, default=None,
                        help="microbatches per step (default: twice the pipeline ranks)")
    parser.add_argument("--objective", choices=("bottleneck", "step-time"), default="bottleneck",
                        help="minimise the slowest stage (exact) or the simulated step time (local search)")
    parser.add_argument("--tie-break", choices=("lexicographic", "variance", "none"), default="lexicographic",
                        help="among optimal partitions (default lexicographic)")
    add_export_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_spec_arguments(parser)
    renamed_flag(parser, "--chunks-per-rank", "--virtual-stages", "chunks per rank, as in simulate and plan")
    renamed_flag(parser, "--bytes-per-param", "--optimizer", "adam or bytes per parameter, as in plan")
    parser.set_defaults(func=run)


def profile_from_args(args: argparse.Namespace) -> LayerProfile:
    """The layer profile the arguments describe (a file, --layers/--layer-cost, or --preset/--spec)."""
    if uses_spec(args):
        if args.profile or args.layers is not None:
            raise InvalidInputError("give a profile file, --layers, or --preset/--spec, not several")
        return profile_from_spec_args(args)
    if args.profile and args.layers is not None:
        raise InvalidInputError("give either a profile file or --layers/--layer-cost, not both")
    if args.profile:
        for flag, value in (("--layer-cost", args.layer_cost), ("--layer-params", args.layer_params),
                            ("--layer-activation", args.layer_activation)):
            if value is not None:
                raise InvalidInputError(
                    f"{flag} only applies with --layers, not with a profile file (the file gives each layer's "
                    "times, params and activation_bytes)"
                )
        return LayerProfile.from_file(args.profile)
    if args.layers is None or args.layer_cost is None:
        raise InvalidInputError("give a profile file, or both --layers N and --layer-cost MS")
    if not 0 < args.layer_cost < math.inf:
        raise InvalidInputError(f"--layer-cost must be > 0 ms and finite, got {args.layer_cost}")
    for flag, value in (("--layer-params", args.layer_params), ("--first-extra", args.first_extra),
                        ("--last-extra", args.last_extra)):
        if value is not None and not 0 <= value < math.inf:
            raise InvalidInputError(f"{flag} must be a finite number >= 0, got {value}")
    sized = (args.layer_params, args.layer_activation, args.first_extra_bytes, args.last_extra_bytes)
    if args.memory is not None and all(value is None for value in sized):
        raise InvalidInputError("--memory does not apply without sizes: give --layer-params or --layer-activation "
                                "(or --first-extra-bytes/--last-extra-bytes) for the layers to weigh anything")
    return LayerProfile.uniform(
        args.layers,
        forward=args.layer_cost / 3.0,
        activation_bytes=args.layer_activation or 0.0,
        params=args.layer_params or 0.0,
    )


def _extras(args: argparse.Namespace) -> dict[str, float]:
    pairs = {
        "first_extra": args.first_extra,
        "last_extra": args.last_extra,
        "first_extra_bytes": args.first_extra_bytes,
        "last_extra_bytes": args.last_extra_bytes,
    }
    return {key: value for key, value in pairs.items() if value is not None}


def run(args: argparse.Namespace) -> int:
    """Entry of ``pipeplan partition``."""
    settle_spec_options(args, applies=uses_spec(args),
                        what="--layers" if args.layers is not None else "a profile file")
    if uses_spec(args) and args.memory is not None and not args.device:
        held = hardware.device(args.gpu).memory_bytes
        if args.memory > held:
            raise InvalidInputError(f"--memory {units.format_gib(args.memory)} is more than a {args.gpu} holds "
                                    f"({units.format_gib(held)}): give at most that, or a --gpu with more memory")
    micro = _microbatches(args)
    _check_size(args, micro)
    check_export_args(args)
    for flag, value in (("--first-extra", args.first_extra), ("--last-extra", args.last_extra)):
        check_scaled(flag, value, 2.0 * micro, "its backward share summed over the microbatches")
    per_param = _bytes_per_param(args.optimizer)
    profile = profile_from_args(args)
    extras = _extras(args)
    if extras:
        profile = profile.with_extras(**extras)
    if args.virtual_stages != 1:
        return _run_chunks(args, profile)
    skipped = _step_too_large(args, micro)
    with progress(2, f"partitioning {profile.num_layers} layers into {args.stages} stages") as advance:
        options = PartitionOptions(
            memory_capacity=args.memory,
            bytes_per_param=per_param,
            schedule=args.schedule,
            num_microbatches=micro,
            simulate_step=skipped is None,
            objective="step_time" if args.objective == "step-time" else "bottleneck",
            tie_break=args.tie_break,
        )
        result = partition_layers(profile, args.stages, options)
        advance(1, "simulating the even split")
        even_sizes = even_split(profile.num_layers, args.stages)
        chosen = _simulated(profile, result, micro)
        same = tuple(even_sizes) == tuple(result.layers_per_stage)
        baseline = chosen if same or skipped else _evaluate(profile, even_sizes, args.schedule, micro)
    exported = _export(args, result, micro) if args.export else None
    if args.json:
        payload = result.to_dict()
        payload["memory_capacity"] = args.memory
        payload["even_split"] = {"layers_per_stage": list(even_sizes), **baseline}
        payload["simulated"] = None if skipped else chosen
        if skipped:
            payload["not_simulated"] = skipped
        if exported is not None:
            payload["export"] = _export_payload(args.export, exported)
        print_json(payload)
        return 0
    console = make_console()
    console.print(_stage_table(result, args.memory))
    if result.num_ranks < result.num_stages:
        console.print(_rank_table(result, args.memory))
    if args.memory is None and uses_spec(args):
        held = hardware.device(args.gpu).memory_bytes
        console.print(f"memory not checked: --memory (e.g. {units.format_gib(0.9 * held).replace(' ', '')}) fits the "
                      f"stages in a GPU; {args.gpu} has {units.format_gib(held)}", markup=False, highlight=False)
    even_bottleneck = _evaluate(profile, even_sizes, None, micro)["bottleneck"] if skipped else baseline["bottleneck"]
    line = f"slowest stage {format_time(result.bottleneck)} ms (even split {format_time(float(even_bottleneck or 0.0))} ms); "
    if skipped:
        line += f"{args.schedule}, m={micro}: step not simulated ({skipped})"
    else:
        line += (f"{args.schedule}, m={micro}: step {format_time(float(chosen['step_time'] or 0.0))} ms, bubble {chosen['bubble_ratio']:.2%} "
                 f"(even split: step {format_time(float(baseline['step_time'] or 0.0))} ms, bubble {baseline['bubble_ratio']:.2%})")
    console.print(line, markup=False, highlight=False)
    if exported is not None:
        if args.out is None:
            console.print(f"[bold]{args.export}[/bold]")
        emit_export(args, exported)
    return 0


def _bytes_per_param(optimizer: str) -> float:
    """``--optimizer adam|BYTES`` as bytes of weights, gradients and optimizer state per parameter."""
    from ..planner.memory import OptimizerBytes

    text = optimizer.strip()
    if text == "distributed":  # plan's pointer (--dp-modes zero1) would send a partition user nowhere
        raise InvalidInputError("--optimizer distributed: partition has no data parallelism to shard the state "
                                "over; give adam or bytes per parameter (e.g. --optimizer 18), or use pipeplan plan "
                                "--dp-modes zero1")
    try:
        value: str | float = float(text)
    except ValueError:
        value = text
    try:
        return OptimizerBytes.for_optimizer(value, 1).per_trainable
    except InvalidInputError as error:
        raise InvalidInputError(f"--optimizer: {error}") from None


def _microbatches(args: argparse.Namespace) -> int:
    """``-m`` as given, else twice the pipeline ranks (``--stages`` over the schedule's stages per rank)."""
    if args.microbatches is not None:
        return int(args.microbatches)
    stages = positive_int("--stages", args.stages)
    if args.virtual_stages != 1:
        return default_microbatches(None, _chunk_ranks(args))
    if args.schedule not in SCHEDULES:
        return default_microbatches(None, stages)  # an unknown schedule fails later
    info = schedule_info(args.schedule)
    chunks = 2 if info.layout == "loop" else info.chunks_per_rank()  # interleaved's default v = 2
    return default_microbatches(None, stages // chunks)


def _step_too_large(args: argparse.Namespace, micro: int) -> str | None:
    """Why the step is not simulated for the report (too many actions), or ``None`` to simulate it.

    ``--objective step-time`` needs the simulation and always gets it.
    """
    if args.objective == "step-time" or args.schedule not in SCHEDULES:
        return None
    actions = action_count(args.stages, micro, backward_mode(args.schedule))
    if actions <= REPORT_STEP_ACTIONS:
        return None
    return (f"{args.stages} stages × m = {micro} is {actions:,} actions, past the {REPORT_STEP_ACTIONS:,} a "
            "report simulates (the partition does not need them); give a smaller -m to see the step")


def _chunk_ranks(args: argparse.Namespace) -> int:
    """With ``--virtual-stages v``: the ranks the ``--stages`` chunks go on (``S / v``, a whole number)."""
    stages = positive_int("--stages", args.stages)
    virtual = positive_int("--virtual-stages", args.virtual_stages)
    if stages % virtual:
        raise InvalidInputError(f"--stages {stages} with --virtual-stages {virtual}: the stages (chunks) must fill "
                                f"the ranks evenly, {virtual} per rank; give a multiple of {virtual}")
    return stages // virtual


def _check_size(args: argparse.Namespace, micro: int) -> None:
    """Refuse up front a step too large to simulate in this machine's memory."""
    stages = positive_int("--stages", args.stages)
    micro = positive_int("-m/--microbatches", micro)
    if args.virtual_stages != 1:
        _chunk_ranks(args)
        check_schedule_size(_CHUNKS_SCHEDULE, num_stages=stages, num_microbatches=micro, names=("chunks", "-m"))
    elif args.schedule in SCHEDULES:
        simulated = args.objective == "step-time" or action_count(stages, micro, backward_mode(args.schedule)) \
            <= REPORT_STEP_ACTIONS
        check_schedule_size(args.schedule, num_stages=stages, num_microbatches=micro,
                            backward=backward_mode(args.schedule), simulated=simulated, names=("--stages", "-m"))


def _simulated(profile: LayerProfile, result: PartitionResult, micro: int) -> dict[str, float | None]:
    """The chosen partition's figures from the step the solver simulated (no second simulation).

    The bubble follows from its definition: busy time is ``m × Σ (F + B)`` over stages.
    Without a simulated step (too large to report) the step and bubble are ``None``.
    """
    costs = profile.stage_costs(result.layers_per_stage)
    totals = [f + b for f, b in zip(costs.forward, costs.backward)]
    if result.step_time is None:
        return {"bottleneck": max(totals), "step_time": None, "bubble_ratio": None}
    ranks = len(set(result.placement))
    bubble = max(0.0, 1.0 - micro * sum(totals) / (ranks * result.step_time)) if result.step_time > 0 else 0.0
    return {"bottleneck": max(totals), "step_time": result.step_time, "bubble_ratio": bubble}


def _evaluate(profile: LayerProfile, sizes: Any, schedule: str | None, micro: int) -> dict[str, Any]:
    """Slowest stage, simulated step time and bubble ratio of ``sizes`` (``schedule=None``: the slowest stage alone)."""
    costs = profile.stage_costs(sizes)
    totals = [f + b for f, b in zip(costs.forward, costs.backward)]
    if schedule is None:
        return {"bottleneck": max(totals), "step_time": None, "bubble_ratio": None}
    timeline = simulate_partition(costs, sizes, schedule, micro)
    return {"bottleneck": max(totals), "step_time": timeline.makespan, "bubble_ratio": timeline.bubble_ratio}


def _stage_table(result: PartitionResult, capacity: float | None) -> Table:
    title = f"{sum(result.layers_per_stage)} layers into {result.num_stages} stages on {result.num_ranks} ranks"
    if capacity is not None:
        title += f", ≤ {format_gib(capacity)} per rank"
    table = Table(title=title)
    for column in ("stage", "rank", "layers", "count", "time ms", "memory", "in flight"):
        table.add_column(column, justify="right")
    has_memory = any(result.stage_memory)
    memory = units.format_gib_column(result.stage_memory) if has_memory else ["—"] * result.num_stages
    for stage, span in enumerate(result.layer_ranges):
        table.add_row(
            str(stage),
            str(result.placement[stage]),
            f"{span.start}–{span.stop - 1}",
            str(len(span)),
            format_time(result.stage_times[stage]),
            memory[stage],
            str(result.inflight[stage]),
        )
    return table


def _rank_table(result: PartitionResult, capacity: float | None) -> Table:
    """Per rank (GPU): its stages and the memory they hold together."""
    table = Table(title="memory per rank" + (f" (capacity {format_gib(capacity)})" if capacity else ""))
    for column in ("rank", "stages", "time ms", "memory"):
        table.add_column(column, justify="right")
    loads = [0.0] * result.num_ranks
    for stage, rank in enumerate(result.placement):
        loads[rank] += result.stage_times[stage]
    memory = (units.format_gib_column(result.rank_memory) if any(result.stage_memory)
              else ["—"] * result.num_ranks)
    for rank in range(result.num_ranks):
        stages = [str(s) for s, r in enumerate(result.placement) if r == rank]
        table.add_row(str(rank), " + ".join(stages), format_time(loads[rank]), memory[rank])
    return table


def _export(args: argparse.Namespace, plan: Plan, micro: int, built: Schedule | None = None) -> list[ExportFile]:
    """The engine's files for ``plan``, with the order that was simulated (``built``, or rebuilt here)."""
    if built is None:
        costs = plan.profile.stage_costs(plan.layers_per_stage) if isinstance(plan, PartitionResult) and \
            plan.profile is not None else None
        built = partition_schedule(plan.schedule, plan.num_stages, micro, costs, options=plan.schedule_options)
    return export_files(plan, args.export, reference_names(args, plan.num_layers), schedule=built,
                        knobs=given_knobs(args))


def _export_payload(engine: str, files: list[ExportFile]) -> dict[str, Any]:
    return {"engine": engine, "files": {file.name: file.text for file in files}}


def _run_chunks(args: argparse.Namespace, profile: LayerProfile) -> int:
    """``--virtual-stages v``: chunk boundaries and a chunk → rank map, simulated adaptively."""
    from ..partition.placement import place_chunks

    if args.memory is not None:
        raise InvalidInputError("--memory is not supported with --virtual-stages > 1")
    ranks = _chunk_ranks(args)
    plan = place_chunks(profile, ranks, args.virtual_stages)
    micro = _microbatches(args)
    timeline = simulate_partition(profile, plan.layers_per_stage, _CHUNKS_SCHEDULE, micro, placement=plan.placement)
    built = timeline.schedule
    exported = _export(args, plan, micro, built) if args.export else None
    if args.json:
        payload: dict[str, Any] = plan.to_dict()
        payload["simulated"] = {"schedule": _CHUNKS_SCHEDULE, "num_microbatches": micro,
                                "step_time": timeline.makespan, "bubble_ratio": timeline.bubble_ratio}
        if exported is not None:
            payload["export"] = _export_payload(args.export, exported)
        print_json(payload)
        return 0
    table = Table(title=f"{profile.num_layers} layers into {len(plan.layers_per_stage)} chunks on {ranks} ranks")
    for column in ("chunk", "rank", "layers", "count", "time ms"):
        table.add_column(column, justify="right")
    bounds = plan.boundaries
    for chunk, rank in enumerate(plan.placement):
        table.add_row(str(chunk), str(rank), f"{bounds[chunk]}–{bounds[chunk + 1] - 1}",
                      str(plan.layers_per_stage[chunk]), f"{plan.stage_times[chunk]:.6g}")
    console = make_console()
    console.print(table)
    console.print(
        f"rank loads {', '.join(f'{load:.6g}' for load in plan.rank_loads)} ms "
        f"(largest {plan.max_load:.6g}, lower bound {plan.lower_bound:.6g}); "
        f"adaptive, m={micro}: step {format_time(timeline.makespan)} ms, bubble {timeline.bubble_ratio:.2%}"
    )
    if exported is not None:
        emit_export(args, exported)
    return 0
