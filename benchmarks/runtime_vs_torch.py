"""Benchmark: pipeplan's runtime against torch.distributed.pipelining on 2 CPU processes.

    python benchmarks/runtime_vs_torch.py --write              # all cases, recorded in docs/runtime_benchmark.md
    python benchmarks/runtime_vs_torch.py --steps 5            # print only
    python benchmarks/runtime_vs_torch.py --cases gpipe,1f1b

Both frameworks run the same model (pipeplan's default VLA-shaped network), the
same partition (balanced on measured per-layer times), the same placement, the
same batch and microbatch count, with one thread per process and gloo
point-to-point messages. For every case the script reports the median step time
of each framework (after warm-up steps; a step's time is the slowest rank's time
from a common barrier), their ratio (target: pipeplan / torch <= 1.05), and
pipeplan's predicted makespan (stage costs measured in isolation, a ping-pong
measured gloo latency, :func:`pipeplan.simulate`) beside the measured ones.

Cases (pipeplan schedule ↔ torch schedule class):

* ``gpipe``  ↔ ``ScheduleGPipe``          (2 stages, one per rank)
* ``1f1b``   ↔ ``Schedule1F1B``           (2 stages, one per rank)
* ``zb-v``   ↔ ``ScheduleZBVZeroBubble``  (4 stages in a V, split backward)
* ``zb-v-1step``: the same with a one-step action head. torch's split backward
  (``stage_backward_weight``) fails on the default head, whose velocity network
  is reused across its 8 denoising steps ("Trying to backward through the graph
  a second time" at the first ``W`` of the head's stage); the table records that
  failure, and this case shows the comparison on a head without the reuse.
"""

from __future__ import annotations

import argparse
import datetime
import os
import pickle
import platform
import socket
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import pipeplan
from pipeplan.models import build_default_model, split_sequential
from pipeplan.partition import partition_layers
from pipeplan.runtime.measure import measure_layers, measure_stage_costs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import add_write_flag, measured_line, replace_between, run_command  # noqa: E402

WORLD_SIZE = 2
DOC = Path(__file__).resolve().parent.parent / "docs" / "runtime_benchmark.md"


@dataclass(frozen=True)
class Case:
    """One comparison: a pipeplan schedule and the torch schedule class that matches it."""

    name: str
    pipeplan_schedule: str
    torch_schedule: str
    stages_per_rank: int
    denoising_steps: int = 8

    @property
    def num_stages(self) -> int:
        return WORLD_SIZE * self.stages_per_rank


CASES = {
    "gpipe": Case("gpipe", "gpipe", "ScheduleGPipe", 1),
    "1f1b": Case("1f1b", "1f1b", "Schedule1F1B", 1),
    "zb-v": Case("zb-v", "zb-v", "ScheduleZBVZeroBubble", 2),
    "zb-v-1step": Case("zb-v-1step", "zb-v", "ScheduleZBVZeroBubble", 2, denoising_steps=1),
}


@dataclass(frozen=True)
class Config:
    """Everything a worker needs to rebuild the same model, partition and batch."""

    num_layers: int
    batch_size: int
    num_microbatches: int
    warmup: int
    steps: int
    layers_per_stage: tuple[int, ...]
    placement: tuple[int, ...]
    denoising_steps: int = 8


