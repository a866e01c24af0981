"""``pipeplan simulate``: simulate one step of a schedule on per-stage costs.

    $ pipeplan simulate --forward 30,10,10,20 -m 8 --schedule 1f1b
    $ pipeplan simulate --forward 30,10,10,20 -m 8 --send rendezvous --comm-latency 1 --json
    $ pipeplan simulate --forward 1,1,1 --backward 1,1,1 -m 4 --schedule gpipe --step-table
    $ pipeplan simulate --forward 30,10,10,20 -m 8 --schedule zb-h2 --iterations 6 --step-boundary overlap
    $ pipeplan simulate --forward 30,4 --update 1,0.5 -m 64 --schedule dual-rate --rate-ratio 4
    $ pipeplan simulate --profile prof.json --partition 6,4 -m 8 --schedule zb-h1
    $ pipeplan simulate --preset gpt-1.5b --gpu a100-80g --micro-batch-size 6 --stages 8 -m 24 --schedule zb-h1
    $ pipeplan simulate --preset pi0 --stages 4 --partition auto --mix examples/mix_cameras.csv
    $ pipeplan simulate --forward 30,10,10,20 -m 8 --schedules all      # every schedule on the same 4 ranks

Times are milliseconds per microbatch. Prints a per-rank Gantt and a table of busy
time, idle time by cause and peak in-flight activations (of the first step), and with
``--iterations`` the steady-state step time of back-to-back steps. ``-m`` defaults to
twice the pipeline ranks. ``--json`` prints every action only up to
:data:`JSON_ACTIONS_LIMIT` actions (or with ``--actions``); past it, the summary
(makespan, bubble, per-rank metrics) and a note on stderr. A size that cannot
fit in memory is refused up front (:mod:`pipeplan.limits`); a long run shows a progress bar.
With ``--profile`` (a file from ``pipeplan profile``) the stage costs come from the
profile's layers summed over ``--partition`` and the step is predicted as ``pipeplan
run`` would measure it (:func:`pipeplan.predict.predict`: the profile's calibrated
messages and core sharing). With ``--preset`` or ``--spec`` the layers come from the
model's shapes on ``--gpu`` (or a ``--device`` file) through the cost model
(docs/cost_model.md), and each cut's activation crosses the GPU's NVLink (or the
file's measured link) at NCCL's point-to-point rate.
``--mix FILE`` (with ``--preset`` or ``--spec``) adds the expected step over global batches drawn
from a shape mix, random vs balanced microbatches (:mod:`pipeplan.batches.pipeline`), and
one drawn batch simulated with each microbatch at its own costs (with messages), its
idle time per rank split into the schedule's bubble and the variation
(:func:`pipeplan.variation.idle_split`).
``--schedules all|A,B,...`` compares schedules on the same ranks instead, one row each with
the best marked (:mod:`._simulate_compare`). The Gantt, the tables and the files are
:mod:`._simulate_output`'s.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from .. import presets, units
from .._validation import positive_int
from ..costs import CommModel, StageCosts
from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..limits import check_gantt_size
from ..schedule import Schedule
from ..schedules import SCHEDULES, backward_mode, build_schedule, check_schedule_size, schedule_info, schedule_options
from ..dualrate.metrics import dual_rate_metrics
from ..schedules.dual_rate import DualRateSchedule
from ..simulate import OPTIMIZER_MODES, simulate
from ..timeline import Timeline
from . import dual_rate_cmd
from ._engine_args import REFERENCE, engine_assumptions, layer_options, spec_workload
from ._simulate_compare import add_schedules_argument
from ._simulate_output import mix_batch_lines, show_timeline, write_outputs
from ._spec_args import add_spec_arguments, device_from_args, settle_spec_options, spec_from_args, uses_spec
from ._common import (
    default_microbatches,
    renamed_flag,
    float_list,
    make_console,
    output_path,
    print_json,
    progress,
    refuse_unless,
    text_width,
)

__all__ = ["register", "add_cost_arguments", "costs_from_args", "comm_from_args", "schedule_from_args",
           "size_list", "memory_limit", "ByteSize", "microbatches_of", "JSON_ACTIONS_LIMIT"]

JSON_ACTIONS_LIMIT = 20_000
"""The most actions ``--json`` lists without ``--actions`` (about 4 MB of JSON); past it, the summary."""


def size_list(flag: str) -> Any:
    """An argparse type for comma-separated sizes in bytes: bare (``4e9``) or with a unit (``2GiB,512MiB``)."""
    numbers = float_list(flag)

    def parse(text: str) -> list[float]:
        try:
            return numbers(text)  # bare numbers: the costs' own checks name a negative or infinite one
        except argparse.ArgumentTypeError:
            if any(not part.strip() for part in text.split(",")):
                raise
        try:
            return [units.parse_bytes(part, flag=flag) for part in text.split(",")]
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


class ByteSize(float):
    """A ``--memory-limit``: bytes written with a unit (``12GB``: ``unit`` set), or a bare microbatch count."""

    unit: str = ""


def memory_limit(text: str) -> ByteSize:
    """``--memory-limit``: a size with its unit (``12GiB``: bytes) or a bare integer (``4``: microbatches).

    The result remembers its unit (:class:`ByteSize`); a bare number that is no whole count is refused.
    """
    stripped = text.strip()
    try:
        count = float(stripped)
    except ValueError:
        try:
            size = ByteSize(units.parse_bytes(stripped, flag="--memory-limit", require_unit=True))
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        size.unit = stripped.lstrip("0123456789.eE+- ")
        return size
    if not math.isfinite(count):
        raise argparse.ArgumentTypeError(
            f"--memory-limit must be a finite size with its unit (e.g. 12GiB) or a whole count of microbatches "
            f"(e.g. 4), got {stripped!r}; leave it out for no limit")
    if not (count >= 1 and count == int(count)):
        raise argparse.ArgumentTypeError(
            f"--memory-limit {stripped} has no unit, so it is a count of microbatches in flight per rank, "
            f"a whole number >= 1; for a size write it with a unit, e.g. {stripped}GiB")
    return ByteSize(count)


def register(subparsers: Any) -> None:
    """Add the ``simulate`` verb."""
    parser = subparsers.add_parser(
        "simulate",
        help="simulate a schedule on unequal stage costs",
        description="Simulate one training step of a pipeline schedule on per-stage costs (ms per microbatch).",
    )
    add_cost_arguments(parser)
    parser.add_argument("--json", action="store_true",
                        help="print the timeline as JSON (instead of the text views): every action up to "
                             f"{JSON_ACTIONS_LIMIT:,} actions, the summary past that")
    parser.add_argument("--actions", action="store_true",
                        help="with --json: list every action and idle interval, however many (the summary "
                             "alone otherwise, past the limit)")
    parser.add_argument("--plot", metavar="PATH", help="draw the Gantt and memory to a PNG/SVG file")
    parser.add_argument("--trace", metavar="PATH", help="write a Chrome/Perfetto trace JSON file")
    parser.add_argument("--step-table", action="store_true",
                        help="also print the unit-step table (T=0: S0: F0(0) | ...); text output only")
    parser.add_argument("--width", type=int, default=None,
                        help="text Gantt width in characters (default 100, less where the terminal or COLUMNS is "
                             "narrower, so each line fits it); text output only")
    parser.add_argument("--iterations", type=int, default=1,
                        help="training steps played back to back (default 1); reports the steady step time")
    parser.add_argument("--step-boundary", choices=OPTIMIZER_MODES, default=None,
                        help="with --iterations: what happens between steps: barrier (every rank waits for "
                             "the slowest; default) or overlap (each rank goes on when its own part is done)")
    dual_rate_cmd.add_rate_arguments(parser)
    add_spec_arguments(parser)
    parser.add_argument("--mix", metavar="FILE", default=None,
                        help="with --preset or --spec: a shape mix (CSV or JSON: shape fields such as cameras, then count or "
                             "weight); also prints the expected step over drawn batches, and one drawn batch simulated with "
                             "each microbatch at its own costs, its idle split into the schedule's bubble and the "
                             "variation (docs/uneven_batches.md)")
    add_schedules_argument(parser)
    renamed_flag(parser, "--steps", "--step-table", "the unit-step table; --steps N is a count of steps in run")
    renamed_flag(parser, "--optimizer", "--step-boundary", "barrier or overlap between steps; --optimizer is the "
                 "optimizer state in plan and partition")
    parser.set_defaults(func=run)


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments that describe costs, communication and the schedule (shared with other verbs)."""
    parser.add_argument("--forward", type=float_list("--forward"),
                        help="forward time per stage, ms, comma-separated (e.g. 30,10,10,20)")
    parser.add_argument("--profile", metavar="PATH",
                        help="a layer profile (.json/.csv from pipeplan profile) instead of --forward ...")
    parser.add_argument("--partition", default=None, metavar="auto|even|A,B,...",
                        help="with --profile: layers per stage (e.g. 6,4), 'even' or 'auto' "
                             "(balanced; default) with --stages")
    parser.add_argument("--stages", type=int, default=None,
                        help="with --profile and an even/auto partition: the number of stages")
    parser.add_argument("--backward", type=float_list("--backward"),
                        help="full backward time per stage, ms (default: twice the forward)")
    parser.add_argument("--weight", type=float_list("--weight"),
                        help="weight-gradient part of the backward per stage, ms (default: half the backward)")
    parser.add_argument("--update", type=float_list("--update"),
                        help="optimizer update time per stage, ms (default 0; only dual-rate runs U)")
    parser.add_argument("--activation-bytes", type=size_list("--activation-bytes"), metavar="SIZES",
                        help="activation size per microbatch per stage, bytes or with a unit (e.g. 2GiB,512MiB); "
                             "default: none, so memory figures count microbatches")
    parser.add_argument("-m", "--microbatches", type=int, default=None,
                        help="microbatches per step (default: twice the pipeline ranks; dual-rate: rounded up "
                             "to whole frames)")
    parser.add_argument("--schedule", default="1f1b", help=f"one of {', '.join(SCHEDULES)} (default 1f1b)")
    parser.add_argument("--virtual-stages", type=int, default=None,
                        help="chunks per rank for interleaved schedules")
    parser.add_argument("--memory-limit", type=memory_limit, default=None, metavar="SIZE|COUNT",
                        help="activation memory per rank for the adaptive schedule: a size with its unit "
                             "(e.g. 12GiB; needs --activation-bytes), or a bare integer, a count of "
                             "microbatches in flight (e.g. 4; without --activation-bytes)")
    parser.add_argument("--objective", choices=("makespan", "span"), default=None,
                        help="what the adaptive schedule minimises: the step's makespan (the optimizer waits "
                             "for every rank; default) or the largest per-rank span (each rank steps on its own)")
    parser.add_argument("--forward-only", action="store_true", help="simulate only the forward pass")
    parser.add_argument("--comm-latency", type=units.argparse_type(units.parse_ms, "--comm-latency"), default=0.0,
                        metavar="TIME", help="time per message between ranks: ms (0.5), or with a unit (20us, "
                                             "0.5ms); default 0")
    parser.add_argument("--comm-bandwidth", type=units.argparse_type(units.parse_bandwidth, "--comm-bandwidth"),
                        default=None, metavar="RATE",
                        help="bandwidth between ranks with its unit, e.g. 25GB/s or 200Gbit/s, with "
                             "--boundary-bytes (default: unbounded)")
    parser.add_argument("--boundary-bytes", type=size_list("--boundary-bytes"), default=None, metavar="SIZES",
                        help="message size per stage boundary, bytes or with a unit (e.g. 64MiB; one size "
                             "or S-1 sizes)")
    parser.add_argument("--send", choices=("eager", "rendezvous"), default="eager",
                        help="eager: senders never wait; rendezvous: blocking P2P (default eager)")


