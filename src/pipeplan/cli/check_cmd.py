"""``pipeplan check``: bring what you run. Reads a user's engine configuration and answers for it.

    $ pipeplan check --megatron-args train.sh --gpus 16 --gpu a100-80g
    $ pipeplan check --deepspeed-config ds_config.json --preset pi0 --gpus 8 --measured-step 2.98s
    $ pipeplan check --torchtitan-config llama3_8b.toml --gpus 8,16,32,64 --json

Reads the file with the engine's reader (:meth:`pipeplan.engines.Engine.read`), builds the
model (the file's own, or ``--preset``/``--spec``, which win over it with a note) and the
cluster, and calls :func:`pipeplan.check.check`. Prints the configuration (every value
with where it came from: the file, the engine's default, derived, searched, pipeplan's
default), the predicted step with samples/s, tokens/s per GPU, MFU, the step's parts and
memory per rank, the best plans in the same engine (its files with ``--out DIR``) and in
any engine, a measured step's residual, and the scaling rows. ``--json`` prints
:meth:`pipeplan.check.CheckResult.to_dict` with ``device`` and ``model``. docs/check.md.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from .. import engines, hardware, presets
from ..check import CheckResult, check
from ..check.breakdown import PARTS
from ..check.measured import format_time
from ..engines import RunConfig
from ..engines.record import BUCKET_TAG
from ..errors import InvalidInputError
from .._validation import positive_int
from ..hardware.device_file import device_fields
from ..limits import MAX_GLOBAL_BATCH, MAX_GPUS
from ..models.spec import ModelSpec
from ..planner import Cluster, Workload
from .. import units
from ._common import make_console, name_choice, positive, print_json
from ._export_args import _check_folder, write_export
from ._common import report_written
from ._spec_args import add_shape_arguments, shape_from_args, spec_from_args

__all__ = ["register", "run", "SOURCES"]

#: Each file flag → the engine whose reader reads it.
SOURCES = {"megatron_args": "megatron", "deepspeed_config": "deepspeed", "torchtitan_config": "torchtitan",
           "torch_export": "torch"}
_FILE_HELP = {"megatron_args": ("FILE", "a Megatron-LM launch line or script (its flags give the GPT model)"),
              "deepspeed_config": ("FILE", "a DeepSpeed ds_config.json (give the model with --preset or --spec)"),
              "torchtitan_config": ("FILE", "a torchtitan config (HEAD's Python config or the TOML release)"),
              "torch_export": ("DIR", "a plain-torch export folder (split_spec.py, schedule.csv)")}


def _gpu_list(text: str) -> list[int]:
    """``--gpus``: one count, or comma-separated counts (the scaling rows)."""
    parts = text.split(",")
    counts = []
    for index, part in enumerate(parts):
        try:
            value = int(part)
        except ValueError:
            where = f"--gpus[{index}]" if len(parts) > 1 else "--gpus"
            raise argparse.ArgumentTypeError(f"{where} must be an integer, like 8 or 8,16,32,64, got {part!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"--gpus must be >= 1, got {value}")
        counts.append(value)
    return counts


_TIME = re.compile(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*(ms|s|us|µs)\s*")


def _measured(text: str) -> float:
    """``--measured-step``: a time with its unit (``2.98s``, ``850ms``), in seconds."""
    if _TIME.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"--measured-step must be a time with its unit, like 2.98s or 850ms, "
                                         f"got {text!r}")
    try:
        ms = units.parse_ms(text, flag="--measured-step")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not ms > 0:
        raise argparse.ArgumentTypeError(f"--measured-step must be > 0, got {text!r}")
    return ms / 1e3


def register(subparsers: Any) -> None:
    """Add the ``check`` verb."""
    parser = subparsers.add_parser(
        "check", help="read the engine configuration you run and predict its step, memory and the best plans",
        description="Read a Megatron-LM launch line, a DeepSpeed config, a torchtitan config or a plain-torch "
                    "export, price it as given (every value with its source), and compare it with the best "
                    "plans in the same engine and in any engine, a measured step and more GPUs.")
    files = parser.add_mutually_exclusive_group(required=True)
    for dest, (metavar, what) in _FILE_HELP.items():
        files.add_argument(f"--{dest.replace('_', '-')}", dest=dest, metavar=metavar, default=None, help=what)
    parser.add_argument("--preset", type=name_choice("--preset", presets.names), default=None,
                        help="the model, where the file gives none (it wins over the file's, with a note)")
    parser.add_argument("--spec", default=None, metavar="FILE", help="a ModelSpec .json (or .yaml) file, as --preset")
    parser.add_argument("--freeze", default=None, metavar="MODULES", help="comma-separated modules to freeze")
    parser.add_argument("--unfreeze", default=None, metavar="MODULES", help="comma-separated modules to train")
    add_shape_arguments(parser)
    parser.add_argument("--gpus", type=_gpu_list, default=None, metavar="N[,N...]",
                        help="GPUs (default the file's world size); several: one scaling row each, the check "
                             "itself on the first")
    parser.add_argument("--gpu", type=name_choice("--gpu", hardware.device_names), default="h100-80g",
                        help=f"device: {', '.join(hardware.device_names())} (default h100-80g)")
    parser.add_argument("--gpus-per-node", type=positive("--gpus-per-node"), default=None,
                        help="GPUs per node (default the file's, else 8)")
    parser.add_argument("--intra-link", default=None,
                        help=f"link inside a node (default NVLink of the GPU): {', '.join(hardware.link_names())}")
    parser.add_argument("--inter-link", default="ib-ndr", help="link between nodes (default ib-ndr)")
    parser.add_argument("--global-batch", type=positive("--global-batch"), default=None,
                        help="samples per optimizer step, where the file gives none")
    parser.add_argument("--measured-step", type=_measured, default=None, metavar="TIME",
                        help="the step time you measured, with its unit (2.98s, 850ms): what the model cannot "
                             "explain is named")
    parser.add_argument("--top", type=int, default=3,
                        help="best plans shown in each list (default 3; 0: no search for them)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write the engine's files for the best plan in the same engine into DIR")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def _config(args: argparse.Namespace) -> tuple[str, RunConfig]:
    """The file flag given and its configuration, read by its engine."""
    dest = next(dest for dest in SOURCES if getattr(args, dest))
    return f"--{dest.replace('_', '-')}", engines.get(SOURCES[dest]).read(getattr(args, dest))


def _given_model(args: argparse.Namespace) -> ModelSpec | None:
    """The model of ``--preset``/``--spec`` (``None``: neither given; the shape options then refused)."""
    if not (args.preset or args.spec):
        shape_from_args(args)  # a shape option without --preset: one line
        return None
    args.tp, args.sequence_parallel = 1, False  # spec_from_args' model-from-shapes checks: not ours
    return spec_from_args(args)


def _model(args: argparse.Namespace, config: RunConfig, flag: str,
           spec: ModelSpec | None) -> tuple[ModelSpec, str, list[str]]:
    """The model (``--preset``/``--spec`` over the file's, with a note), where it came from, and notes."""
    if spec is not None:
        source = f"--preset {args.preset}" if args.preset else f"--spec {args.spec}"
        notes = ([f"the model is {source}'s; the one {config.path} describes ({config.model_source}) is not used"]
                 if config.model is not None else [])
        return spec, source, notes
    if config.model is None:
        raise InvalidInputError(f"{config.path} describes no model: give --preset (one of "
                                f"{', '.join(presets.names())}) or --spec FILE")
    if any(getattr(args, key, None) is not None for key in ("freeze", "unfreeze")):
        raise InvalidInputError("--freeze/--unfreeze apply to --preset or --spec, not to the model of " + flag)
    return config.model, config.model_source or config.path, []


def _cluster(args: argparse.Namespace, config: RunConfig, gpus: int) -> Cluster:
    per_node = args.gpus_per_node or config.value("gpus_per_node") or 8
    return Cluster.of(args.gpu, gpus, intra_node=args.intra_link, inter_node=args.inter_link,
                      gpus_per_node=int(per_node))


def _check_numbers(args: argparse.Namespace) -> None:
    """The numeric flags' bounds, before the file is read (each refusal names its flag)."""
    if args.top < 0:
        raise InvalidInputError(f"--top must be >= 0, got {args.top}")
    for gpus in args.gpus or ():
        positive_int("--gpus", gpus, maximum=MAX_GPUS, why="more than any cluster; a typo?")
    if args.gpus_per_node is not None:
        positive_int("--gpus-per-node", args.gpus_per_node, maximum=MAX_GPUS, why="more than any cluster; a typo?")
    if args.global_batch is not None:
        positive_int("--global-batch", args.global_batch, maximum=MAX_GLOBAL_BATCH,
                     why="samples per optimizer step, far above any recipe; a typo?")


def run(args: argparse.Namespace) -> int:
    """Entry of ``pipeplan check``."""
    _check_numbers(args)
    if args.out is not None:
        if args.json:
            raise InvalidInputError("--out does not apply with --json (the JSON holds the files)")
        if args.top == 0:
            raise InvalidInputError("--out does not apply with --top 0 (no best plan is searched)")
        _check_folder(args.out)
    given = _given_model(args)  # before the file: a bad --preset option is its own one line
    flag, config = _config(args)
    spec, model_source, notes = _model(args, config, flag, given)
    sizes = args.gpus or [int(config.require("gpus", "--gpus N"))]
    cluster = _cluster(args, config, sizes[0])
    workload = Workload.from_spec(spec, cluster.device, tp_link=cluster.intra_node)
    result = check(config, workload, cluster, global_batch=args.global_batch, measured_step_s=args.measured_step,
                   scaling_gpus=sizes if len(sizes) > 1 else (), top=args.top)
    if notes:
        from dataclasses import replace

        result = replace(result, notes=tuple(notes) + result.notes)
    if args.json:
        print_json({**result.to_dict(), "device": device_fields(cluster.device),
                    "model": {"name": spec.name, "source": model_source}})
        return 0
    _print(args, result, cluster, spec.name, model_source)
    if args.out is not None and result.same_engine:
        for path in write_export(result.same_engine[0].files, args.out):
            report_written(path)
    return 0


def _ms(value: float) -> str:
    return units.format_figures(value)


def _print(args: argparse.Namespace, result: CheckResult, cluster: Cluster, model: str, model_source: str) -> None:
    from rich.table import Table

    console = make_console()
    say = lambda text: console.print(text, markup=False, highlight=False)  # noqa: E731
    config, plan, pinned = result.config, result.plan, result.pinned
    say(f"check of {config.path} ({config.engine}): {model} ({model_source}) on {cluster.num_gpus} × "
        f"{cluster.device.name}")
    table = Table(title="configuration", title_justify="left")
    table.add_column("field")
    table.add_column("value")
    table.add_column("from", overflow="fold")
    for name, filled in pinned.values.items():
        value = ",".join(map(str, filled.value)) if isinstance(filled.value, tuple) else str(filled.value)
        if name == "grad_sync":  # the sync's internal bucket tag (deepspeed-overlap:bucket=N): the bucket has its row
            value = value.partition(BUCKET_TAG)[0]
        table.add_row(name.replace("_", " "), value, filled.source)
    console.print(table)
    capacity = units.format_gib(cluster.memory_bytes)
    worst = units.format_gib(max(plan.peak_memory)) if plan.memory else "?"
    fit = (f"fits: worst rank {worst} of {capacity}" if plan.fits
           else f"does not fit: worst rank {worst} of {capacity} ({plan.reason})")
    tokens = result.tokens_per_s_per_gpu
    say(f"predicted step {_ms(result.step_ms)} ms: {units.format_figures(result.samples_per_s or 0.0)} samples/s"
        + (f", {units.format_figures(tokens)} tokens/s per GPU" if tokens is not None else "")
        + (f", MFU {result.mfu:.1%}" if result.mfu is not None else "") + f"; {fit}")
    if result.error_band is not None:
        say(result.error_band.line())
    parts = Table(title="where the step goes", title_justify="left")
    parts.add_column("part")
    parts.add_column("ms", justify="right")
    parts.add_column("share", justify="right")
    shares = result.breakdown.shares()
    for key, part_ms in result.breakdown.parts().items():
        parts.add_row(PARTS[key], _ms(part_ms), f"{shares[key]:.1%}")
    tp = result.breakdown.tp_exposed_ms
    if tp is not None:
        parts.add_row("(of which tensor-parallel collectives)", _ms(tp), f"{tp / result.step_ms:.1%}")
    console.print(parts)
    memory = Table(title="memory per pipeline rank (GiB)", title_justify="left")
    for column in ("rank", "parameters", "gradients", "optimizer", "activations", "total"):
        memory.add_column(column, justify="right")
    for rank, held in enumerate(plan.memory):
        memory.add_row(str(rank), *(units.format_gib(value, small=False).removesuffix(" GiB") for value in
                                    (held.parameters, held.gradients, held.optimizer, held.activations, held.total)))
    console.print(memory)
    if result.measured is not None:
        say(f"measured {format_time(result.measured.measured_ms)}: {result.measured.text}")
    _print_best(console, result, config.engine, say)
    if result.scaling:
        _print_scaling(console, result, say)
    if config.ignored:
        say(f"read, not priced: {', '.join(config.ignored)}")
    for note in result.notes:
        say(f"note: {note}")


def _print_best(console: Any, result: CheckResult, engine: str, say: Any) -> None:
    from rich.table import Table

    for title, rows in ((f"best plans in {engine}", result.same_engine), ("best plans in any engine",
                                                                           result.any_engine)):
        if not rows:
            continue
        table = Table(title=title, title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("step ms", justify="right")
        table.add_column("speed-up", justify="right")
        table.add_column("what changes", overflow="fold")
        if rows is result.any_engine:
            table.add_column("engines", overflow="fold")
        for index, row in enumerate(rows, 1):
            changes = "; ".join(row.changes[:-1]) or "nothing: your configuration"
            table.add_row(str(index), _ms(row.plan.milliseconds(row.plan.step_time)),
                          "" if row.speedup is None else f"{row.speedup:.2f}×", changes,
                          *([", ".join(row.engines) or "none"] if rows is result.any_engine else []))
        console.print(table)
    if result.same_engine:
        names = ", ".join(file.name for file in result.same_engine[0].files)
        say(f"{engine}'s files for plan 1 in {engine}: {names} (--out DIR writes them; --json carries them)")


def _print_scaling(console: Any, result: CheckResult, say: Any) -> None:
    from rich.table import Table

    table = Table(title=f"scaling ({result.pinned.batch_held} held)", title_justify="left")
    for column in ("GPUs", "dp", "b×m", "step ms", "samples/s", "eff."):
        table.add_column(column, justify="right")
    table.add_column("what grows", overflow="fold")
    for row in result.scaling:
        plan = row.plan
        if plan is None:
            table.add_row(str(row.gpus), "", "", "", "", "", row.why)
            continue
        table.add_row(str(row.gpus), str(plan.dp), f"{plan.micro_batch_size}×{plan.num_microbatches}",
                      _ms(plan.milliseconds(plan.step_time)), units.format_figures(row.samples_per_s or 0.0),
                      "" if row.efficiency is None else f"{row.efficiency:.0%}",
                      row.grows + ("" if plan.fits else " (does not fit)"))
    console.print(table)
