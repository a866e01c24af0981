"""The user's path as a library: profile a model, balance it, run it, compare with the prediction.

    from pipeplan.runtime.loop import RunConfig, profile_model, run_pipeline
    profile = profile_model("dumbbell", nproc=2)                 # LayerProfile with its Calibration
    profile.to_file("prof.json")
    report = run_pipeline(RunConfig(schedule="1f1b", pp=2, microbatches=8, profile=profile))
    report["prediction"]["makespan_relative_error"]

``pipeplan profile`` and ``pipeplan run`` are thin wrappers over
:func:`profile_model` and :func:`run_pipeline`.

The prediction beside every run is :func:`pipeplan.predict.predict` on the
profile. Profile, calibration and run must use the same threads per process;
:func:`threads_per_process` is the number :func:`pipeplan.runtime.spawn` gives
each rank.
"""

from __future__ import annotations

import datetime
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from .._validation import positive_int
from ..calibration import Calibration
from ..costs import StageCosts
from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..predict import costs_as_run, predict
from ..profile_format import measured_model_flags, profile_origin
from ..schedules import SCHEDULES, schedule_info
from ..timeline import Timeline
from .launch import threads_per_process

__all__ = [
    "GRADIENT_TOLERANCE",
    "RunConfig",
    "check_profile_fits",
    "execute_rank",
    "gradient_check",
    "load_configured_model",
    "model_step",
    "profile_model",
    "run_pipeline",
    "threads_per_process",
]

GRADIENT_TOLERANCE = 1e-5
"""Largest allowed |runtime gradient − single-process gradient| (float32)."""


@dataclass(frozen=True)
class RunConfig:
    """One ``pipeplan run``: what to build, how to split it, how to schedule and time it.

    Attributes:
        schedule: a name from :data:`pipeplan.schedules.SCHEDULES`.
        pp, dp: pipeline ranks and data-parallel replicas (``pp × dp`` processes).
        microbatches: per step; ``batch_size`` samples per replica per step.
        virtual_stages: chunks per rank for ``interleaved``.
        checkpoint: recompute activations in the backward.
        model: ``package.module:factory`` or a built-in name (``None``: the default model).
        layers: transformer blocks of a built-in model.
        partition: ``"auto"`` (balanced on the profile), ``"even"`` or layers per stage.
        steps, warmup: measured and unmeasured steps.
        timeout: seconds before a stuck rank fails the run.
        profile: a measured :class:`~pipeplan.layers.LayerProfile` (then nothing is re-measured).
        keep_timelines: return every measured step's timeline, not only the median one.
    """

    schedule: str = "1f1b"
    pp: int = 2
    dp: int = 1
    microbatches: int = 4
    batch_size: int = 16
    virtual_stages: int = 2
    checkpoint: bool = False
    model: str | None = None
    layers: int = 8
    partition: str | Sequence[int] = "auto"
    steps: int = 3
    warmup: int = 1
    timeout: float = 120.0
    profile: LayerProfile | None = None
    keep_timelines: bool = False

    @property
    def num_stages(self) -> int:
        """Stages of the schedule (:meth:`~pipeplan.schedules.ScheduleInfo.stages_for`): ``pp × v`` for
        interleaved, ``2 pp`` for zb-v, else ``pp``."""
        if self.schedule not in SCHEDULES:
            return self.pp  # an unknown name: building the schedule names the choices
        return schedule_info(self.schedule).stages_for(self.pp, self.virtual_stages)

    @property
    def world_size(self) -> int:
        """Processes of the run."""
        return self.pp * self.dp

    @property
    def model_flags(self) -> str:
        """The model as ``pipeplan run`` flags name it: ``--model dumbbell --layers 8``, or ``--model pkg.mod:fn``."""
        from ..models import BUILTIN_MODELS

        if self.model is None or self.model in BUILTIN_MODELS:
            return f"--model {self.model or 'vla'} --layers {self.layers}"
        return f"--model {self.model}"