def costs_from_args(args: argparse.Namespace) -> StageCosts:
    """The StageCosts the arguments describe; refuses cost flags the schedule would ignore."""
    if args.schedule in SCHEDULES:
        if args.forward_only:
            for flag, value in (("--backward", args.backward), ("--weight", args.weight),
                                ("--activation-bytes", args.activation_bytes)):
                refuse_unless(value is None, flag, "with --forward-only (a forward-only step has no "
                                                   "backward and holds no activations)")
        splits = backward_mode(args.schedule) == "split"
        refuse_unless(args.weight is None or splits, "--weight",
                      f"to schedule {args.schedule!r}: it runs the full backward in one piece "
                      "(use zb-h1, zb-h2, zb-v or adaptive)")
    limit = getattr(args, "memory_limit", None)
    if isinstance(limit, ByteSize) and limit.unit and args.activation_bytes is None:
        raise InvalidInputError(
            f"--memory-limit {units.format_gib(limit)} is a size and needs --activation-bytes: without them "
            "each microbatch counts 1, so the limit is a bare count of microbatches (e.g. --memory-limit 4)"
        )
    if isinstance(limit, ByteSize) and not limit.unit and args.activation_bytes is not None:
        raise InvalidInputError(
            f"--memory-limit {limit:g} has no unit, so it counts microbatches, but --activation-bytes makes "
            f"memory bytes: write the limit as a size, e.g. --memory-limit {limit:g}GiB"
        )
    return StageCosts(args.forward, args.backward, args.weight, args.activation_bytes,
                      update=getattr(args, "update", None))


