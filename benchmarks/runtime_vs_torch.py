"""Benchmark: pipeplan's runtime against torch.distributed.pipelining on 2 CPU processes.

    python benchmarks/runtime_vs_torch.py                      # all cases, writes docs/runtime_benchmark.md
    python benchmarks/runtime_vs_torch.py --steps 5 --no-write
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
from pipeplan.profile import measure_layers, measure_stage_costs

WORLD_SIZE = 2
MARK_BEGIN = "<!-- runtime-vs-torch:begin -->"
MARK_END = "<!-- runtime-vs-torch:end -->"
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


def latency_worker(rank: int, boundary_shape: tuple[int, ...]) -> float:
    """This rank's view of the one-way gloo time of one boundary message, ms."""
    return _ping_pong_ms(rank, boundary_shape)


def torch_worker(rank: int, case: Case, config: Config) -> dict:
    """Time ``config.steps`` steps of torch.distributed.pipelining's schedule on this rank."""
    from torch.distributed import pipelining

    model, stages, loss_fn, inputs, targets = _build(config)
    local = [s for s, r in enumerate(config.placement) if r == rank]
    device = torch.device("cpu")
    pipe_stages = [pipelining.PipelineStage(stages[s], s, len(stages), device) for s in local]
    schedule_class = getattr(pipelining, case.torch_schedule)
    schedule = schedule_class(
        pipe_stages[0] if case.stages_per_rank == 1 else pipe_stages,
        n_microbatches=config.num_microbatches,
        loss_fn=loss_fn,
    )
    first, last = 0 in local, len(stages) - 1 in local
    times, losses_out = [], []
    for _ in range(config.warmup + config.steps):
        model.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        args = (inputs,) if first else ()
        kwargs = {"target": targets, "losses": losses} if last else {}
        dist.barrier()
        begin = time.perf_counter()
        schedule.step(*args, **kwargs)
        times.append((time.perf_counter() - begin) * 1e3)
        if last:
            losses_out.append(float(sum(loss.detach() for loss in losses)) / config.num_microbatches)
    return {"times": times[config.warmup :], "loss": losses_out[-1] if losses_out else None}


def pipeplan_worker(rank: int, case: Case, config: Config) -> dict:
    """Time ``config.steps`` steps of pipeplan's runtime on this rank."""
    from pipeplan import runtime

    model, stages, loss_fn, inputs, targets = _build(config)
    schedule = pipeplan.build_schedule(
        case.pipeplan_schedule, num_stages=len(stages), num_microbatches=config.num_microbatches
    )
    executor = runtime.PipelineRuntime(stages, schedule, loss_fn)
    times, makespans, loss = [], [], None
    for _ in range(config.warmup + config.steps):
        model.zero_grad(set_to_none=True)
        dist.barrier()
        begin = time.perf_counter()
        result = executor.step(inputs, targets)
        times.append((time.perf_counter() - begin) * 1e3)
        if result is not None and getattr(result, "timeline", None) is not None:
            makespans.append(result.timeline.makespan)
        if result is not None and getattr(result, "loss", None) is not None:
            loss = float(result.loss)
    return {"times": times[config.warmup :], "makespans": makespans[config.warmup :], "loss": loss}


# ------------------------------------------------------------------ parent side
def step_times(results: list[dict]) -> list[float]:
    """Per step, the slowest rank's time (every rank started at the same barrier)."""
    return [max(per_rank) for per_rank in zip(*(result["times"] for result in results))]


