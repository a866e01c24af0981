"""``pipeplan run``: one real pipeline-parallel training step on processes of this machine.

    $ pipeplan run --nproc 2 --schedule 1f1b -m 4
    $ pipeplan run --nproc 4 --dp 2 --schedule zb-h1 --recompute full --json
    $ torchrun --nproc-per-node 2 -m pipeplan run --schedule gpipe
    $ pipeplan run --schedule dual-rate --rate-ratio 4 --damping 0.95   # see cli/dual_rate_cmd.py

    $ pipeplan run --profile prof.json --partition 1,9 --plot cmp.png --trace cmp.json

Starts ``--nproc`` CPU processes (gloo; NCCL when ``--backend nccl``) unless it
already runs under torchrun (``RANK``/``WORLD_SIZE`` set), builds the model on
every rank from the same seed (the built-in VLA-shaped network or its dumbbell
variant, or ``--model package.module:factory``), cuts it into stages, runs
warm-up steps and measured steps, then prints the measured Gantt and metrics,
the gradient check against a single-process full-batch step (max abs
difference), and the prediction (:func:`pipeplan.predict.predict`) beside the
median measured step. With ``--profile`` (a file from ``pipeplan profile``)
nothing is measured before the run and the prediction charges the profile's
calibrated messages and core sharing; without it rank 0 measures the layers
first. ``--plot`` / ``--trace`` draw the predicted and the measured step on one
time axis. The workflow itself is :mod:`pipeplan.runtime.loop`; this module
parses, checks and prints.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from .._validation import positive_int
from ..errors import InvalidInputError
from ..limits import MAX_LOCAL_BATCH, MAX_LOCAL_PROCESSES, MAX_STEPS, check_gantt_size
from ..partition.choice import parse_partition
from ..schedules import SCHEDULES, schedule_info
from ..units import format_bytes
from . import dual_rate_cmd
from ._common import default_microbatches, make_console, output_path, print_json, renamed_flag, report_written, require_torch, text_width

__all__ = ["register", "run", "execute_rank"]

_TORCHRUN_QUIET_EXIT_DELAY = 5.0
"""Seconds a torchrun rank other than 0 waits before leaving on a user error."""


def register(subparsers: Any) -> None:
    """Add the ``run`` verb."""
    parser = subparsers.add_parser(
        "run",
        help="run one pipeline-parallel training step on real processes",
        description="Run a pipeline schedule on real processes (torch.distributed), record its timeline, "
                    "check the gradients against one process and compare with the simulator.",
    )
    parser.add_argument("--nproc", type=int, default=2, help="processes to start (default 2; ignored under torchrun)")
    parser.add_argument("--schedule", default="1f1b", help=f"one of {', '.join(SCHEDULES)} (default 1f1b)")
    parser.add_argument("-m", "--microbatches", type=int, default=None,
                        help="microbatches per step (default 2 × the pipeline ranks, nproc / dp)")
    parser.add_argument("--batch-size", type=int, default=16,
                        help="samples per replica per step, not per microbatch: a microbatch is --batch-size / -m "
                             "(default 16)")
    parser.add_argument("--dp", type=int, default=1,
                        help="data-parallel replicas (default 1); the pipeline ranks are nproc / dp")
    parser.add_argument("--virtual-stages", type=int, default=2, help="chunks per rank for interleaved (default 2)")
    parser.add_argument("--recompute", choices=("none", "full"), default="none",
                        help="full: recompute every stage's activations in its backward (activation checkpointing); "
                             "none (default): keep them")
    renamed_flag(parser, "--checkpoint", "--recompute full", "activation checkpointing, as --recompute in every verb")
    parser.add_argument("--model", default=None,
                        help="package.module:factory returning (nn.Sequential, loss_fn, make_batch), or a built-in "
                             "model: vla (default), dumbbell")
    parser.add_argument("--layers", type=int, default=None,
                        help="transformer blocks of the built-in model (default 8; refused with --model)")
    parser.add_argument("--partition", default="auto", metavar="auto|even|A,B,...",
                        help="layers per stage, e.g. 3,4,3; 'even'; or 'auto' (balanced on the profile's layer costs)")
    parser.add_argument("--profile", metavar="PATH", default=None,
                        help="a profile file from pipeplan profile: nothing is measured before the run, and the "
                             "prediction charges its calibration")
    parser.add_argument("--plot", metavar="PATH", default=None,
                        help="draw the predicted and the measured step (Gantt and memory) on one time axis "
                             "(.png, .svg, .pdf)")
    parser.add_argument("--trace", metavar="PATH", default=None,
                        help="write the predicted and the measured step as two process groups of one Perfetto trace")
    parser.add_argument("--steps", type=int, default=3, help="measured steps (default 3; the median one is shown)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured steps first (default 1)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                        help="process-group backend (default: nccl with CUDA, else gloo)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds (>= 1) one action may compute, or a rank wait for a peer, before the run "
                             "fails naming the stuck rank (default 120)")
    parser.add_argument("--width", type=int, default=None, help="Gantt width in characters (default 100, less on a narrower terminal or COLUMNS)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    dual_rate_cmd.add_run_arguments(parser)
    parser.set_defaults(func=run)


_STEPS_WHY = "steps a run executes; more only lengthen it"


def _config(args: argparse.Namespace, world_size: int) -> dict[str, Any]:
    """Validate the arguments into a plain, picklable configuration."""
    from ..limits import check_builtin_model_size
    from ..runtime.launch import check_timeout

    world_size = positive_int("--nproc", world_size, maximum=MAX_LOCAL_PROCESSES,
                              why="processes on this machine, each importing torch")
    dual_rate_cmd.refuse_rate_flags(args)
    from ..models import BUILTIN_MODELS

    if args.model is not None and args.model not in BUILTIN_MODELS and args.layers is not None:
        raise InvalidInputError(
            f"--layers sets the built-in model's depth and does not apply to --model {args.model!r}; drop one"
        )
    check_gantt_size(text_width(args), world_size, field="--width")
    dp = positive_int("--dp", args.dp)
    if world_size % dp:
        raise InvalidInputError(f"--dp must divide the {world_size} processes, got {dp}")
    if args.schedule not in SCHEDULES:
        raise InvalidInputError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {args.schedule!r}")
    pp = world_size // dp
    virtual = positive_int("--virtual-stages", args.virtual_stages, maximum=MAX_LOCAL_PROCESSES,
                           why="chunks per rank; each holds at least one layer")
    num_stages = schedule_info(args.schedule).stages_for(pp, virtual)
    batch_size = positive_int("--batch-size", args.batch_size, maximum=MAX_LOCAL_BATCH,
                              why="examples per step of a model run on this machine")
    microbatches = positive_int("-m", default_microbatches(args.microbatches, pp, batch_size=batch_size))
    if batch_size < microbatches:
        raise InvalidInputError(f"--batch-size must be >= the {microbatches} microbatches (-m), got {batch_size}")
    partition: Any = parse_partition(args.partition)
    if not isinstance(partition, str):
        if any(part < 1 for part in partition):
            raise InvalidInputError(f"--partition entries must be >= 1 layer each, got {args.partition!r}")
        if len(partition) != num_stages:
            raise InvalidInputError(
                f"--partition has {len(partition)} entries, expected {num_stages} (one per stage of {args.schedule})"
            )
    layers = positive_int("--layers", 8 if args.layers is None else args.layers)
    if args.model is None or args.model in BUILTIN_MODELS:
        check_builtin_model_size(layers, world_size)
    return {
        "schedule": args.schedule, "num_stages": num_stages, "pp": pp, "dp": dp,
        "microbatches": microbatches, "batch_size": batch_size, "virtual_stages": virtual,
        "checkpoint": args.recompute == "full", "model": args.model,
        "layers": layers,
        "partition": partition, "steps": positive_int("--steps", args.steps, maximum=MAX_STEPS, why=_STEPS_WHY),
        "warmup": positive_int("--warmup", args.warmup, minimum=0, maximum=MAX_STEPS, why=_STEPS_WHY),
        "timeout": check_timeout("--timeout", args.timeout),
        "profile": _profile(args.profile),
        "profile_path": args.profile,
        "plot": _plot_path(args.plot),
        "trace": args.trace,
    }


def _profile(path: str | None) -> Any:
    """The ``--profile`` file as a LayerProfile (one line on a missing, bad or other-version file)."""
    if path is None:
        return None
    from ..layers import LayerProfile

    return LayerProfile.from_file(path)


def _plot_path(path: str | None) -> str | None:
    """``--plot``, checked for a format matplotlib writes before any process starts."""
    return output_path(path, "--plot")


def _run_config(config: dict[str, Any]) -> Any:
    """The library's :class:`~pipeplan.runtime.loop.RunConfig` of a validated configuration."""
    from ..runtime.loop import RunConfig

    return RunConfig(
        schedule=config["schedule"], pp=config["pp"], dp=config["dp"], microbatches=config["microbatches"],
        batch_size=config["batch_size"], virtual_stages=config["virtual_stages"], checkpoint=config["checkpoint"],
        model=config["model"], layers=config["layers"], partition=config["partition"], steps=config["steps"],
        warmup=config["warmup"], timeout=config["timeout"], profile=config["profile"],
    )