def comm_from_args(args: argparse.Namespace) -> CommModel:
    """The CommModel the arguments describe."""
    sizes: Any = 0.0
    if args.boundary_bytes:
        sizes = args.boundary_bytes[0] if len(args.boundary_bytes) == 1 else args.boundary_bytes
    refuse_unless(args.comm_bandwidth is None or bool(args.boundary_bytes), "--comm-bandwidth",
                  "without --boundary-bytes (messages have no size, so bandwidth costs nothing)")
    refuse_unless(not args.boundary_bytes or args.comm_bandwidth is not None, "--boundary-bytes",
                  "without --comm-bandwidth (an infinite link sends any size in no time)")
    bandwidth = float("inf") if args.comm_bandwidth is None else args.comm_bandwidth
    return CommModel(args.comm_latency, bandwidth, sizes, args.send)


def schedule_from_args(args: argparse.Namespace, costs: StageCosts, comm: CommModel) -> Schedule:
    """Build the named schedule, passing only the options its generator takes."""
    if args.schedule not in SCHEDULES:
        raise InvalidInputError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {args.schedule!r}")
    accepted = schedule_options(args.schedule)
    offered: dict[str, Any] = {"costs": costs, "comm": comm}
    if args.virtual_stages is not None:
        if "virtual_stages" not in accepted:
            raise InvalidInputError(f"--virtual-stages does not apply to schedule {args.schedule!r}")
        offered["virtual_stages"] = args.virtual_stages
    if args.memory_limit is not None:
        if "memory_limit" not in accepted:
            raise InvalidInputError(f"--memory-limit does not apply to schedule {args.schedule!r}")
        offered["memory_limit"] = args.memory_limit
    if args.objective is not None:
        if "objective" not in accepted:
            raise InvalidInputError(f"--objective does not apply to schedule {args.schedule!r}")
        offered["objective"] = args.objective
    if args.forward_only:
        refuse_unless("backward" in accepted, "--forward-only", f"to schedule {args.schedule!r}")
        offered["backward"] = "none"
    for key, value in dual_rate_cmd.rate_options(args).items() if hasattr(args, "rate_ratio") else ():
        if key not in accepted:
            raise InvalidInputError(f"--{key.replace('_', '-')} does not apply to schedule {args.schedule!r}")
        offered[key] = value
    options = {key: value for key, value in offered.items() if key in accepted}
    return build_schedule(args.schedule, num_stages=costs.num_stages, num_microbatches=args.microbatches, **options)