def pipeplan_runtime_available() -> str | None:
    """``None`` when ``pipeplan.runtime`` offers ``PipelineRuntime``; else why not."""
    try:
        from pipeplan import runtime
    except Exception as error:  # the runtime package may be missing or broken
        return f"pipeplan.runtime cannot be imported ({type(error).__name__}: {error})"
    if not hasattr(runtime, "PipelineRuntime"):
        return "pipeplan.runtime has no PipelineRuntime yet"
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
    _, stages, _, inputs, _ = _build(config)
    boundary = stages[0](torch.tensor_split(inputs, args.microbatches)[0])
    latency = statistics.median(launch("latency_worker", tuple(boundary.shape)))
    print(f"[{case.name}] gloo one-way latency of a {tuple(boundary.shape)} message: {latency:.3f} ms", flush=True)
    row: dict[str, Any] = {
        "case": case.name,
        "torch_schedule": case.torch_schedule,
        "partition": layers_per_stage,
        "latency_ms": latency,
        "torch_ms": None,
        "torch_error": None,
    }
    print(f"[{case.name}] torch.distributed.pipelining {case.torch_schedule} ...", flush=True)
    try:
        torch_results = launch("torch_worker", case, config)
    except Exception as error:  # torch's schedule may reject the model; record why
        last_line = [line for line in str(error).splitlines() if line.strip()][-1]
        row["torch_error"] = last_line.strip()[:160]
        print(f"[{case.name}] torch failed: {row['torch_error']}", flush=True)
    else:
        row["torch_ms"] = statistics.median(step_times(torch_results))
        row["torch_loss"] = next(r["loss"] for r in torch_results if r["loss"] is not None)
        print(f"[{case.name}] torch median step {row['torch_ms']:.2f} ms", flush=True)
    row["predicted_ms"] = predict(case, config, latency, repeats=args.profile_repeats)
    print(f"[{case.name}] predicted makespan {row['predicted_ms']:.2f} ms", flush=True)
    if skip_pipeplan is None:
        print(f"[{case.name}] pipeplan runtime {case.pipeplan_schedule} ...", flush=True)
        pipeplan_results = launch("pipeplan_worker", case, config)
        row["pipeplan_ms"] = statistics.median(step_times(pipeplan_results))
        makespans = [m for result in pipeplan_results for m in result["makespans"]]
        row["pipeplan_makespan_ms"] = statistics.median(makespans) if makespans else None
        row["pipeplan_loss"] = next((r["loss"] for r in pipeplan_results if r["loss"] is not None), None)
        row["ratio"] = None if row["torch_ms"] is None else row["pipeplan_ms"] / row["torch_ms"]
        print(f"[{case.name}] pipeplan median step {row['pipeplan_ms']:.2f} ms, ratio {_fmt(row['ratio'], 3)}", flush=True)
    return row


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown(rows: list[dict], args: argparse.Namespace, command: str, note: str | None) -> str:
    lines = [
        MARK_BEGIN,
        f"Command: `{command}`  ",
        f"Run: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, torch {torch.__version__}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPU cores, {WORLD_SIZE} processes x 1 thread, gloo.  ",
        f"Model: default VLA (`build_default_model(num_layers={args.num_layers})`), batch {args.batch} in "
        f"{args.microbatches} microbatches; {args.warmup} warm-up and {args.steps} timed steps per framework; "
        "times in ms (median step time; a step's time is the slowest rank's).",
        "",
        "| case | torch schedule | partition | torch step | pipeplan step | pipeplan / torch "
        "| predicted makespan | pipeplan measured makespan | gloo latency |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['case']} | `{row['torch_schedule']}` | {list(row['partition'])} "
            f"| {_fmt(row['torch_ms']) if row['torch_error'] is None else 'fails'} "
            f"| {_fmt(row.get('pipeplan_ms'))} | {_fmt(row.get('ratio'), 3)} | {_fmt(row['predicted_ms'])} "
            f"| {_fmt(row.get('pipeplan_makespan_ms'))} | {_fmt(row['latency_ms'], 3)} |"
        )
    for row in rows:
        if row["torch_error"] is not None:
            lines += ["", f"torch on `{row['case']}` fails: `{row['torch_error']}`"]
    if note:
        lines += ["", f"Note: {note}"]
    lines.append(MARK_END)
    return "\n".join(lines)


def write_doc(table: str) -> None:
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else ""
    if MARK_BEGIN in text and MARK_END in text:
        head, rest = text.split(MARK_BEGIN, 1)
        tail = rest.split(MARK_END, 1)[1]
        text = head + table + tail
    else:
        text = (text.rstrip() + "\n\n" if text else "# pipeplan runtime vs torch.distributed.pipelining\n\n") + table + "\n"
    DOC.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    parser.add_argument("--num-layers", type=int, default=8, help="transformer blocks of the model")
    parser.add_argument("--batch", type=int, default=32, help="samples per step")
    parser.add_argument("--microbatches", type=int, default=8, help="microbatches per step")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=15, help="timed steps per framework")
    parser.add_argument("--profile-repeats", type=int, default=10, help="repeats when measuring stage costs")
    parser.add_argument("--no-write", action="store_true", help=f"do not update {DOC.name}")
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
    command = "python benchmarks/runtime_vs_torch.py" + ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(sys.argv[1:] if argv is None else argv))
    table = markdown(rows, args, command, f"pipeplan side not run: {skip_pipeplan}" if skip_pipeplan else None)
    print(table)
    if not args.no_write:
        write_doc(table)
        print(f"wrote {DOC}")
    return 0 if skip_pipeplan is None else 3


if __name__ == "__main__":
    sys.exit(main())
