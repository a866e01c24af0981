"""``pipeplan plan``: the fastest plans that fit, against what users run instead, with the engines' files.

    $ pipeplan plan --preset pi0 --gpus 8 --gpu h100-80g --global-batch 256
    $ pipeplan plan --preset pi0 --gpus 8 --global-batch 256 --pp 4 --export torchtitan
    $ pipeplan plan --preset driving-6cam --gpus 32 --global-batch 256 --json --budget 5
    $ pipeplan plan --profile prof.json --gpus 8 --global-batch 64     # a measured profile (ms)

Prints the ranked table (#, tp×pp×dp, dp mode, schedule, b×m, layers per
stage, recompute per module, step time, samples/s, MFU, bubble, worst GPU's
memory, ratio to the better baseline), then the two baselines (the model's
repository, Megatron-LM's recommended layout) and the best plan changing one
knob of the Megatron one; under it a legend of the notation it shows, the GPU's
capacity (once, with and without headroom), the partitions the table cut, why
the best plan beats the baselines and the search's counts. Step times are
shown to 3 significant figures and plans equal at that resolution are marked
``= #N``. When no plan fits, the error names the remedies that would, each
computed (:mod:`pipeplan.planner.advice`). ``--json`` prints ``plans`` (each
with ``exports`` and ``ties_with``), ``baselines``, ``baseline`` (the Megatron
one), ``why``, ``search``, ``assumptions`` (with ``memory``; docs/planner.md) and ``shape`` (the
preset's shape options as planned, ``--cameras`` etc.; ``null`` for a spec or profile).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .. import hardware, presets
from ..errors import InvalidInputError
from ..models.layer_costs import layer_costs
from .. import data_parallel
from ..layers import LayerProfile
from ..partition.choice import parse_partition
from ..planner import DEFAULT_HEADROOM, Cluster, SearchOptions, SearchResult, Workload, search
from ..planner.error_band import ErrorBand, error_band
from ..planner.memory import OptimizerBytes
from ..engines._eager import compiles_loss
from ..planner.resolution import RESOLUTION_NOTE, tie_leaders
from ..planner.step import SYNCS
from ..schedules import planned_schedules
from .. import units
from ._common import gantt_width, make_console, memory_size, name_choice, output_path, positive, print_json, progress, renamed_flag, report_written
from ._export_args import (add_export_arguments, check_export_args, check_export_model, emit_export,
                           model_refusal_of, reference_names)
from ._engine_args import (DEFAULT_ENGINE, add_engine_arguments, engine_assumptions, engine_costs, engine_workload,
                           given_knobs)
from ._plan_mix import (add_mix_argument, mix_export_choice, mix_outputs_note, mix_pick, plan_mix, show_mix,
                        show_mix_choice)
from ..hardware.device_file import device_fields
from ._spec_args import (add_device_argument, add_mfu_argument, add_shape_arguments, defaults_assumption, device_from_args,
                         planned_shape, shape_from_args, shape_note, spec_from_args)

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``plan`` verb."""
    parser = subparsers.add_parser(
        "plan",
        help="search tp × pp × dp, the data-parallel mode, partition, schedule, microbatches and recompute "
             "for the fastest plan that fits",
        description=(
            "Search tensor × pipeline × data parallel degrees, the data-parallel mode (ddp, ZeRO-1/2, FSDP, "
            "HSDP), the exact partition, every schedule, the micro-batch size and recompute under per-GPU "
            "memory; rank by simulated step time; compare with what the model's repository runs and with "
            "Megatron-LM's recommended layout; export the engines' files."
        ),
    )
    parser.add_argument("--preset", type=name_choice("--preset", presets.names), default=None,
                        help=f"a model preset: {', '.join(presets.names())}")
    parser.add_argument("--spec", default=None, metavar="FILE", help="a ModelSpec .json (or .yaml) file")
    parser.add_argument("--profile", metavar="FILE", help="a measured layer profile, .csv or .json (times in ms)")
    parser.add_argument("--profile-micro-batch-size", type=int, default=None,
                        help="micro-batch size the --profile was measured at (default: the size the file "
                             "records, else 1)")
    parser.add_argument("--freeze", default=None, metavar="MODULES", help="comma-separated modules to freeze")
    parser.add_argument("--unfreeze", default=None, metavar="MODULES", help="comma-separated modules to train")
    add_shape_arguments(parser)
    parser.add_argument("--gpus", type=positive("--gpus"), required=True, help="number of GPUs")
    parser.add_argument("--gpu", type=name_choice("--gpu", hardware.device_names), default="h100-80g",
                        help=f"device: {', '.join(hardware.device_names())}")
    add_device_argument(parser)
    add_mfu_argument(parser)
    parser.add_argument("--memory", type=memory_size("--memory"), default=None,
                        help="memory per GPU with its unit, e.g. 70GiB or 75GB, at most the device's (default the "
                             "device's less --headroom)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument("--intra-link", default=None,
                        help=f"link inside a node (default NVLink of the GPU): {', '.join(hardware.link_names())}")
    parser.add_argument("--inter-link", default="ib-ndr", help="link between nodes (default ib-ndr)")
    parser.add_argument("--global-batch", type=positive("--global-batch"), required=True,
                        help="samples per optimizer step")
    parser.add_argument("--pp", type=positive("--pp"), default=None, help="fix the pipeline-parallel degree")
    parser.add_argument("--tp", type=int, default=None,
                        help="fix the tensor-parallel degree (Megatron TP with sequence parallelism, inside a node; "
                             "default: every degree that divides the heads and a node)")
    renamed_flag(parser, "--tensor-parallel", "--tp", "the tensor-parallel degree, as in model, partition and simulate")
    parser.add_argument("--dp-modes", default=None, metavar="MODES",
                        help="comma-separated data-parallel modes to search: ddp, zero1, zero2, fsdp, hsdp "
                             "(default all with --optimizer adam)")
    parser.add_argument("--grad-sync", choices=tuple(SYNCS), default="megatron-overlap",
                        help="how ddp/zero1/zero2 reduce gradients: megatron-overlap (the default: Megatron-LM with "
                             "--overlap-grad-reduce --overlap-param-gather), megatron (its bare default, after the "
                             "backward) or torch-ddp (25 MB buckets); fsdp and hsdp always overlap per layer")
    parser.add_argument("--micro-batch-size", type=int, default=None, help="fix the micro-batch size")
    parser.add_argument("--partition", default=None, metavar="auto|even|A,B,...",
                        help="fix the layers per stage: counts like 4,3,3,2 (only configurations with that many "
                             "stages, pp·v), 'even' (each one's even split) or 'auto' (solved; the default)")
    parser.add_argument("--headroom", type=units.argparse_type(units.parse_fraction, "--headroom", zero=True, one=False), default=None,
                        help="share of each GPU's memory left free, e.g. 0.1 or 10%% (default "
                             f"{DEFAULT_HEADROOM * 100:g}%%; 0 plans up to the full memory; not with --memory, which is "
                             "what a plan may use)")
    parser.add_argument("--max-virtual-stages", type=int, default=4,
                        help="largest v (chunks per rank) tried for interleaved and adaptive (default 4)")
    parser.add_argument("--virtual-stages", type=positive("--virtual-stages"), default=None, metavar="N",
                        help="pin v, the stages per rank: only the schedules that run it (interleaved v >= 2, "
                             "adaptive any, a V schedule 2, one stage per rank 1), at that v; not capped by "
                             "--max-virtual-stages (default: searched)")
    parser.add_argument("--schedules", default=None,
                        help="comma-separated schedules to try (default all but dual-rate: "
                             f"{','.join(planned_schedules())})")
    parser.add_argument("--optimizer", default="adam", metavar="adam|BYTES",
                        help="adam (mixed precision, 16 bytes per parameter, sharded as each --dp-modes mode "
                             "shards it) or bytes of weights + gradients + optimizer state per parameter (then ddp "
                             "only); Megatron-LM's distributed optimizer is --dp-modes zero1")
    parser.add_argument("--send", choices=("eager", "rendezvous", "serialized"), default="eager",
                        help="message semantics: eager (torch isend), rendezvous, or serialized (Megatron-LM's "
                             "and DeepSpeed's blocking p2p: each exchange on the sender's timeline)")
    parser.add_argument("--top", type=positive("--top"), default=10, help="plans to show (default 10)")
    parser.add_argument("--budget", type=positive("--budget", float), default=None, metavar="SECONDS",
                        help="stop after this many seconds and report the best plans found so far")
    add_export_arguments(parser)
    add_engine_arguments(parser)
    add_mix_argument(parser)
    parser.add_argument("--plot", metavar="PATH", help="draw the best plan's Gantt and memory (PNG/SVG)")
    parser.add_argument("--trace", metavar="PATH", help="write the best plan's Chrome/Perfetto trace")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def _workload(args: argparse.Namespace, cluster: Cluster) -> Workload:
    given = [flag for flag, value in (("--preset", args.preset), ("--spec", args.spec), ("--profile", args.profile))
             if value]
    if len(given) != 1:
        raise InvalidInputError(
            f"give the model with exactly one of --preset (one of {', '.join(presets.names())}), --spec FILE "
            f"or --profile FILE; got {', '.join(given) if given else 'none'}"
        )
    if args.profile:
        if args.freeze or args.unfreeze:
            raise InvalidInputError("--freeze/--unfreeze apply to --preset or --spec, not to a measured --profile")
        shape_from_args(args)  # a shape option names the profile's own shapes: refused
        profile = LayerProfile.from_file(args.profile)
        return Workload.from_profile(profile, micro_batch_size=args.profile_micro_batch_size, name=args.profile)
    return Workload.from_spec(spec_from_args(args), cluster.device, tp_link=cluster.intra_node)