def _microbatches_name(args: argparse.Namespace) -> str:
    """``-m`` as a size check names it; with ``--rate-ratio`` (dual-rate: -m in whole frames of it) that too."""
    return "-m (whole frames of --rate-ratio)" if getattr(args, "rate_ratio", None) is not None else "-m"


def microbatches_of(args: argparse.Namespace, num_stages: int) -> int:
    """``-m`` as given, else twice the pipeline ranks the schedule puts ``num_stages`` stages on.

    Ranks are stages over chunks per rank (``--virtual-stages`` for interleaved, whose default is 2;
    two for zb-v); dual-rate rounds up to whole frames of ``--rate-ratio`` steps.
    """
    if args.microbatches is not None or args.schedule not in SCHEDULES:  # an unknown name fails later
        return default_microbatches(args.microbatches, num_stages)
    info = schedule_info(args.schedule)
    frames = dual_rate_cmd.rate_options(args).get("rate_ratio", 4) if info.updates_in_step else 1
    return default_microbatches(None, num_stages // chunks_per_rank(args), multiple=int(frames))


def chunks_per_rank(args: argparse.Namespace) -> int:
    """Stages each pipeline rank holds under ``--schedule``: ``--virtual-stages`` for interleaved (default 2)
    and for a schedule of any placement; the schedule's own count otherwise (two for zb-v)."""
    info = schedule_info(args.schedule)
    virtual = args.virtual_stages if isinstance(args.virtual_stages, int) and args.virtual_stages > 0 else None
    loop = info.layout == "loop" or (info.any_placement and (virtual or 1) > 1)
    return (virtual or 2) if info.layout == "loop" else (virtual or 1) if loop else info.chunks_per_rank()


def check_size(args: argparse.Namespace, num_stages: int) -> int:
    """Refuse up front a step (or Gantt) too large for this machine's memory; returns its actions."""
    micro = positive_int("-m/--microbatches", args.microbatches)
    backward = "none" if args.forward_only else backward_mode(args.schedule)
    if not args.json:
        check_gantt_size(args.width, num_stages, field="--width")
    return check_schedule_size(args.schedule, num_stages=num_stages, num_microbatches=micro,
                               backward=backward, simulated=True, names=("stages", _microbatches_name(args)))


def _profile_partition(args: argparse.Namespace, profile: LayerProfile) -> list[int]:
    """Layers per stage from ``--partition`` / ``--stages`` for a profile."""
    from ..partition.choice import parse_partition, resolve_partition

    text = args.partition or "auto"
    parts = parse_partition(text, example="6,4")
    if isinstance(parts, str):
        if args.stages is None:
            raise InvalidInputError(f"--partition {text} needs --stages N (the number of stages)")
        stages = positive_int("--stages", args.stages)
        if stages > profile.num_layers:
            raise InvalidInputError(f"--stages must be <= the profile's {profile.num_layers} layers, got {stages}")
        return resolve_partition(parts, profile, stages)
    if args.stages is not None and args.stages != len(parts):
        raise InvalidInputError(f"--partition has {len(parts)} stages but --stages says {args.stages}")
    if any(part < 1 for part in parts) or sum(parts) != profile.num_layers:
        raise InvalidInputError(
            f"--partition must be counts >= 1 adding up to the profile's {profile.num_layers} layers, got {text!r}"
        )
    return parts


def run(args: argparse.Namespace) -> int:
    """Entry of ``pipeplan simulate``."""
    settle_spec_options(args, applies=uses_spec(args), what="--profile" if args.profile else "--forward")
    if args.schedules is not None:
        from ._simulate_compare import run_compare

        return run_compare(args, costs_of=costs_from_args, comm_of=comm_from_args)
    text_width(args)
    if args.json:
        refuse_unless(not args.step_table, "--step-table", "with --json (it adds a table to the text output)")
    else:
        refuse_unless(not args.actions, "--actions", "without --json (it lists every action in the JSON)")
    refuse_flags_without_effect(args)
    output_path(args.plot, "--plot")
    output_path(args.trace, "--trace")
    sources = [flag for flag, given in (("--forward", args.forward is not None), ("--profile", args.profile),
                                        ("--preset/--spec", uses_spec(args))) if given]
    if len(sources) > 1:
        raise InvalidInputError(f"give one of --forward, --profile or --preset/--spec, got {' and '.join(sources)}")
    if getattr(args, "mix", None) is not None and not uses_spec(args):
        if args.profile:
            from ..batches.mix import read_mix
            from ._mix_model import check_mix_model

            check_mix_model(args, read_mix(args.mix))  # a profile is measured at one shape: one line
        raise InvalidInputError("--mix applies to --preset or --spec (a model whose shapes it varies), not to "
                                f"{' and '.join(sources) or '--forward'}")
    if args.profile is not None or uses_spec(args):
        return _run_profile(args)
    if args.forward is None:
        raise InvalidInputError("give --forward (stage times, ms), --profile (a layer profile file) "
                                "or --preset/--spec (a model from shapes)")
    if args.partition is not None or args.stages is not None:
        raise InvalidInputError("--partition and --stages apply only with --profile or --preset/--spec "
                                "(with --forward the stages are its entries)")
    costs = costs_from_args(args)
    if args.schedule in SCHEDULES and costs.num_stages % chunks_per_rank(args):
        chunks = chunks_per_rank(args)
        why = " (--virtual-stages)" if "virtual_stages" in schedule_options(args.schedule) else ""
        raise InvalidInputError(f"--forward gives {costs.num_stages} stage(s): {args.schedule} puts {chunks} on "
                                f"each rank{why}, so give a multiple of {chunks} stage times")
    comm = comm_from_args(args)
    args.microbatches = microbatches_of(args, costs.num_stages)
    actions = check_size(args, costs.num_stages) if args.schedule in SCHEDULES else 0
    iterations = args.iterations if isinstance(args.iterations, int) and args.iterations > 0 else 1
    with progress((3 + iterations) * actions, f"{args.schedule}: building {actions:,} actions") as advance:
        schedule = schedule_from_args(args, costs, comm)
        advance(actions, "simulating")
        timeline = simulate(schedule, costs, comm, iterations=args.iterations, optimizer=args.step_boundary)
        advance(iterations * actions, "writing outputs")
        write_outputs(timeline, args)
        advance(actions, "drawing")
        dual = isinstance(schedule, DualRateSchedule)
        if args.json:
            payload = timeline_payload(timeline, args)
            if dual:
                payload["dual_rate"] = dual_rate_metrics(timeline).to_dict()
            print_json(payload)
        else:
            show_timeline(timeline, width=args.width, step_table=args.step_table,
                          activation_sizes=args.activation_bytes is not None)
            if dual:
                for line in dual_rate_cmd.simulate_lines(timeline, costs, comm):
                    print(line)
    if schedule.num_stages > schedule.num_ranks:  # the stage times became chunks: fewer ranks than times
        print(f"note: --forward's {schedule.num_stages} stage times ran as {schedule.num_stages // schedule.num_ranks} "
              f"chunks on each of {schedule.num_ranks} ranks under {args.schedule}; to compare schedules on the same "
              f"ranks: --schedules 1f1b,{args.schedule}", file=sys.stderr)
    return 0


def refuse_flags_without_effect(args: argparse.Namespace) -> None:
    """Refuse ``--update`` off dual-rate and ``--step-boundary`` for a single step; default the boundary."""
    updates = args.schedule in SCHEDULES and schedule_info(args.schedule).updates_in_step
    refuse_unless(getattr(args, "update", None) is None or updates, "--update",
                  f"to schedule {args.schedule!r} (only dual-rate runs the optimizer update U inside the step)")
    if args.step_boundary is not None:
        refuse_unless(args.iterations != 1, "--step-boundary",
                      "with one step (it sets what happens between steps; add --iterations N > 1)")
    args.step_boundary = "barrier" if args.step_boundary is None else args.step_boundary


def timeline_payload(timeline: Timeline, args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """``--json``'s object: every action up to :data:`JSON_ACTIONS_LIMIT` (or with ``--actions``), else the summary.

    A summarised payload says so (``"actions_listed": false`` and the count) and a note on stderr
    names ``--actions``.
    """
    count = timeline.schedule.num_actions
    full = bool(getattr(args, "actions", False)) or count <= JSON_ACTIONS_LIMIT
    payload = timeline.to_dict() if full else timeline.summary()
    payload["num_actions"] = count
    payload["actions_listed"] = full
    payload["step_boundary"] = payload.pop("optimizer")  # the flag's name (--step-boundary), not the simulator's
    if getattr(args, "activation_bytes", None) is None and not getattr(args, "profile", None) \
            and not getattr(args, "preset", None) and not getattr(args, "spec", None):
        for rank in payload["ranks"]:  # no sizes given: its bytes would be a count of microbatches
            rank.pop("peak_bytes", None)
    if not full:
        print(f"--json: {count:,} actions, more than {JSON_ACTIONS_LIMIT:,}: printing the summary (makespan, "
              "bubble, per-rank metrics); add --actions for every action", file=sys.stderr)
    payload.update(extra)
    return payload


def _run_profile(args: argparse.Namespace) -> int:
    """``--profile`` (or ``--preset``/``--spec``): one step from per-layer costs.

    With ``--profile``, the step :func:`pipeplan.predict.predict` expects ``pipeplan run`` to measure.
    """
    from ..predict import predict, prediction_inputs

    source = "--profile" if args.profile is not None else "--preset/--spec"
    for flag, value in (("--backward", args.backward), ("--weight", args.weight),
                        ("--activation-bytes", args.activation_bytes), ("--boundary-bytes", args.boundary_bytes)):
        if value is not None:
            raise InvalidInputError(f"{flag} does not apply with {source} (the layers hold the costs)")
    if args.iterations != 1:
        raise InvalidInputError(
            f"--iterations does not apply with {source} (it simulates one step), got {args.iterations}"
        )
    if uses_spec(args):
        return _run_spec(args)
    profile = LayerProfile.from_file(args.profile)
    layers = _profile_partition(args, profile)
    costs, comm = prediction_inputs(profile, layers)
    args.microbatches = microbatches_of(args, costs.num_stages)
    check_size(args, costs.num_stages)
    schedule = schedule_from_args(args, costs, comm)
    from .profile_cmd import warn_profile_load

    warn_profile_load(profile, args.profile)  # accepted: say if its core sharing was measured under load
    timeline = predict(profile, schedule, layers)
    write_outputs(timeline, args)
    if args.json:
        print_json(timeline_payload(timeline, args, layers_per_stage=layers))
        return 0
    calibration = profile.calibration
    make_console().print(
        f"profile {args.profile}: layers per stage {layers}; "
        + ("no calibration (free messages, a core per rank)" if calibration is None else
           f"calibrated messages {calibration.latency:.3f} ms + bytes / {units.format_bandwidth(calibration.bandwidth)}, "
           f"core sharing x{calibration.slowdown_for(schedule.num_ranks):.2f} with {schedule.num_ranks} busy"),
        markup=False, highlight=False,
    )
    show_timeline(timeline, width=args.width, step_table=args.step_table)
    return 0


def _run_spec(args: argparse.Namespace) -> int:
    """``--preset``/``--spec``: the step on the cost model's layer times, messages at the link's NCCL rate."""
    from ..hardware import intra_node_link
    from ..hardware.device_file import device_fields

    spec = spec_from_args(args)
    device, measured = device_from_args(args)
    workload = spec_workload(args, spec, device, measured)
    profile = workload.profile(args.micro_batch_size)  # as plan prices it
    layers = _profile_partition(args, profile)
    costs = workload.stage_costs(args.micro_batch_size, None, layers)  # Megatron's block:N per stage, as plan does
    link = measured or intra_node_link(device.name)
    comm = link.comm_model(list(profile.boundary_bytes(layers)) or 0.0, send_mode=args.send)
    args.microbatches = microbatches_of(args, costs.num_stages)
    check_size(args, costs.num_stages)
    schedule = schedule_from_args(args, costs, comm)
    mix_costs = _mix_costs(args, spec, device) if getattr(args, "mix", None) else None
    timeline = simulate(schedule, costs, comm)
    write_outputs(timeline, args)
    mix = batch = None
    if mix_costs is not None:
        from ..batches.pipeline import mix_batch_step, mix_pipeline_step

        mix = mix_pipeline_step(mix_costs, layers, args.microbatches, args.micro_batch_size, schedule=args.schedule)
        batch = mix_batch_step(mix_costs, layers, args.microbatches, args.micro_batch_size, schedule=schedule,
                               comm=comm, activation_bytes=costs.activation_bytes)
    if args.json:
        extra = {} if mix is None or batch is None else {"mix": {**mix.to_dict(), "batch": batch.to_dict()}}
        print_json(timeline_payload(timeline, args, layers_per_stage=layers, device=device_fields(device),
                                    link=link.name,
                                    assumptions=engine_assumptions(args, spec, REFERENCE, device=device.name), **extra))
        return 0
    make_console().print(f"{spec.name}: layers per stage {layers}; cost model: {device.summary()}; messages over "
                         f"{link.name} ({link.latency_ms:g} ms + bytes / {units.format_bandwidth(link.bandwidth / 1e3)})",
                         markup=False, highlight=False)
    show_timeline(timeline, width=args.width, step_table=args.step_table)
    if mix is not None and batch is not None:
        print(f"--mix {args.mix}: step over {mix.draws} drawn batches, no message time (ms): mean sample "
              f"{mix.mean_sample_ms:.1f}; random microbatches {mix.random_mean_ms:.1f} (p95 {mix.random_p95_ms:.1f}); "
              f"balanced {mix.balanced_mean_ms:.1f} (p95 {mix.balanced_p95_ms:.1f}); busiest stage's work "
              f"{mix.bound_mean_ms:.1f}")
        for line in mix_batch_lines(batch):
            print(line)
    return 0


def _mix_costs(args: argparse.Namespace, spec: Any, device: Any) -> Any:
    """``--mix FILE``: each mix row's per-sample costs, the model as simulated (:mod:`pipeplan.batches.mix`)."""
    from ..batches.mix import mix_costs, read_mix
    from ._mix_model import check_mix_model, mix_namespace

    info = schedule_info(args.schedule) if args.schedule in SCHEDULES else None
    if info is None or info.layout != "one" or info.default_backward != "full" or args.forward_only:
        raise InvalidInputError(f"--mix simulates schedules of one stage per rank with full backwards (1f1b, "
                                f"gpipe, ...), not --schedule {args.schedule}")
    mix = read_mix(args.mix)
    check_mix_model(args, mix)  # a field the preset or the spec file lacks: one line naming the mix file

    def shaped(**shape: Any) -> Any:  # the model as simulated (--freeze, the shape flags), at one mix row's shape
        return spec_from_args(mix_namespace(args, shape))

    shaped.__name__ = args.preset or spec.name
    return mix_costs(shaped, mix, device=device, micro_batch_size=args.micro_batch_size,
                     **layer_options(args, spec))