def _check_backend(backend: str, processes: int, *, explicit: bool) -> None:
    """NCCL needs CUDA and one GPU per local process; say so before any process starts."""
    if backend != "nccl":
        return
    import torch

    how = "--backend nccl" if explicit else "the default backend nccl"
    if not torch.cuda.is_available():
        raise InvalidInputError(f"{how} needs CUDA GPUs, and torch sees none here; use --backend gloo")
    gpus = torch.cuda.device_count()
    if processes > gpus:
        raise InvalidInputError(
            f"{how} needs one CUDA GPU per process: {processes} processes but {gpus} GPU(s); "
            "use fewer processes or --backend gloo"
        )


def _check_model(config: dict[str, Any]) -> None:
    """Build the model once in this process: a bad ``--model`` or ``--partition`` fails here, not in every rank."""
    try:
        model, _loss_fn, _make_batch = _load(config)
    except InvalidInputError:
        raise
    except SystemExit as error:  # a module or factory that calls sys.exit() must not end pipeplan silently
        module = str(config["model"]).split(":")[0].strip()
        what = f"importing module {module!r}" if module not in sys.modules else "its factory"
        raise InvalidInputError(f"--model {config['model']!r}: {what} called sys.exit({error.code!r})") from None
    except Exception as error:  # noqa: BLE001 - a user factory can fail in any way; report it as one line
        raise InvalidInputError(
            f"--model {config['model']!r}: the factory raised {type(error).__name__}: {error}"
        ) from None
    layers, num_stages = len(model), config["num_stages"]
    if layers < num_stages:
        raise InvalidInputError(
            f"the model has {layers} layers, fewer than the {num_stages} stages of {config['schedule']}"
        )
    partition = config["partition"]
    if isinstance(partition, list) and sum(partition) != layers:
        raise InvalidInputError(
            f"--partition {','.join(map(str, partition))} adds up to {sum(partition)}, "
            f"but the model has {layers} layers"
        )
    if config["profile"] is not None:
        from ..runtime.loop import check_profile_fits

        check_profile_fits(config["profile"], layers, model=_run_config(config).model_flags,
                           path=config["profile_path"])