def load_configured_model(config: RunConfig) -> tuple[Any, Any, Any]:
    """``(nn.Sequential, loss_fn, make_batch)`` of the configured model (seeded, the same on every rank)."""
    from ..models import BUILTIN_MODELS, DEFAULT_MODEL, load_model

    if config.model is None or config.model in BUILTIN_MODELS:
        return load_model(config.model or DEFAULT_MODEL, num_layers=config.layers, seed=0)
    return load_model(config.model)


def _sample(make_batch: Any, batch_size: int, microbatches: int) -> Any:
    """One microbatch of replica 0's batch, the size every profile measures."""
    return make_batch(batch_size, seed=1)[0].tensor_split(microbatches)[0]


# ------------------------------------------------------------------ profile
def profile_model(
    model: str | None = None,
    *,
    layers: int = 8,
    batch_size: int = 16,
    microbatches: int = 4,
    nproc: int = 2,
    repeats: int = 7,
    warmup: int = 2,
    backend: str = "gloo",
    max_spread: float | None = 0.5,
    timeout: float = 120.0,
    calibrate: bool = True,
    statistic: str = "median",
) -> LayerProfile:
    """Measure a model's layers and the machine into one :class:`LayerProfile`.

    The layers are measured in this process with :func:`threads_per_process`
    threads (what each of ``nproc`` ranks will have), on one microbatch of
    ``batch_size / microbatches`` samples; then ``nproc`` ranks measure the link
    (ping-pong at the model's boundary sizes) and core sharing (every rank
    running one microbatch's forward and backward of the whole model at once)
    into the profile's :class:`~pipeplan.calibration.Calibration`.

    Args:
        model: ``package.module:factory`` or a built-in name (``None``: the default model).
        layers: transformer blocks of a built-in model.
        batch_size, microbatches: fix the microbatch that is measured.
        nproc: processes the profile is for (>= 1; 1 skips the calibration).
        repeats, warmup: timed and untimed runs of each measurement.
        backend: the process-group backend of the calibration.
        max_spread: refuse the profile (InvalidInputError) when some layer's
            interquartile range exceeds this fraction of its forward + backward;
            ``None`` accepts anything.
        timeout: seconds for the calibration ranks.
        calibrate: measure the calibration (False: layers only).
        statistic: what each layer time is of its repeats: ``"median"`` or
            ``"min"`` (the fastest; the calibration stays a median).

    Raises:
        InvalidInputError: a bad model or sizes, timer trouble, or a spread too large to trust.
    """
    import torch

    from .measure import check_spread, measure_layers
    from .launch import spawn

    nproc = positive_int("nproc", nproc)
    microbatches = positive_int("microbatches", microbatches)
    batch_size = positive_int("batch_size", batch_size)
    if batch_size < microbatches:
        raise InvalidInputError(f"batch_size must be >= the {microbatches} microbatches, got {batch_size}")
    config = RunConfig(model=model, layers=layers, batch_size=batch_size, microbatches=microbatches)
    module, _loss_fn, make_batch = load_configured_model(config)
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    module = module.to(device)
    sample = _sample(make_batch, batch_size, microbatches).to(device)
    threads = threads_per_process(nproc)
    before = os.getloadavg()
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        profile = measure_layers(module, sample, repeats=repeats, warmup=warmup, statistic=statistic)
    finally:
        torch.set_num_threads(previous)
    if max_spread is not None:
        check_spread(profile, max_spread)
    calibration = None
    calibration_load: list[float] | None = None
    if calibrate and nproc > 1:
        sizes = sorted(set(profile.send_bytes))
        chosen = [sizes[0], sizes[len(sizes) // 2], sizes[-1]] if sizes else []
        calibration_load = list(os.getloadavg())  # others' load as core sharing is measured (ours: this process)
        calibration = spawn(_calibrate_rank, nproc, config, chosen, repeats, backend,
                            backend=backend, timeout=timeout)[0]
    notes = {
        **profile.measurement,
        "source": "measured",
        "model": model or "vla",
        "layers": layers,
        "batch_size": batch_size,
        "microbatches": microbatches,
        "microbatch_size": int(sample.shape[0]),
        "nproc": nproc,
        "threads_per_process": threads,
        "backend": backend,
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "loadavg_before": list(before),
        "loadavg_after": list(os.getloadavg()),
        **({} if calibration_load is None else {"loadavg_calibration": calibration_load}),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    return profile.replaced(calibration=calibration, measurement=notes)


def model_step(config: RunConfig, device: Any = None) -> Callable[[], None]:
    """One microbatch's forward and backward of the whole configured model, as a callable.

    The representative work of the calibration (and of a benchmark's speed
    probe): replica 0's first microbatch, gradients dropped after each call,
    synchronised on a GPU.
    """
    import torch

    device = torch.device("cpu") if device is None else torch.device(device)
    module, loss_fn, make_batch = load_configured_model(config)
    module = module.to(device)
    inputs, targets = make_batch(config.batch_size, seed=1)
    sample = inputs.tensor_split(config.microbatches)[0].to(device)
    target = targets.tensor_split(config.microbatches)[0].to(device)

    def work() -> None:
        with torch.enable_grad():
            loss_fn(module(sample), target).backward()
        for param in module.parameters():
            param.grad = None
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return work


def _calibrate_rank(rank: int, world_size: int, config: RunConfig, sizes: list[float],
                    repeats: int, backend: str) -> Calibration:
    """One rank of the calibration: the link, then core sharing on the model's forward + backward."""
    import torch

    from .calibrate import calibrate_machine

    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    return calibrate_machine(model_step(config, device), sizes, repeats=repeats, device=device)


# ---------------------------------------------------------------------- run
def _partition(profile: LayerProfile, config: RunConfig, num_layers: int) -> list[int]:
    from ..partition.choice import resolve_partition

    num_stages = config.num_stages
    if num_layers < num_stages:
        raise InvalidInputError(
            f"the model has {num_layers} layers, fewer than the {num_stages} stages of {config.schedule}"
        )
    return resolve_partition(config.partition, profile, num_stages)


def _schedule_options(config: RunConfig, costs: StageCosts) -> dict[str, Any]:
    info = schedule_info(config.schedule)
    return info.shape_options(config.virtual_stages) | ({"costs": costs} if info.cost_aware else {})


def gradient_check(gathered: list[tuple[int, dict[int, list[tuple[str, Any]]]]],
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
    return {"max_abs_diff": worst, "tolerance": GRADIENT_TOLERANCE,
            "ok": worst <= GRADIENT_TOLERANCE and not problems, "problems": problems}


def check_profile_fits(profile: LayerProfile, num_layers: int, *, model: str = "", path: str = "") -> None:
    """Raise when a profile does not describe a model of ``num_layers`` top-level layers.

    Args:
        model: the run's model as its flags say (``--model dumbbell --layers 8``), for the message.
        path: the profile file, for the message.

    Raises:
        InvalidInputError: naming the file and what made it, the run's model and
            both layer counts, and the two ways out (measure this model, or run
            the one the profile was measured on).
    """
    kind, origin = profile_origin(profile.measurement, measured_split=profile.backward_input is not None)
    notes = profile.measurement
    if profile.num_layers == num_layers and kind == "shapes":
        raise InvalidInputError(
            f"{f'--profile {path!r}' if path else 'the profile'} was {origin}: it describes a preset or spec, not "
            f"a model pipeplan run builds; measure this one (pipeplan profile {model + ' ' if model else ''}"
            "--out PROFILE)")
    if profile.num_layers == num_layers:
        measured_on = measured_model_flags(notes) if kind == "measured" and notes.get("model") else ""
        if not (model and measured_on and _model_of(measured_on) != _model_of(model)):
            return
        raise InvalidInputError(
            f"{f'--profile {path!r}' if path else 'the profile'} was {origin}, but this run builds {model}: "
            f"its times are another model's; run {measured_on}, or measure this one "
            f"(pipeplan profile {model} --out PROFILE)")
    fix = f"measure this model (pipeplan profile {model + ' ' if model else ''}--out PROFILE)"
    if kind == "measured" and notes.get("model"):
        fix += f", or run the model it was measured on ({measured_model_flags(notes)})"
    elif kind == "shapes":
        fix += "; a profile from shapes (pipeplan model) describes a preset or spec, not a model pipeplan run builds"
    raise InvalidInputError(
        f"{f'--profile {path!r}' if path else 'the profile'} has {profile.num_layers} layers, {origin}; "
        f"the model this run builds{f' ({model})' if model else ''} has {num_layers}: {fix}"
    )


def _model_of(flags: str) -> tuple[str, str | None]:
    """``("dumbbell", "8")`` from ``--model dumbbell --layers 8``; a factory's ``--layers`` is not compared."""
    from ..models import BUILTIN_MODELS

    words = flags.split()
    name = words[words.index("--model") + 1] if "--model" in words else "vla"
    layers = words[words.index("--layers") + 1] if "--layers" in words else None
    return name, layers if name in BUILTIN_MODELS else None


def execute_rank(rank: int, world_size: int, config: RunConfig) -> dict[str, Any] | None:
    """Everything one rank does for :func:`run_pipeline`; returns the report on rank 0, else ``None``.

    Rank 0 measures the layers unless ``config.profile`` holds them (then nothing
    is re-measured), chooses the partition and tells every rank.
    """
    import torch
    import torch.distributed as dist

    from ..predict.compare import compare
    from ..models import split_sequential
    from .measure import measure_layers
    from ..schedules import build_schedule
    from . import FaultMonitor, PipelineRuntime, ProcessGrid

    model, loss_fn, make_batch = load_configured_model(config)
    grid = ProcessGrid.create(pp=config.pp, dp=config.dp)
    replica_batches = [make_batch(config.batch_size, seed=1 + d) for d in range(config.dp)]
    inputs, targets = replica_batches[grid.dp_rank]
    monitor = FaultMonitor.ensure(rank)
    shared: list[Any] = [None]
    if rank == 0:
        profile = config.profile
        if profile is None:
            with monitor.phase_of("measuring the layers"):
                profile = measure_layers(model, _sample(make_batch, config.batch_size, config.microbatches),
                                         repeats=3, warmup=1)
        check_profile_fits(profile, len(model), model=config.model_flags)
        shared = [(_partition(profile, config, len(model)), profile)]
    with monitor.phase_of("receiving the partition from rank 0", collective=True):
        dist.broadcast_object_list(shared, src=0)
    layers, profile = shared[0]
    costs = costs_as_run(profile.stage_costs(layers), config.checkpoint)
    schedule = build_schedule(config.schedule, num_stages=config.num_stages,
                              num_microbatches=config.microbatches, **_schedule_options(config, costs))
    stages = split_sequential(model, layers)
    runtime = PipelineRuntime(stages, schedule, loss_fn, checkpoint=config.checkpoint,
                              pp_group=grid.pp_group, dp_group=grid.dp_group)
    params = [p for s in runtime.local_stages for p in stages[s].parameters()]
    results = []
    first: Timeline | None = None
    for step in range(config.warmup + config.steps):
        for param in params:
            param.grad = None
        began = time.perf_counter()
        result = runtime.step(inputs, targets)
        wall = (time.perf_counter() - began) * 1e3
        if step == 0:
            first = result.timeline
        if step >= config.warmup:
            results.append((wall, result))
    local = {s: [(name, p.grad.detach().cpu().clone() if p.grad is not None else None)
                 for name, p in stages[s].named_parameters()]
             for s in runtime.local_stages}
    gathered: list[Any] = [None] * world_size
    with monitor.phase_of("gathering the gradients", collective=True):
        dist.all_gather_object(gathered, (grid.dp_rank, local, results[-1][1].to_dict()))
    if rank != 0:
        return None
    reference_model, _loss, _batch = load_configured_model(config)
    full_inputs = torch.cat([b[0] for b in replica_batches])
    full_targets = torch.cat([b[1] for b in replica_batches])
    reference_loss = loss_fn(reference_model(full_inputs), full_targets)
    reference_loss.backward()
    reference = split_sequential(reference_model, layers)
    check = gradient_check([(replica, grads) for replica, grads, _summary in gathered], reference)
    # Rank 0 is the pipeline's rank 0 of replica 0: it holds every step's timeline.
    timelines = [result.timeline for _wall, result in results if result.timeline is not None]
    chosen_index = sorted(range(len(timelines)), key=lambda i: timelines[i].makespan)[len(timelines) // 2]
    chosen, measured = results[chosen_index][1], timelines[chosen_index]
    predicted = predict(profile, schedule, layers, checkpoint=config.checkpoint)
    comparison = compare(predicted, measured)
    per_rank = [summary for _replica, _grads, summary in gathered]
    report: dict[str, Any] = {
        "config": {**{k: v for k, v in asdict(replace(config, profile=None)).items() if k != "profile"},
                   "num_stages": config.num_stages, "world_size": world_size, "backend": dist.get_backend(),
                   "layers_per_stage": layers, "placement": list(schedule.placement),
                   "profile": "given" if config.profile is not None else "measured on rank 0"},
        "schedule": schedule.name,
        "timeline": measured,
        "predicted_timeline": predicted,
        "measured": measured.to_dict(),
        "step_time_ms": {"median": statistics.median(w for w, _ in results), "all": [w for w, _ in results]},
        "makespan_ms": {"median": statistics.median(t.makespan for t in timelines),
                        "all": [t.makespan for t in timelines],
                        "first_step": None if first is None else first.makespan},
        "loss": chosen.loss,
        "gradient_check": {**check, "loss": results[-1][1].loss,
                           "reference_loss": float(reference_loss.detach())},
        "prediction": {"predicted_makespan": predicted.makespan,
                       "measured_makespan": measured.makespan, **comparison.to_dict()},
        "comparison_report": comparison.report(),
        "stage_costs": {"forward": list(costs.forward), "backward": list(costs.backward),
                        "weight": list(costs.weight), "activation_bytes": list(costs.activation_bytes),
                        "backward_input": None if costs.backward_input is None else list(costs.backward_input)},
        "calibration": None if profile.calibration is None else profile.calibration.to_dict(),
        "ranks": per_rank,
    }
    if config.keep_timelines:
        report["timelines"] = timelines
    return report


def run_pipeline(config: RunConfig, *, backend: str = "gloo") -> dict[str, Any]:
    """Spawn ``config.world_size`` local ranks, run :func:`execute_rank` on each, return rank 0's report.

    The report holds the configuration, the median measured step's timeline
    (``"timeline"``) and the predicted one (``"predicted_timeline"``), step and
    makespan statistics (``"makespan_ms"`` with the first, unmeasured step), the
    gradient check and the comparison (:func:`pipeplan.predict.compare`).

    Raises:
        InvalidInputError: a profile whose layer count is not the model's (before any rank starts).
        RuntimeFailure: a rank failed (see :func:`pipeplan.runtime.spawn`).
    """
    from .launch import spawn

    if config.profile is not None:  # a profile of another model fails here, in one line, before any rank starts
        check_profile_fits(config.profile, len(load_configured_model(config)[0]), model=config.model_flags)
    report = spawn(execute_rank, config.world_size, config, backend=backend, timeout=config.timeout)[0]
    assert report is not None
    return report