def _cluster(args: argparse.Namespace) -> Cluster:
    if args.device:  # the file's device, and its measured p2p link inside a node unless --intra-link names one
        device, p2p = device_from_args(args)
        intra = hardware.link(args.intra_link) if args.intra_link else p2p or hardware.intra_node_link(device.name)
        return Cluster(args.gpus, device, intra, hardware.link(args.inter_link), args.gpus_per_node)
    return Cluster.of(args.gpu, args.gpus, intra_node=args.intra_link, inter_node=args.inter_link,
                      gpus_per_node=args.gpus_per_node, achievable_fraction=args.mfu)


def _search_progress(advance: Callable[..., None]) -> Callable[[int, int], None]:
    """The search's ``progress(done, total)`` as a share of one bar; a restart (the advice's searches) renames it."""
    shown = [0.0]

    def report(done: int, total: int) -> None:
        share = done / total if total else 1.0
        advance(share - shown[0], None if share >= shown[0] else "looking for what would fit")
        shown[0] = share

    return report


def _check_args(args: argparse.Namespace) -> None:
    """What can be refused before any work: the optimizer, ``--headroom`` with ``--memory``, the output paths."""
    OptimizerBytes.for_optimizer(args.optimizer, 1)
    if args.headroom is not None and args.memory is not None:
        raise InvalidInputError("--headroom does not apply with --memory: --memory is what a plan may use per GPU; "
                                "give one of them")
    output_path(args.plot, "--plot")
    output_path(args.trace, "--trace")