def run(args: argparse.Namespace) -> int:
    """Run the verb: check the arguments, spawn the ranks (or join torchrun's), then print rank 0's report.

    Every user error (bad numbers, a partition that does not fit the model, a
    model that fails to build, NCCL without GPUs) is raised here, in this
    process, before any rank starts.
    """
    import os

    # torch's C++ logging (store retries, gloo warnings) would bury pipeplan's one
    # line; it is read once, when torch loads, so set it before the first import.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    if args.schedule in SCHEDULES and schedule_info(args.schedule).updates_in_step:  # the dual-rate pipeline
        return dual_rate_cmd.run_verb(args)
    require_torch("pipeplan run")
    from ..runtime import RunInterrupted, in_torchrun, spawn

    if in_torchrun():
        return _run_under_torchrun(args)
    config, backend = _validated(args, positive_int("--nproc", args.nproc, maximum=MAX_LOCAL_PROCESSES,
                                                    why="processes on this machine, each importing torch"), local=None)
    if config["profile"] is not None:  # accepted: say, before the run, if its core sharing was measured under load
        from .profile_cmd import warn_profile_load

        warn_profile_load(config["profile"], config["profile_path"])
    try:
        report = spawn(execute_rank, config["world_size"], config, backend=backend, timeout=config["timeout"])[0]
    except RunInterrupted as stop:
        print(f"pipeplan run: {stop}", file=sys.stderr)
        return 128 + stop.signum
    _print(report, args)
    return 0 if report["gradient_check"]["ok"] else 1


