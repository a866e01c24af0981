"""``pipeplan simulate --schedules all|A,B,...``: every schedule on the same ranks, the best marked.

    $ pipeplan simulate --forward 30,10,10,20 -m 8 --schedules all
    $ pipeplan simulate --forward 30,10,10,20 -m 8 --schedules 1f1b,interleaved,zb-v --virtual-stages 3 --json
    $ pipeplan simulate --profile prof.json --stages 2 --schedules all

The CLI side of :func:`pipeplan.partition.schedule_compare.compare_schedules`: it reads
the costs as ``simulate`` does (``--forward``: one stage per rank, so the ranks are
its entries; ``--profile``/``--preset``/``--spec``: the ranks are ``--stages`` or
``--partition``'s entries), prints one row per schedule (a schedule that cannot run
this shape says why beneath the table) and, with ``--json``, the rows.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable
from typing import Any

from .. import units
from .._validation import positive_int
from ..costs import CommModel, StageCosts
from ..errors import InvalidInputError
from ..partition.schedule_compare import DEFAULT_VIRTUAL_STAGES, ScheduleComparison, compare_schedules
from ..schedules import SCHEDULES, schedule_info
from ..viz.tables import format_time
from ._common import default_microbatches, make_console, print_json, refuse_unless

__all__ = ["add_schedules_argument", "run_compare", "parse_schedules", "comparison_lines"]

#: What the table's columns mean, printed once beneath it.
LEGEND = ("(N): see note N, why it did not run · step: the simulated step (makespan) · bubble ratio: the share of all ranks' time spent idle, "
          "1 − busy / (ranks × step) · in-flight: the most microbatches (of a chunk) a rank holds · "
          "peak act.: the most activations a rank holds · * the best (smallest step)")


def add_schedules_argument(parser: argparse.ArgumentParser) -> None:
    """``--schedules``: compare several schedules on the same ranks instead of simulating one."""
    parser.add_argument("--schedules", default=None, metavar="all|A,B,...",
                        help="compare these schedules (or all) on the same ranks and mark the best: one row "
                             "each, instead of one schedule's Gantt; interleaved and zb-v split each stage into "
                             "chunks on the same ranks (docs/simulator.md)")


def parse_schedules(text: str) -> list[str]:
    """``"all"``: every registered schedule; else the comma list's names, each registered, none twice."""
    if text.strip() == "all":
        return list(SCHEDULES)
    names = [part.strip() for part in text.split(",")]
    for name in names:
        if name not in SCHEDULES:
            raise InvalidInputError(f"--schedules must be 'all' or names from {', '.join(SCHEDULES)}, "
                                    f"got {name!r}")
    if len(set(names)) != len(names):
        raise InvalidInputError(f"--schedules names a schedule twice: {text!r}")
    return names


def run_compare(args: argparse.Namespace, *, costs_of: Callable[[argparse.Namespace], StageCosts],
                comm_of: Callable[[argparse.Namespace], CommModel]) -> int:
    """``simulate --schedules``: the comparison of the schedules asked, as a table or ``--json``.

    ``costs_of`` and ``comm_of`` read ``--forward``'s costs and the message flags as ``simulate`` does
    (its ``costs_from_args`` and ``comm_from_args``, passed in: this module is ``simulate``'s, not its importer).
    """
    from . import dual_rate_cmd
    from ._spec_args import uses_spec

    names = parse_schedules(args.schedules)
    refuse_unless(args.schedule == "1f1b", "--schedule", "with --schedules (give the schedules to compare there)")
    for flag, value in (("--plot", args.plot), ("--trace", args.trace), ("--step-table", args.step_table),
                        ("--actions", args.actions), ("--mix", getattr(args, "mix", None)),
                        ("--step-boundary", args.step_boundary), ("--update", getattr(args, "update", None))):
        refuse_unless(not value, flag, "with --schedules (it compares one step of each schedule in a table)")
    refuse_unless(args.iterations == 1, "--iterations", "with --schedules (it compares one step of each schedule)")
    refuse_unless(not dual_rate_cmd.rate_options(args), "--rate-ratio",
                  "with --schedules (dual-rate is not compared: it trains on stale gradients)")
    refuse_unless(args.width is None, "--width", "with --schedules (it sets the width of one schedule's Gantt)")
    for flag, option in (("--virtual-stages", "virtual_stages"), ("--memory-limit", "memory_limit"),
                         ("--objective", "objective")):
        takers = [name for name in names if option in schedule_info(name).options]
        refuse_unless(getattr(args, option) is None or bool(takers), flag,
                      f"to --schedules {','.join(names)} (none of them takes it)")
    virtual = positive_int("--virtual-stages", args.virtual_stages if args.virtual_stages is not None
                           else DEFAULT_VIRTUAL_STAGES)
    options: dict[str, Any] = {"memory_limit": args.memory_limit, "objective": args.objective,
                               "backward": "none" if args.forward_only else None}
    sources = [flag for flag, given in (("--forward", args.forward is not None), ("--profile", args.profile),
                                        ("--preset/--spec", uses_spec(args))) if given]
    if len(sources) != 1:
        raise InvalidInputError("give one of --forward (stage times, ms), --profile (a layer profile file) or "
                                "--preset/--spec (a model from shapes)"
                                + (f", got {' and '.join(sources)}" if sources else ""))
    if args.forward is not None:
        if args.partition is not None or args.stages is not None:
            raise InvalidInputError("--partition and --stages apply only with --profile or --preset/--spec "
                                    "(with --forward the ranks are its entries, one stage each)")
        if args.forward_only:
            for flag, value in (("--backward", args.backward), ("--weight", args.weight),
                                ("--activation-bytes", args.activation_bytes)):
                refuse_unless(value is None, flag, "with --forward-only (a forward-only step has no backward "
                                                   "and holds no activations)")
        # no one schedule: only the checks that hold for every schedule (--memory-limit's unit)
        costs = costs_of(argparse.Namespace(**{**vars(args), "schedule": None}))
        micro = positive_int("-m", default_microbatches(args.microbatches, costs.num_stages))
        result = compare_schedules(costs, num_microbatches=micro, schedules=names, virtual_stages=virtual,
                                   comm=comm_of(args), options=options)
        unit = "bytes" if args.activation_bytes is not None else "stage-microbatches"
    else:
        result = _compare_layers(args, names, virtual, options)
        unit = "bytes"
    if args.json:
        payload = result.to_dict()
        payload["activation_unit"] = unit
        print_json(payload)
        return 0
    console = make_console()
    for line in comparison_lines(result, unit=unit, width=min(console.width, 100)):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0