def run(args: argparse.Namespace) -> int:
    """Entry of ``pipeplan plan``."""
    check_export_args(args)
    _check_args(args)
    cluster = _cluster(args)
    if args.memory is not None and args.memory > cluster.device.memory_bytes:
        raise InvalidInputError(
            f"--memory {units.format_gib(args.memory)} is more than a {cluster.device.name} holds "
            f"({units.format_gib(cluster.device.memory_bytes)}): give at most that, a --gpu with more memory, or "
            "leave --memory out (the device's, less --headroom)")
    if args.profile is None and args.profile_micro_batch_size is not None:
        raise InvalidInputError("--profile-micro-batch-size does not apply without --profile "
                                "(it is the size a measured profile was taken at)")
    if args.profile is not None and args.mfu is not None:
        raise InvalidInputError("--mfu does not apply with --profile: a measured profile's times are measured, "
                                "not computed from FLOPs")
    # --mix, checked
    mix = plan_mix(args, lambda shaped: engine_workload(shaped, _workload(shaped, cluster), device=cluster.device.name))
    workload = engine_workload(args, _workload(args, cluster), device=cluster.device.name)
    check_export_model(args)
    schedules = None if args.schedules is None else [s.strip() for s in args.schedules.split(",")]
    if schedules is not None and not all(schedules):
        raise InvalidInputError(f"--schedules has an empty entry: {args.schedules!r}")
    headroom = DEFAULT_HEADROOM if args.headroom is None else args.headroom
    with progress(1.0, "searching plans") as advance:
        result = search(workload, cluster, args.global_batch, options := SearchOptions(
            pp=args.pp, micro_batch_size=args.micro_batch_size,
            schedules=schedules, memory_capacity=args.memory, optimizer=args.optimizer, send_mode=args.send,
            top=args.top, budget=args.budget, progress=_search_progress(advance),
            max_virtual_stages=args.max_virtual_stages, virtual_stages=args.virtual_stages, headroom=headroom,
            partition=None if args.partition is None else parse_partition(args.partition),
            tp=args.tp, dp_modes=None if args.dp_modes is None else data_parallel.parse_modes(args.dp_modes),
            sync=args.grad_sync, engine=args.engine, engine_costs=engine_costs(args),
            compiled_loss=compiles_loss(args.engine, given_knobs(args)),
        ))
    ties = tie_leaders([plan.step_time for plan in result.plans])
    ranking = mix.rank(result, cluster, options) if mix is not None else None  # --mix: searched and timed on drawn batches
    # --mix: --export, --plot and --trace follow the mix's best plan where it is not plan 1 (_plan_mix.py)
    on_mix = mix_export_choice(ranking, result, args.export) if ranking is not None and args.export else None
    _write_files(args, result, None if ranking is None else mix_pick(ranking))
    if args.json:
        payload = _payload(result, reference_names(args, result.best.num_layers), knobs=given_knobs(args))
        if args.export:  # the plan the export is written for: plan 1, the one the engine runs instead, or the mix's
            payload["export"] = _choice_dict(args, result, on_mix)
        for entry, tie in zip(payload["plans"], ties):
            entry["ties_with"] = tie
        print_json({**payload, "device": device_fields(cluster.device),
                    "assumptions": _assumptions(args, cluster), "shape": planned_shape(args),
                    "gemm_fallbacks": _gemm_fallbacks(args, cluster, result),
                    "error_band": _error_band(args, cluster).to_dict(),
                    **({"mix": {**ranking.to_dict(), "outputs_plan": (mix_pick(ranking) or 0) + 1}}
                       if ranking is not None else {})})
        return 0
    _print(args, result, ties, _capacity(args, cluster), on_mix)
    console = make_console()
    if ranking is not None:
        show_mix(console, ranking, args)
        note = mix_outputs_note(ranking, args)
        if note:
            console.print(note, markup=False, highlight=False)
    lines = _assumptions(args, cluster)
    console.print("assumptions: " + "; ".join(f"{key} {value}" for key, value in lines.items()),
                  markup=False, highlight=False)
    return 0