def _validated(args: argparse.Namespace, world_size: int, *, local: int | None) -> tuple[dict[str, Any], str]:
    """Every check that needs no process group: ``(config, backend)``, or InvalidInputError.

    ``local``: the processes on this machine (torchrun), default ``world_size``.
    """
    from ..runtime import default_backend

    config = _config(args, world_size)
    backend = args.backend or default_backend()
    _check_backend(backend, world_size if local is None else local, explicit=args.backend is not None)
    _check_model(config)
    return {**config, "world_size": world_size}, backend


def _run_under_torchrun(args: argparse.Namespace) -> int:
    """One of torchrun's ranks: validate exactly as every other rank does, then join the group.

    A user error is found identically on every rank before any of them joins the
    process group: rank 0 prints the one line, and every rank leaves with status 2
    at once (no rank waits in a rendezvous for one that already left).
    """
    import os
    import time

    import torch.distributed as dist

    from ..errors import PipeplanError
    from ..runtime import FaultMonitor, init_from_env
    from ..runtime.faults import PEER_FAILED_EXIT, format_failure, write_torchrun_error_file

    rank = int(os.environ.get("RANK", "0"))
    try:
        world_size = positive_int("WORLD_SIZE", int(os.environ["WORLD_SIZE"]))
        config, backend = _validated(args, world_size, local=int(os.environ.get("LOCAL_WORLD_SIZE", world_size)))
    except PipeplanError as error:
        if rank != 0:
            # Every rank found the same error; rank 0 says it. The others leave
            # later, so torchrun sees rank 0 fail first (its "Root Cause") and ends
            # them itself, instead of ending rank 0 before it could print.
            time.sleep(_TORCHRUN_QUIET_EXIT_DELAY)
            _leave(2)
        print(f"pipeplan run: error: {error}", file=sys.stderr)
        _leave(2, f"pipeplan run: error: {error}")
    try:
        rank, world_size = init_from_env(backend=backend, timeout=config["timeout"])
        report = execute_rank(rank, world_size, config)
    except Exception as error:  # noqa: BLE001 - one line, whatever failed (joining the group, say)
        monitor = FaultMonitor.current_monitor()
        if monitor is not None and monitor.echoed:
            # Another rank reported this failure first and printed it: stop like a bystander.
            write_torchrun_error_file(f"pipeplan: rank {rank} stopping because {error}", consequence=True)
            _leave(PEER_FAILED_EXIT)
        text = str(error) if isinstance(error, PipeplanError) else format_failure(
            rank, monitor.where() if monitor is not None else "setup", error)
        print(f"pipeplan run: error: {text}", file=sys.stderr)
        _leave(2, f"pipeplan run: error: {text}")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    status = 0
    if rank == 0 and report is not None:
        _print(report, args)
        status = 0 if report["gradient_check"]["ok"] else 1
    _leave(status)


def _leave(status: int, message: str = "") -> NoReturn:
    """Exit a torchrun rank without running C++ static destructors.

    Like spawn's workers: a torch thread still joinable at interpreter exit aborts
    the process now and then ("terminate called without an active exception"),
    which torchrun would report as a failed rank. ``message`` goes to torchrun's
    error file, so its failure report quotes pipeplan's line.
    """
    import os

    from ..runtime.faults import write_torchrun_error_file

    if status and message:
        write_torchrun_error_file(message)

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