def _compare_layers(args: argparse.Namespace, names: list[str], virtual: int,
                    options: dict[str, Any]) -> ScheduleComparison:
    """``--profile`` (calibrated messages and core sharing) or ``--preset``/``--spec`` (the link's NCCL rate)."""
    from ..layers import LayerProfile
    from ..partition.choice import parse_partition
    from .profile_cmd import warn_profile_load
    from ._engine_args import spec_workload
    from ._spec_args import device_from_args, spec_from_args

    for flag, value in (("--backward", args.backward), ("--weight", args.weight),
                        ("--activation-bytes", args.activation_bytes), ("--boundary-bytes", args.boundary_bytes)):
        if value is not None:
            raise InvalidInputError(f"{flag} does not apply with --profile or --preset/--spec (the layers hold "
                                    "the costs)")
    partition = parse_partition(args.partition or "auto", example="6,4")
    if isinstance(partition, str):
        if args.stages is None:
            raise InvalidInputError(f"--partition {partition} needs --stages N (the ranks every schedule runs on)")
        ranks: int | None = positive_int("--stages", args.stages)
    else:
        if args.stages is not None and args.stages != len(partition):
            raise InvalidInputError(f"--partition has {len(partition)} stages but --stages says {args.stages}")
        ranks = None
    slowdown = None
    if args.profile is not None:
        profile = LayerProfile.from_file(args.profile)
        calibration = profile.calibration
        if calibration is not None:
            slowdown = calibration.slowdown

        def messages(sizes: Any) -> Any:
            from ..calibration import Calibration

            return (calibration or Calibration()).comm_model(list(sizes) or 0.0)
    else:
        from ..hardware import intra_node_link

        spec = spec_from_args(args)
        device, measured = device_from_args(args)
        profile = spec_workload(args, spec, device, measured).profile(args.micro_batch_size)  # as plan prices it
        link = measured or intra_node_link(device.name)

        def messages(sizes: Any) -> Any:
            return link.comm_model(list(sizes) or 0.0, send_mode=args.send)
    stages = ranks if ranks is not None else len(partition)
    micro = positive_int("-m", default_microbatches(args.microbatches, stages))
    result = compare_schedules(profile, num_microbatches=micro, schedules=names, num_ranks=ranks,
                               virtual_stages=virtual, partition=partition, messages=messages, slowdown=slowdown,
                               options=options)
    if args.profile is not None:  # accepted: say if its core sharing was measured under load
        warn_profile_load(profile, args.profile)
    return result


def comparison_lines(result: ScheduleComparison, *, unit: str = "bytes", width: int = 80) -> list[str]:
    """The text of a comparison: a heading, one row per schedule, why the others did not run, the legend.

    Every line fits ``width`` columns (at least 60): the table is 68 wide (73 with a mark)
    and the prose wraps.
    """
    width = max(60, width)
    wrap = textwrap.TextWrapper(width=width, subsequent_indent="  ")
    micro = result.num_microbatches
    lines = wrap.wrap(f"{len(result.rows)} schedule(s) on {result.num_ranks} ranks, {micro} "
                      f"microbatch{'' if micro == 1 else 'es'} (ms): {result.split}")
    lines.append(f"{'schedule':<16} {'v':>2} {'stages':>6} {'step ms':>9} {'bubble ratio':>12} {'in-flight':>9} "
                 f"{'peak act.':>9}")
    notes: list[str] = []
    for row in result.rows:
        if row.step is None:
            notes.append(f"{row.label} did not run: {row.reason}")
            lines.append(f"{row.label:<16} {row.chunks_per_rank:>2} {row.num_stages:>6} {'—':>9} {'—':>12} {'—':>9} "
                         f"{'—':>9}  ({len(notes)})")
            continue
        assert row.bubble_ratio is not None and row.peak_activations is not None
        peak = (units.format_bytes(row.peak_activations) if unit == "bytes" else f"{row.peak_activations:.3g}")
        lines.append(f"{row.label:<16} {row.chunks_per_rank:>2} {row.num_stages:>6} {format_time(row.step):>9} "
                     f"{row.bubble_ratio:>12.1%} {row.peak_inflight:>9} {peak:>9}" + ("  *" if row.best else ""))
    for index, note in enumerate(notes, 1):
        lines += wrap.wrap(f"({index}) {note}")
    legend = LEGEND if unit == "bytes" else LEGEND.replace(
        "the most activations a rank holds", "the most activations a rank holds, counted in stage-microbatches "
                                             "(no --activation-bytes: a stage holds 1 per microbatch, a chunk 1/v)")
    lines += wrap.wrap(legend)
    return lines