def _gemm_fallbacks(args: argparse.Namespace, cluster: Cluster, result: SearchResult) -> list[dict[str, list[int]]]:
    """The best plan's GEMM shapes a measured device table does not hold (none for a measured profile)."""
    if args.profile or not cluster.device.gemm_table:
        return []
    spec = spec_from_args(args)
    best = result.best
    kernels = [op for mode in set(best.recompute or ("none",))
               for cost in layer_costs(spec, best.micro_batch_size, recompute=mode) for op in cost.ops]
    return cluster.device.gemm_fallbacks(kernels)


_SENDS = {"eager": "eager (the sender goes on, torch isend)",
          "rendezvous": "rendezvous (a send waits for its receive)",
          "serialized": "serialized (each exchange on the sender's timeline: Megatron-LM's and DeepSpeed's default)"}


_SYNC_WORDS = {"megatron": "reduced after the pipeline, not overlapped (Megatron-LM's default)",
               "megatron-overlap": "reduced in buckets during the last backward (Megatron-LM --overlap-grad-reduce "
                                   "--overlap-param-gather)",
               "torch-ddp": "reduced in 25 MB buckets during the last backward (PyTorch DDP)"}


def _capacity(args: argparse.Namespace, cluster: Cluster) -> str:
    """The GPU's memory once, with and without headroom, or the given ``--memory``."""
    from ..planner.advice import capacity_text

    headroom = DEFAULT_HEADROOM if args.headroom is None else args.headroom
    return capacity_text(args.memory or 0.0, cluster.memory_bytes, headroom, args.memory is not None)