# ------------------------------------------------------------- one rank's work
def _load(config: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``(nn.Sequential, loss_fn, make_batch)`` of the configured model."""
    from ..runtime.loop import load_configured_model

    return load_configured_model(_run_config(config))


def execute_rank(rank: int, world_size: int, config: dict[str, Any]) -> dict[str, Any] | None:
    """Everything one rank does for ``pipeplan run`` (:func:`pipeplan.runtime.loop.execute_rank`)."""
    from ..runtime.loop import execute_rank as run_rank

    return run_rank(rank, world_size, _run_config(config))


# ----------------------------------------------------------------- reporting
def _checkpoint_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for summary in report["ranks"]:
        for stage, on in summary["checkpoint"].items():
            if not on:
                continue
            saved = summary["saved_activation_bytes"][stage]
            without = summary["saved_activation_bytes_without_checkpoint"][stage]
            lines.append(
                f"  stage {stage} (rank {summary['rank']}): saved activations {format_bytes(without)} -> "
                f"{format_bytes(saved)} per microbatch, recompute adds {summary['recompute_time'][stage]:.2f} ms "
                f"(backward {summary['backward_time'][stage]:.2f} ms)"
            )
    return lines


def _write_pictures(report: dict[str, Any], args: argparse.Namespace) -> None:
    """``--plot`` and ``--trace``: the predicted and the measured step together."""
    if args.plot:
        from ..viz import plot_comparison

        plot_comparison(report["predicted_timeline"], report["timeline"], args.plot)
        report_written(args.plot)
    if args.trace:
        from ..viz import write_trace

        write_trace(report["predicted_timeline"], args.trace, measured=report["timeline"])
        report_written(args.trace)


def _print(report: dict[str, Any], args: argparse.Namespace) -> None:
    _write_pictures(report, args)
    timeline = report.pop("timeline")
    report.pop("predicted_timeline")
    if args.json:
        print_json(report)
        return
    console = make_console()
    config = report["config"]
    console.print(
        f"pipeplan run: {report['schedule']} on {config['world_size']} processes ({config['backend']}), "
        f"pp={config['pp']} x dp={config['dp']}, {config['num_stages']} stages {config['layers_per_stage']}, "
        f"m={config['microbatches']}, batch {config['batch_size']} per replica"
        + (", recompute full" if config["checkpoint"] else ""),
        markup=False, highlight=False,
    )
    try:
        from ..viz import rank_table, text_gantt

        console.print(text_gantt(timeline, width=args.width), markup=False, highlight=False)
        console.print(rank_table(timeline))
        from ..viz.tables import BUBBLE_LEGEND

        console.print(BUBBLE_LEGEND, markup=False, highlight=False)
    except ImportError:
        for record in timeline.records():
            console.print(f"rank {record.rank} {record.action}: {record.start:.2f}-{record.end:.2f} ms",
                          markup=False, highlight=False)
    check = report["gradient_check"]
    prediction = report["prediction"]
    lines = [
        f"measured makespan {timeline.makespan:.2f} ms, bubble ratio {100 * timeline.bubble_ratio:.1f}%, "
        f"step wall time median {report['step_time_ms']['median']:.2f} ms",
        f"gradient check: max abs diff {check['max_abs_diff']:.2e} vs one process "
        f"({'ok' if check['ok'] else 'FAILED'}, tolerance {check['tolerance']:.0e}); "
        f"loss {check['loss']:.6f} vs {check['reference_loss']:.6f}",
        f"prediction ({_prediction_source(report, args)}): predicted {prediction['predicted_makespan']:.2f} ms, "
        f"measured {prediction['measured_makespan']:.2f} ms, error "
        f"{100 * prediction['makespan_relative_error']:+.1f}%",
    ]
    lines[2:2] = ["  " + problem for problem in check["problems"]]
    lines += ["  " + line for line in report["comparison_report"].splitlines()[1:]]
    if config["checkpoint"]:
        lines.append("recompute full (activation checkpointing):")
        lines += _checkpoint_lines(report)
    for line in lines:
        console.print(line, markup=False, highlight=False)


def _prediction_source(report: dict[str, Any], args: argparse.Namespace) -> str:
    """What the prediction was made from, in a few words."""
    if args.profile is None:
        return ("layers measured on rank 0 before the run, no calibration: free messages, a core per rank; "
                "pipeplan profile measures both")
    calibrated = report["calibration"] is not None
    return f"profile {args.profile}" + (": as-run costs, calibrated messages and core sharing" if calibrated
                                        else ": as-run costs, no calibration")
