"""``pipeplan run``: one real pipeline-parallel training step on processes of this machine.

    $ pipeplan run --nproc 2 --schedule 1f1b -m 4
    $ pipeplan run --nproc 4 --dp 2 --schedule zb-h1 --checkpoint --json
    $ torchrun --nproc-per-node 2 -m pipeplan run --schedule gpipe
    $ pipeplan run --schedule dual-rate --rate-ratio 4 --damping 0.95   # see cli/dual_rate_cmd.py

Starts ``--nproc`` CPU processes (gloo; NCCL when ``--backend nccl``) unless it
already runs under torchrun (``RANK``/``WORLD_SIZE`` set), builds the model on
every rank from the same seed (the built-in VLA-shaped network, or ``--model
package.module:factory``), cuts it into stages, runs warm-up steps and measured
steps, then prints the measured Gantt and metrics, the gradient check against a
single-process full-batch step (max abs difference), and the prediction error of
:func:`pipeplan.simulate` fed with stage costs measured in isolation.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from typing import Any, NoReturn

from .._validation import positive_int
from ..errors import InvalidInputError
from ..schedules import SCHEDULES
from . import dual_rate_cmd
from ._common import make_console, print_json, require_torch

__all__ = ["register", "run", "execute_rank"]

_GRADIENT_TOLERANCE = 1e-5
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
    parser.add_argument("-m", "--microbatches", type=int, default=4, help="microbatches per step (default 4)")
    parser.add_argument("--batch-size", type=int, default=16, help="samples per replica per step (default 16)")
    parser.add_argument("--dp", type=int, default=1, help="data-parallel replicas (default 1); pp = nproc / dp")
    parser.add_argument("--virtual-stages", type=int, default=2, help="chunks per rank for interleaved (default 2)")
    parser.add_argument("--checkpoint", action="store_true", help="recompute activations in the backward")
    parser.add_argument("--model", default=None,
                        help="package.module:factory returning (nn.Sequential, loss_fn, make_batch) "
                             "(default: the built-in VLA-shaped model)")
    parser.add_argument("--layers", type=int, default=None,
                        help="transformer blocks of the built-in model (default 8; refused with --model)")
    parser.add_argument("--partition", default="auto",
                        help="layers per stage, e.g. 3,4,3; 'even'; or 'auto' (balanced on measured layer costs)")
    parser.add_argument("--steps", type=int, default=3, help="measured steps (default 3; the median one is shown)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured steps first (default 1)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                        help="process-group backend (default: nccl with CUDA, else gloo)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds (>= 1) one action may compute, or a rank wait for a peer, before the run "
                             "fails naming the stuck rank (default 120)")
    parser.add_argument("--width", type=int, default=100, help="Gantt width in characters (default 100)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    dual_rate_cmd.add_run_arguments(parser)
    parser.set_defaults(func=run)


def _config(args: argparse.Namespace, world_size: int) -> dict[str, Any]:
    """Validate the arguments into a plain, picklable configuration."""
    from ..limits import check_memory
    from ..runtime.launch import check_timeout

    world_size = positive_int("--nproc", world_size)
    if args.model is not None and args.layers is not None:
        raise InvalidInputError(
            f"--layers sets the built-in model's depth and does not apply to --model {args.model!r}; drop one"
        )
    positive_int("--width", args.width)
    dp = positive_int("--dp", args.dp)
    if world_size % dp:
        raise InvalidInputError(f"--dp must divide the {world_size} processes, got {dp}")
    if args.schedule not in SCHEDULES:
        raise InvalidInputError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {args.schedule!r}")
    pp = world_size // dp
    virtual = positive_int("--virtual-stages", args.virtual_stages)
    num_stages = {"interleaved": pp * virtual, "zb-v": 2 * pp}.get(args.schedule, pp)
    microbatches = positive_int("-m", args.microbatches)
    batch_size = positive_int("--batch-size", args.batch_size)
    if batch_size < microbatches:
        raise InvalidInputError(f"--batch-size must be >= the {microbatches} microbatches, got {batch_size}")
    partition: Any = args.partition
    if partition not in ("auto", "even"):
        try:
            partition = [int(part) for part in partition.split(",")]
        except ValueError:
            raise InvalidInputError(f"--partition must be 'auto', 'even' or numbers like 3,4,3, got {partition!r}") from None
        if any(part < 1 for part in partition):
            raise InvalidInputError(f"--partition entries must be >= 1 layer each, got {args.partition!r}")
        if len(partition) != num_stages:
            raise InvalidInputError(
                f"--partition has {len(partition)} entries, expected {num_stages} (one per stage of {args.schedule})"
            )
    layers = positive_int("--layers", 8 if args.layers is None else args.layers)
    if args.model is None:
        # One TransformerBlock of the built-in model (hidden 64): 12·h² + 13·h fp32 weights,
        # with their gradients, in the parent and in every rank.
        per_layer = 4 * (12 * 64**2 + 13 * 64)
        check_memory(
            f"--layers {layers} (the built-in model: {per_layer} bytes of weights per layer, "
            f"weights and gradients in {world_size + 1} processes)",
            2.0 * layers * per_layer * (world_size + 1),
        )
    return {
        "schedule": args.schedule, "num_stages": num_stages, "pp": pp, "dp": dp,
        "microbatches": microbatches, "batch_size": batch_size, "virtual_stages": virtual,
        "checkpoint": bool(args.checkpoint), "model": args.model,
        "layers": layers,
        "partition": partition, "steps": positive_int("--steps", args.steps),
        "warmup": positive_int("--warmup", args.warmup, minimum=0),
        "timeout": check_timeout("--timeout", args.timeout),
    }


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
    if args.schedule == "dual-rate":
        return dual_rate_cmd.run_verb(args)
    require_torch("pipeplan run")
    from ..runtime import RunInterrupted, in_torchrun, spawn

    if in_torchrun():
        return _run_under_torchrun(args)
    config, backend = _validated(args, positive_int("--nproc", args.nproc), local=None)
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
    from ..models import DEFAULT_MODEL, load_model

    if config["model"] is None:
        return load_model(DEFAULT_MODEL, num_layers=config["layers"], seed=0)
    return load_model(config["model"])


def _partition(model: Any, sample: Any, config: dict[str, Any]) -> list[int]:
    """Layers per stage (measured and balanced on rank 0 for ``auto``)."""
    from ..partition import even_split, partition_layers
    from ..profile import measure_layers

    num_stages = config["num_stages"]
    if len(model) < num_stages:
        raise InvalidInputError(
            f"the model has {len(model)} layers, fewer than the {num_stages} stages of {config['schedule']}"
        )
    if isinstance(config["partition"], list):
        return list(config["partition"])
    if config["partition"] == "even":
        return list(even_split(len(model), num_stages))
    profile = measure_layers(model, sample, repeats=3, warmup=1)
    return list(partition_layers(profile, num_stages).layers_per_stage)


def _schedule_options(config: dict[str, Any], costs: Any) -> dict[str, Any]:
    if config["schedule"] == "interleaved":
        return {"virtual_stages": config["virtual_stages"]}
    if config["schedule"] == "adaptive":
        return {"costs": costs}
    return {}


def _costs_as_run(costs: Any, checkpoint: bool) -> Any:
    """The isolated stage costs adjusted to what the runtime does: with checkpointing the
    backward repeats the forward, and (split schedules) a checkpointed stage's B computes
    both halves, so its W is empty."""
    from ..costs import StageCosts

    if not checkpoint:
        return costs
    return StageCosts(
        forward=costs.forward,
        backward=[b + f for b, f in zip(costs.backward, costs.forward)],
        weight=[0.0] * costs.num_stages,
        activation_bytes=costs.activation_bytes,
    )


def _gradient_check(gathered: list[tuple[int, dict[int, list[tuple[str, Any]]]]],
                    reference: list[Any]) -> dict[str, Any]:
    """Every runtime gradient against the single-process ``reference`` stages' ``.grad``.

    ``gathered`` holds, per rank, ``(dp replica, {stage: [(parameter name, gradient or None)]})``.
    A parameter with a gradient on one side only (the runtime never filled it, or
    filled one the reference does not have) fails the check and is named in
    ``problems``; no gradient on either side (a frozen parameter) is equal.
    """
    worst = 0.0
    problems: list[str] = []
    several = len({replica for replica, _grads in gathered}) > 1
    for replica, grads in gathered:
        for stage, named in grads.items():
            want = dict(reference[stage].named_parameters())
            where = f"stage {stage}" + (f" of replica {replica}" if several else "")
            for name in sorted(set(want) - {n for n, _ in named}):
                problems.append(f"{where}: parameter {name!r} missing from the runtime's stage")
            for name, got in named:
                param = want.get(name)
                if param is None:
                    problems.append(f"{where}: parameter {name!r} is not in the reference model")
                    continue
                if got is None and param.grad is None:
                    continue  # frozen or unused on both sides
                if got is None:
                    problems.append(f"{where}: parameter {name!r} has no gradient from the runtime, "
                                    "but one in the single-process step")
                elif param.grad is None:
                    problems.append(f"{where}: parameter {name!r} has a gradient from the runtime, "
                                    "but none in the single-process step")
                elif tuple(got.shape) != tuple(param.grad.shape):
                    problems.append(f"{where}: parameter {name!r} has a gradient of shape {tuple(got.shape)}, "
                                    f"expected {tuple(param.grad.shape)}")
                else:
                    difference = float((got - param.grad).abs().max())
                    if not math.isfinite(difference):  # max() would drop a NaN silently
                        problems.append(f"{where}: parameter {name!r} has a non-finite gradient difference "
                                        f"({difference})")
                        difference = math.inf
                    worst = max(worst, difference)
    return {"max_abs_diff": worst, "tolerance": _GRADIENT_TOLERANCE,
            "ok": worst <= _GRADIENT_TOLERANCE and not problems, "problems": problems}


def execute_rank(rank: int, world_size: int, config: dict[str, Any]) -> dict[str, Any] | None:
    """Everything one rank does for ``pipeplan run``; returns the report on rank 0, else ``None``."""
    import time

    import torch
    import torch.distributed as dist

    from ..compare import compare
    from ..models import split_sequential
    from ..profile import measure_stage_costs
    from ..runtime import FaultMonitor, PipelineRuntime, ProcessGrid
    from ..schedules import build_schedule
    from ..simulate import simulate

    model, loss_fn, make_batch = _load(config)
    grid = ProcessGrid.create(pp=config["pp"], dp=config["dp"])
    replica_batches = [make_batch(config["batch_size"], seed=1 + d) for d in range(config["dp"])]
    inputs, targets = replica_batches[grid.dp_rank]
    sample = inputs.tensor_split(config["microbatches"])[0]

    # Rank 0 measures (partition, stage costs in isolation) and tells everyone.
    monitor = FaultMonitor.ensure(rank)
    shared: list[Any] = [None]
    if rank == 0:
        with monitor.phase_of("measuring the stages"):
            layers = _partition(model, sample, config)
            costs = measure_stage_costs(split_sequential(model, layers), sample, repeats=3, warmup=1)
        shared = [(layers, costs)]
    with monitor.phase_of("receiving the partition from rank 0", collective=True):
        dist.broadcast_object_list(shared, src=0)
    layers, costs = shared[0]
    schedule = build_schedule(config["schedule"], num_stages=config["num_stages"],
                              num_microbatches=config["microbatches"], **_schedule_options(config, costs))
    stages = split_sequential(model, layers)
    runtime = PipelineRuntime(stages, schedule, loss_fn, checkpoint=config["checkpoint"],
                              pp_group=grid.pp_group, dp_group=grid.dp_group)
    params = [p for s in runtime.local_stages for p in stages[s].parameters()]
    results = []
    for step in range(config["warmup"] + config["steps"]):
        for param in params:
            param.grad = None
        began = time.perf_counter()
        result = runtime.step(inputs, targets)
        wall = (time.perf_counter() - began) * 1e3
        if step >= config["warmup"]:
            results.append((wall, result))
    # The last step's gradients against one process on the whole (all replicas') batch.
    local = {s: [(name, p.grad.detach().cpu().clone() if p.grad is not None else None)
                 for name, p in stages[s].named_parameters()]
             for s in runtime.local_stages}
    gathered: list[Any] = [None] * world_size
    with monitor.phase_of("gathering the gradients", collective=True):
        dist.all_gather_object(gathered, (grid.dp_rank, local, results[-1][1].to_dict()))
    if rank != 0:
        return None
    reference_model, _loss, _batch = _load(config)
    full_inputs = torch.cat([b[0] for b in replica_batches])
    full_targets = torch.cat([b[1] for b in replica_batches])
    reference_loss = loss_fn(reference_model(full_inputs), full_targets)
    reference_loss.backward()
    reference = split_sequential(reference_model, layers)
    check = _gradient_check([(replica, grads) for replica, grads, _summary in gathered], reference)
    measured = [(wall, result, result.timeline) for wall, result in results if result.timeline is not None]
    ordered = sorted(measured, key=lambda item: item[2].makespan)  # rank 0 has every step's timeline
    wall, chosen, chosen_timeline = ordered[len(ordered) // 2]
    predicted = simulate(schedule, _costs_as_run(costs, config["checkpoint"]))
    comparison = compare(predicted, chosen_timeline)
    per_rank = [summary for _replica, _grads, summary in gathered]
    return {
        "config": {**config, "world_size": world_size, "backend": dist.get_backend(),
                   "layers_per_stage": layers, "placement": list(schedule.placement)},
        "schedule": schedule.name,
        "timeline": chosen_timeline,
        "measured": chosen_timeline.to_dict(),
        "step_time_ms": {"median": statistics.median(w for w, _ in results),
                         "all": [w for w, _ in results]},
        "loss": chosen.loss,
        "gradient_check": {**check, "loss": results[-1][1].loss,
                           "reference_loss": float(reference_loss.detach())},
        "prediction": {"predicted_makespan": predicted.makespan,
                       "measured_makespan": chosen_timeline.makespan, **comparison.to_dict()},
        "comparison_report": comparison.report(),
        "stage_costs": {"forward": list(costs.forward), "backward": list(costs.backward),
                        "weight": list(costs.weight), "activation_bytes": list(costs.activation_bytes)},
        "ranks": per_rank,
    }


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
                f"  stage {stage} (rank {summary['rank']}): saved activations {without / 2**20:.2f} MiB -> "
                f"{saved / 2**20:.2f} MiB per microbatch, recompute adds {summary['recompute_time'][stage]:.2f} ms "
                f"(backward {summary['backward_time'][stage]:.2f} ms)"
            )
    return lines


def _print(report: dict[str, Any], args: argparse.Namespace) -> None:
    timeline = report.pop("timeline")
    if args.json:
        print_json(report)
        return
    console = make_console()
    config = report["config"]
    console.print(
        f"pipeplan run: {report['schedule']} on {config['world_size']} processes ({config['backend']}), "
        f"pp={config['pp']} x dp={config['dp']}, {config['num_stages']} stages {config['layers_per_stage']}, "
        f"m={config['microbatches']}, batch {config['batch_size']} per replica"
        + (", checkpointing" if config["checkpoint"] else ""),
        markup=False, highlight=False,
    )
    try:
        from ..viz import rank_table, text_gantt

        console.print(text_gantt(timeline, width=args.width), markup=False, highlight=False)
        console.print(rank_table(timeline))
    except ImportError:
        for record in timeline.records():
            console.print(f"rank {record.rank} {record.action}: {record.start:.2f}-{record.end:.2f} ms",
                          markup=False, highlight=False)
    check = report["gradient_check"]
    prediction = report["prediction"]
    lines = [
        f"measured makespan {timeline.makespan:.2f} ms, bubble {100 * timeline.bubble_ratio:.1f}%, "
        f"step wall time median {report['step_time_ms']['median']:.2f} ms",
        f"gradient check: max abs diff {check['max_abs_diff']:.2e} vs one process "
        f"({'ok' if check['ok'] else 'FAILED'}, tolerance {check['tolerance']:.0e}); "
        f"loss {check['loss']:.6f} vs {check['reference_loss']:.6f}",
        f"prediction (simulate on stage costs measured in isolation): predicted {prediction['predicted_makespan']:.2f} ms, "
        f"measured {prediction['measured_makespan']:.2f} ms, error "
        f"{100 * prediction['makespan_relative_error']:+.1f}%",
    ]
    lines[2:2] = ["  " + problem for problem in check["problems"]]
    lines += ["  " + line for line in report["comparison_report"].splitlines()[1:]]
    if config["checkpoint"]:
        lines.append("activation checkpointing:")
        lines += _checkpoint_lines(report)
    for line in lines:
        console.print(line, markup=False, highlight=False)