def _gradients_assumption(args: argparse.Namespace) -> str:
    """The ``gradients`` line: how each mode reduces (the engine's syncs where it prices them) and in which dtype."""
    costs = engine_costs(args)
    if costs is not None and costs.syncs:
        return (f"as {args.engine} reduces them (its knobs below; --grad-sync does not apply); fsdp gathers "
                "per layer with one layer prefetched, without a pipeline every microbatch")
    dtype = ("fp32/bf16" if costs is None or costs.reduce_bytes is None else
             "bf16" if costs.reduce_bytes == 2 else "fp32")
    return (f"ddp, zero1, zero2: {_SYNC_WORDS[args.grad_sync]} (zero1/zero2 reduce-scatter {dtype} gradients and "
            "all-gather bf16 weights); fsdp, hsdp: per layer with one layer prefetched (FSDP2), without a pipeline "
            "every microbatch")


def _assumptions(args: argparse.Namespace, cluster: Cluster) -> dict[str, str]:
    """What the plan's numbers assume, as printed and in ``--json``."""
    split = OptimizerBytes.for_optimizer(args.optimizer, 1)
    if args.optimizer == "adam":
        optimizer = ("mixed-precision Adam, bytes per trained parameter over d sharing ranks: ddp 2 + 2 + 12; "
                     "zero1 2 + 4 + 12/d; zero2 2 + 2/d + 12/d; fsdp 16/d plus the gathered layers (2 + 4/d + 2 + "
                     "12/d with a pipeline); hsdp as fsdp over a node's replicas")
    else:
        optimizer = (f"{args.optimizer} bytes per parameter: {split.weights:g} B weights + {split.gradients:g} B "
                     f"gradients + {split.optimizer:g} B state")
    shape = shape_note(args)
    engine = engine_assumptions(args, None if args.profile else spec_from_args(args), device=cluster.device.name)
    return {
        "device": (cluster.device.summary() if not args.profile else
                   f"layer times as measured in {args.profile} (on the machine that measured them: its GPUs or CPU "
                   f"cores), not {cluster.device.name}'s roofline, which sets only the memory per GPU and the links "
                   "between GPUs; this machine's calibration in the file (message cost, cores shared) is not "
                   "charged — simulate --profile and run --profile charge it"),
        "memory": f"{_capacity(args, cluster)} per GPU, in GiB (2^30 bytes) throughout",
        "optimizer": optimizer,
        "gradients": _gradients_assumption(args),
        "tensor parallel": engine.pop("tensor parallel"),  # the knobs' sentence (cli/_engine_args.py)
        "messages": _SENDS[args.send],
        "step": f"pipeline + exposed gradient reduction + optimizer step, {RESOLUTION_NOTE}",
        **engine,
        "virtual stages": (f"{args.virtual_stages} (given: --virtual-stages)" if args.virtual_stages is not None
                           else f"searched: 1..{args.max_virtual_stages} stages per rank for interleaved and adaptive "
                                "(--max-virtual-stages; give --virtual-stages to pin it)"),
        **defaults_assumption(args),
        **({"model shape": shape} if shape else {}),
    }