# --------------------------------------------------------------------- launch
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _entry(rank: int, world_size: int, port: int, fn_name: str, args: tuple, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        result = globals()[fn_name](rank, *args)
        error = None
    except Exception:  # reported to the parent, which raises it
        result, error = None, traceback.format_exc()
    with open(os.path.join(out_dir, f"{rank}.pkl"), "wb") as handle:
        pickle.dump((result, error), handle)
    if error is None:
        dist.barrier()
    dist.destroy_process_group()


def launch(fn_name: str, *args: Any) -> list[Any]:
    """Run ``fn_name(rank, *args)`` on ``WORLD_SIZE`` fresh processes; return per-rank results."""
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(_entry, args=(WORLD_SIZE, _free_port(), fn_name, args, out_dir), nprocs=WORLD_SIZE, join=True)
        results = []
        for rank in range(WORLD_SIZE):
            with open(os.path.join(out_dir, f"{rank}.pkl"), "rb") as handle:
                result, error = pickle.load(handle)
            if error is not None:
                raise RuntimeError(f"rank {rank} failed:\n{error}")
            results.append(result)
    return results


# --------------------------------------------------------------- the workers
def _build(config: Config):
    model, loss_fn, make_batch = build_default_model(
        config.num_layers, seed=0, denoising_steps=config.denoising_steps
    )
    stages = split_sequential(model, config.layers_per_stage)
    inputs, targets = make_batch(config.batch_size, seed=1)
    return model, stages, loss_fn, inputs, targets


def _ping_pong_ms(rank: int, shape: tuple[int, ...], rounds: int = 30) -> float:
    """One-way gloo time of a ``shape`` float32 message between ranks 0 and 1, ms (median)."""
    buffer = torch.zeros(shape)
    samples = []
    for _ in range(rounds):
        dist.barrier()
        begin = time.perf_counter()
        if rank == 0:
            dist.send(buffer, 1)
            dist.recv(buffer, 1)
        else:
            dist.recv(buffer, 0)
            dist.send(buffer, 0)
        samples.append((time.perf_counter() - begin) * 1e3 / 2)
    return statistics.median(samples)


def _torch_schedule(case: Case, config: Config, stages: list, loss_fn, rank: int):
    from torch.distributed import pipelining

    local = [s for s, r in enumerate(config.placement) if r == rank]
    device = torch.device("cpu")
    pipe_stages = [pipelining.PipelineStage(stages[s], s, len(stages), device) for s in local]
    schedule_class = getattr(pipelining, case.torch_schedule)
    schedule = schedule_class(
        pipe_stages[0] if case.stages_per_rank == 1 else pipe_stages,
        n_microbatches=config.num_microbatches,
        loss_fn=loss_fn,
    )
    return schedule, 0 in local, len(stages) - 1 in local


def _timed_step(step, label: str) -> float:
    dist.barrier()
    begin = time.perf_counter()
    try:
        step()
    except Exception as error:  # say which framework failed; the launcher names the rank
        raise RuntimeError(f"{label} step failed: {type(error).__name__}: {error}") from error
    return (time.perf_counter() - begin) * 1e3


def _grad(param: torch.Tensor) -> torch.Tensor:
    return param.grad.detach().clone() if param.grad is not None else torch.zeros_like(param)


def worker(rank: int, world_size: int, case: Case, config: Config, frameworks: tuple[str, ...]) -> dict:
    """Time both frameworks on this rank, alternating steps so load drift hits both alike.

    Round ``i`` runs one torch step and one pipeplan step (which goes first
    alternates). Also measures the one-way gloo latency of a boundary message and,
    for each framework, the largest difference between its first step's gradients
    of this rank's parameters and a single-process full-batch step's.
    """
    torch.set_num_threads(1)
    model, stages, loss_fn, inputs, targets = _build(config)
    boundary = stages[0](torch.tensor_split(inputs, config.num_microbatches)[0]).detach()
    out: dict[str, Any] = {"latency": _ping_pong_ms(rank, tuple(boundary.shape))}
    local_params = [
        p for s, r in enumerate(config.placement) if r == rank for p in stages[s].parameters()
    ]
    steps: dict[str, Any] = {}
    if "torch" in frameworks:
        schedule, first, last = _torch_schedule(case, config, stages, loss_fn, rank)

        def torch_step() -> None:
            losses: list[torch.Tensor] = []
            args = (inputs,) if first else ()
            kwargs = {"target": targets, "losses": losses} if last else {}
            schedule.step(*args, **kwargs)
            if last:
                out["torch_loss"] = float(sum(loss.detach() for loss in losses)) / config.num_microbatches

        steps["torch"] = torch_step
    if "pipeplan" in frameworks:
        from pipeplan import runtime

        plan = pipeplan.build_schedule(
            case.pipeplan_schedule, num_stages=len(stages), num_microbatches=config.num_microbatches
        )
        executor = runtime.PipelineRuntime(stages, plan, loss_fn)
        out["makespans"] = []

        def pipeplan_step() -> None:
            result = executor.step(inputs, targets)
            out["pipeplan_loss"] = float(result.loss)
            if result.timeline is not None:
                out["makespans"].append(result.timeline.makespan)

        steps["pipeplan"] = pipeplan_step
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    first_grads: dict[str, list[torch.Tensor]] = {}
    for round_index in range(config.warmup + config.steps):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            model.zero_grad(set_to_none=True)
            times[name].append(_timed_step(steps[name], name))
            if round_index == 0:
                first_grads[name] = [_grad(p) for p in local_params]
    # The reference: one single-process full-batch step of the whole model in this process.
    model.zero_grad(set_to_none=True)
    loss_fn(model(inputs), targets).backward()
    reference = [_grad(p) for p in local_params]
    model.zero_grad(set_to_none=True)
    out["grad_error"] = {
        name: max((float((a - b).abs().max()) for a, b in zip(grads, reference)), default=0.0)
        for name, grads in first_grads.items()
    }
    out["times"] = {name: values[config.warmup :] for name, values in times.items()}
    if "makespans" in out:
        out["makespans"] = out["makespans"][config.warmup :]
    return out


def torch_only_worker(rank: int, case: Case, config: Config) -> dict:
    """``worker`` for the torch side alone, under this script's own launcher."""
    return worker(rank, WORLD_SIZE, case, config, ("torch",))


# ------------------------------------------------------------------ parent side
def step_times(results: list[dict], name: str) -> list[float]:
    """Per step, the slowest rank's time (every rank started at the same barrier)."""
    return [max(per_rank) for per_rank in zip(*(result["times"][name] for result in results))]


def pipeplan_runtime_available() -> str | None:
    """``None`` when ``pipeplan.runtime`` offers ``PipelineRuntime`` and ``spawn``; else why not."""
    try:
        from pipeplan import runtime
    except Exception as error:  # the runtime package may be missing or broken
        return f"pipeplan.runtime cannot be imported ({type(error).__name__}: {error})"
    missing = [name for name in ("PipelineRuntime", "spawn") if not hasattr(runtime, name)]
    if missing:
        return f"pipeplan.runtime has no {', '.join(missing)} yet"
    return None


def predict(case: Case, config: Config, latency_ms: float, *, repeats: int) -> float:
    """pipeplan's predicted makespan (ms) from stage costs measured in isolation."""
    _, stages, _, inputs, _ = _build(config)
    microbatch = torch.tensor_split(inputs, config.num_microbatches)[0]
    costs = measure_stage_costs(stages, microbatch, repeats=repeats, warmup=2)
    schedule = pipeplan.build_schedule(
        case.pipeplan_schedule, num_stages=len(stages), num_microbatches=config.num_microbatches
    )
    return pipeplan.simulate(schedule, costs, pipeplan.CommModel(latency=latency_ms)).makespan


def balanced_partition(case: Case, args: argparse.Namespace) -> tuple[int, ...]:
    """Contiguous layers per stage, balancing measured F + B per layer (one thread)."""
    model, _, make_batch = build_default_model(args.num_layers, seed=0, denoising_steps=case.denoising_steps)
    inputs, _ = make_batch(args.batch, seed=1)
    microbatch = torch.tensor_split(inputs, args.microbatches)[0]
    profile = measure_layers(model, microbatch, repeats=5, warmup=2)
    return partition_layers(profile, case.num_stages).layers_per_stage


def _last_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return (lines[-1] if lines else type(error).__name__)[:200]


def run_case(case: Case, args: argparse.Namespace, skip_pipeplan: str | None) -> dict:
    schedule = pipeplan.build_schedule(
        case.pipeplan_schedule, num_stages=case.num_stages, num_microbatches=args.microbatches
    )
    layers_per_stage = balanced_partition(case, args)
    config = Config(
        num_layers=args.num_layers,
        batch_size=args.batch,
        num_microbatches=args.microbatches,
        warmup=args.warmup,
        steps=args.steps,
        layers_per_stage=layers_per_stage,
        placement=schedule.placement,
        denoising_steps=case.denoising_steps,
    )
    print(f"[{case.name}] partition {layers_per_stage}, placement {schedule.placement}", flush=True)
    row: dict[str, Any] = {
        "case": case.name,
        "torch_schedule": case.torch_schedule,
        "partition": layers_per_stage,
        "torch_ms": None,
        "torch_error": None,
        "pipeplan_ms": None,
        "pipeplan_makespan_ms": None,
        "ratio": None,
        "torch_grad_error": None,
        "pipeplan_grad_error": None,
    }
    results = None
    if skip_pipeplan is None:
        from pipeplan.errors import RuntimeFailure
        from pipeplan.runtime import spawn

        print(f"[{case.name}] {case.torch_schedule} and pipeplan {case.pipeplan_schedule}, alternating steps ...", flush=True)
        try:
            results = spawn(worker, WORLD_SIZE, case, config, ("torch", "pipeplan"), timeout=120.0)
        except RuntimeFailure as error:
            if "torch step failed" not in str(error):
                raise
            text = str(error)
            row["torch_error"] = text[text.index("torch step failed: ") + len("torch step failed: ") :][:160]
            print(f"[{case.name}] torch failed: {row['torch_error']}", flush=True)
            print(f"[{case.name}] pipeplan {case.pipeplan_schedule} alone ...", flush=True)
            results = spawn(worker, WORLD_SIZE, case, config, ("pipeplan",), timeout=120.0)
    else:
        print(f"[{case.name}] {case.torch_schedule} alone ...", flush=True)
        try:
            results = launch("torch_only_worker", case, config)
        except RuntimeError as error:
            row["torch_error"] = _last_line(error)
            print(f"[{case.name}] torch failed: {row['torch_error']}", flush=True)
    row["latency_ms"] = statistics.median(result["latency"] for result in results) if results else None
    if results and "torch" in results[0]["times"]:
        row["torch_ms"] = statistics.median(step_times(results, "torch"))
        print(f"[{case.name}] torch median step {row['torch_ms']:.2f} ms", flush=True)
    if results and "pipeplan" in results[0]["times"]:
        row["pipeplan_ms"] = statistics.median(step_times(results, "pipeplan"))
        makespans = [m for result in results for m in result.get("makespans", [])]
        row["pipeplan_makespan_ms"] = statistics.median(makespans) if makespans else None
        print(f"[{case.name}] pipeplan median step {row['pipeplan_ms']:.2f} ms", flush=True)
    for name in ("torch", "pipeplan"):
        if results and name in results[0]["grad_error"]:
            row[f"{name}_grad_error"] = max(result["grad_error"][name] for result in results)
            print(f"[{case.name}] {name}: max |grad - full-batch grad| = {row[f'{name}_grad_error']:.2e}", flush=True)
    if row["torch_ms"] is not None and row["pipeplan_ms"] is not None:
        row["ratio"] = row["pipeplan_ms"] / row["torch_ms"]
        print(f"[{case.name}] pipeplan / torch = {row['ratio']:.3f}", flush=True)
    latency = row["latency_ms"] if row["latency_ms"] is not None else 0.0
    row["predicted_ms"] = predict(case, config, latency, repeats=args.profile_repeats)
    print(f"[{case.name}] predicted makespan {row['predicted_ms']:.2f} ms", flush=True)
    return row


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _fmt_error(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1e}" + ("" if value <= 1e-5 else " **(> 1e-5)**")


def markdown(rows: list[dict], args: argparse.Namespace, command: str, note: str | None) -> str:
    lines = [
        f"Model: default VLA (`build_default_model(num_layers={args.num_layers})`), batch {args.batch} in "
        f"{args.microbatches} microbatches; {args.warmup} warm-up and {args.steps} timed steps per framework, "
        "the two frameworks alternating step by step in the same processes; times in ms (median step time; "
        "a step's time is the slowest rank's, from a common barrier). grad err: the largest absolute difference "
        "between a framework's gradients and a single-process full-batch step's (float32; the issue's bound is 1e-5). predicted: `pipeplan.simulate` on stage costs "
        "measured in isolation plus the measured one-way gloo latency.",
        "",
        "| case | torch schedule | partition | torch step | pipeplan step | pipeplan / torch "
        "| torch grad err | pipeplan grad err | predicted makespan | pipeplan measured makespan | gloo latency |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['case']} | `{row['torch_schedule']}` | {list(row['partition'])} "
            f"| {_fmt(row['torch_ms']) if row['torch_error'] is None else 'fails'} "
            f"| {_fmt(row['pipeplan_ms'])} | {_fmt(row['ratio'], 3)} "
            f"| {_fmt_error(row['torch_grad_error'])} | {_fmt_error(row['pipeplan_grad_error'])} "
            f"| {_fmt(row['predicted_ms'])} | {_fmt(row['pipeplan_makespan_ms'])} | {_fmt(row['latency_ms'], 3)} |"
        )
    for row in rows:
        if row["torch_error"] is not None:
            lines += ["", f"torch on `{row['case']}` fails: `{row['torch_error']}`"]
    if note:
        lines += ["", f"Note: {note}"]
    machine = (f"torch {torch.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPU cores, "
               f"{WORLD_SIZE} processes x 1 thread, gloo")
    lines += ["", measured_line(command, machine=machine, clock=True)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    parser.add_argument("--num-layers", type=int, default=8, help="transformer blocks of the model")
    parser.add_argument("--batch", type=int, default=32, help="samples per step")
    parser.add_argument("--microbatches", type=int, default=8, help="microbatches per step")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=15, help="timed steps per framework")
    parser.add_argument("--profile-repeats", type=int, default=10, help="repeats when measuring stage costs")
    add_write_flag(parser, DOC)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    names = [name.strip() for name in args.cases.split(",") if name.strip()]
    unknown = [name for name in names if name not in CASES]
    if unknown:
        print(f"--cases: unknown {unknown}; choose from {list(CASES)}", file=sys.stderr)
        return 2
    missing = [CASES[n].pipeplan_schedule for n in names if CASES[n].pipeplan_schedule not in pipeplan.SCHEDULES]
    if missing:
        print(f"skipping cases whose pipeplan schedule is absent: {missing}", flush=True)
        names = [n for n in names if CASES[n].pipeplan_schedule in pipeplan.SCHEDULES]
    skip_pipeplan = pipeplan_runtime_available()
    if skip_pipeplan:
        print(f"pipeplan side skipped: {skip_pipeplan}; timing torch only", flush=True)
    rows = [run_case(CASES[name], args, skip_pipeplan) for name in names]
    command = run_command(["runtime_vs_torch.py", *(sys.argv[1:] if argv is None else argv)])
    table = markdown(rows, args, command, f"pipeplan side not run: {skip_pipeplan}" if skip_pipeplan else None)
    print(table)
    if args.write:
        replace_between(DOC, "runtime-vs-torch", table)
    return 0 if skip_pipeplan is None else 3


if __name__ == "__main__":
    sys.exit(main())