def _payload(result: SearchResult, names: Any = None, knobs: Any = None) -> dict[str, Any]:
    from ..engines import plan_exports

    payload = result.to_dict()
    for entry, plan in zip(payload["plans"], result.plans):
        entry["exports"] = plan_exports(plan, names, knobs=knobs)
    if result.baseline is not None:
        payload["baseline"]["exports"] = plan_exports(result.baseline, names, knobs=knobs)
    for entry, baseline in zip(payload["baselines"], result.baselines):
        if baseline.plan is not None:
            entry["exports"] = plan_exports(baseline.plan, names, knobs=knobs)
    best = result.best_baseline
    if best is not None and best.plan is not None:
        from ..planner.explain import explain

        payload["why"] = explain(result.best, best.plan, best.prose)
    return payload


def _choice_dict(args: argparse.Namespace, result: SearchResult, on_mix: Any = None) -> dict[str, Any]:
    """``--export``'s :class:`~pipeplan.planner.engine_choice.EngineChoice` with its plan's exports.

    ``on_mix``: the choice ``--mix`` made (:func:`~pipeplan.cli._plan_mix.mix_export_choice`), marked ``"on_mix"``.
    """
    from ..engines import plan_exports
    from ..planner.engine_choice import engine_choice

    refusal = model_refusal_of(args)
    if refusal:  # the engine runs no plan of this model (the text output refused before searching)
        return {"target": args.export, "plan_index": None, "plan": None, "why": refusal, "changes": []}
    choice = on_mix if on_mix is not None else engine_choice(result, args.export)
    entry = {**choice.to_dict(), "on_mix": on_mix is not None}
    entry["plan"]["exports"] = plan_exports(choice.plan, reference_names(args, choice.plan.num_layers),
                                            knobs=given_knobs(args))
    return entry


def show_plans(console: Any, result: SearchResult, *, title: str, capacity: str | None = None,
               ties: list[int | None] | None = None) -> None:
    """The ranked table, its legend (ties marked) and the partitions it cut, as ``plan`` and ``demo`` print them."""
    from ..viz import plan_table
    from ..viz.plans import full_partitions, plan_legend, split_note

    ties = tie_leaders([plan.step_time for plan in result.plans]) if ties is None else ties
    table = plan_table(result, title=title, ties=ties, width=console.width)
    console.print(table)
    for line in [*filter(None, [split_note(table)]), *plan_legend(result, capacity=capacity, ties=ties)]:
        console.print(line, markup=False, highlight=False)
    partitions = full_partitions(result, width=console.width)
    if partitions:
        console.print("partitions in full (layers per rank, rank 0 first):", markup=False, highlight=False)
        for line in partitions:
            console.print("  " + line, markup=False, highlight=False, soft_wrap=True)


def _print(args: argparse.Namespace, result: SearchResult, ties: list[int | None], capacity: str,
           on_mix: Any = None) -> None:
    from ..engines import by_target
    from ..planner.engine_choice import engine_choice
    from ..viz import text_gantt
    from ..viz.plans import show_choice
    from ..units import format_figures

    if args.export:  # before anything is printed: a plan the engine cannot run is one line
        engine = by_target(args.export)
        choice = on_mix if on_mix is not None else engine_choice(result, args.export)
        plan = choice.plan
        files = engine.export(plan, args.export, reference_names(args, plan.num_layers),
                              gpus_per_node=args.gpus_per_node, knobs=given_knobs(args))
    console = make_console()
    stats = result.stats
    best = result.best
    model = args.preset or args.spec or args.profile
    device = args.device or args.gpu
    show_plans(console, result, title=f"{model} on {args.gpus} × {device}, global batch {args.global_batch}",
               capacity=capacity, ties=ties)
    console.print(_headline(result), markup=False, highlight=False)
    console.print(_error_band(args, _cluster(args)).line(), markup=False, highlight=False)
    status = "complete" if stats.complete else (
        f"stopped by --budget {args.budget:g} CPU s after {stats.examined} of {stats.candidates} candidates "
        f"({stats.examined_share:.0%}); none left unexamined beats {format_figures(stats.unexamined_bound or 0.0)} ms"
        f"{'' if (best.step_time or 0.0) < (stats.unexamined_bound or 0.0) else ', so a longer search may find faster'}"
        ": the best plans so far")
    console.print(
        f"search {status}: {stats.candidates} candidates, {stats.partitions} exact partitions, "
        f"{stats.simulated} simulated, {stats.pruned} pruned by bounds, {stats.rejected} over memory, "
        f"{stats.seconds:.2f} s; lower bound {format_figures(result.lower_bound)} ms "
        f"(best is {(best.step_time or 0.0) / result.lower_bound:.2f}× it)"
    )
    if best.timeline is not None and best.pp > 1:  # pp = 1 has no pipeline to draw
        console.print(f"[bold]best plan's step[/bold] (one pipeline of {best.pp} ranks; ms)")
        console.print(text_gantt(best.timeline, width=gantt_width(console.width, best.pp), wider="--plot",
                                 columns=console.width), markup=False, highlight=False)
    if args.export:
        (show_mix_choice if on_mix is not None else show_choice)(console, choice, result.ratio_to_best_baseline(plan))
        emit_export(args, files)
        for note in engine.notes(plan, reference_names(args, plan.num_layers)):
            console.print(f"note: {note}")


def _error_band(args: argparse.Namespace, cluster: Cluster) -> ErrorBand:
    """How far the step model is from published runs on this device and engine, for this kind of model."""
    from .. import engines

    gpt = not args.profile and not engines.get("megatron").model_refusal(spec_from_args(args))
    return error_band(cluster.device.name, args.engine or DEFAULT_ENGINE, gpt=gpt,
                      measured_profile=bool(args.profile))


def _headline(result: SearchResult) -> str:
    """The best plan against the best baseline that fits, and why (one line)."""
    from ..planner.explain import explain

    best = result.best_baseline
    if best is None or best.plan is None:
        names = ", ".join(f"{b.name} ({b.note})" for b in result.baselines)
        return f"best plan: no baseline fits ({names})"
    return "best plan: " + explain(result.best, best.plan, best.prose)


def _write_files(args: argparse.Namespace, result: SearchResult, pick: int | None = None) -> None:
    """The best plan's ``--plot`` and ``--trace``, each reported ``wrote PATH`` on stderr.

    ``pick``: the 0-based plan to draw instead of plan 1 (``--mix``'s best, :func:`~pipeplan.cli._plan_mix.mix_pick`).
    """
    best = result.best if pick is None else result.plans[pick]
    if best.timeline is None:
        return
    if args.plot:
        from ..viz.plot import plot_plan

        which = "plan 1" if pick is None else f"plan {pick + 1}, the fastest on the mix"
        plot_plan(best, args.plot, title=f"{args.preset or args.spec or args.profile}: {which}")
        report_written(args.plot)
    if args.trace:
        from ..viz import write_trace

        write_trace(best.timeline, args.trace)
        report_written(args.trace)
