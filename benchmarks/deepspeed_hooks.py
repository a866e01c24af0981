"""Benchmark: DeepSpeed's host cost per parameter tensor (its gradient hooks and step), measured on CPU.

    PYTHONPATH=src /work/engvenv/bin/python benchmarks/deepspeed_hooks.py            # print the table
    PYTHONPATH=src /work/engvenv/bin/python benchmarks/deepspeed_hooks.py --write    # also record it in docs/engines.md

Issue 31 asks for the host-side cost per parameter tensor of DeepSpeed's gradient hooks,
as a function of tensor count and ranks. A model of ``N`` tiny parameter tensors (4 fp32
values each: the loss is ``sum(stack(params) · x)``, so compute is negligible and every
tensor gets a gradient) trains for a few steps on 1 and 2 gloo processes on CPU
(``DS_ACCELERATOR=cpu``), once as a DeepSpeed engine (``deepspeed.initialize`` with ZeRO
stage 0, 1, 2, 3; ``engine.backward`` + ``engine.step``) and once as plain torch
(``loss.backward()`` + ``AdamW.step()``, inside ``DistributedDataParallel`` on 2 ranks).
Both use ``torch.optim.AdamW`` (DeepSpeed wraps it in its ZeRO optimizer) in fp32, one
thread per process. Timed per step: the backward and the step, in CPU seconds of the
process (``time.process_time``: Python and C++ hooks, not waiting) and wall seconds, the
median of the timed steps on rank 0. The extra host milliseconds DeepSpeed spends over
plain torch are fitted, per stage and rank count, to ``ms = a + b·N`` (``numpy.polyfit``);
``b`` is the extra per parameter tensor.

What is measured is CPU-side bookkeeping on a CPU run: on GPUs the hooks launch copies
and collectives asynchronously, the optimizer step is a fused kernel and the numbers
differ; nothing here is priced by the planner yet. A ZeRO stage DeepSpeed cannot
initialise on CPU is recorded with its exact error instead.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import measured_line, print_or_write  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "engines.md"
MARKER = "deepspeed-hooks"
COMMAND = "python benchmarks/deepspeed_hooks.py --write"

#: parameter tensors in the model
COUNTS = (64, 256, 1024, 4096)
#: ZeRO stages, in the order of the table
STAGES = (0, 1, 2, 3)
#: processes
RANKS = (1, 2)
#: values per parameter tensor
WIDTH = 4
#: untimed steps (DeepSpeed's first steps allocate its buffers), then timed steps
WARMUP, STEPS = 1, 3


def _model(count: int) -> Any:
    """``count`` tiny parameters and a loss whose compute is one stack, one product and one sum."""
    import torch

    class Many(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weights = torch.nn.ParameterList(torch.nn.Parameter(torch.full((WIDTH,), 0.01 * (i % 7)))
                                                  for i in range(count))

        def forward(self, x: Any) -> Any:
            return (torch.stack(list(self.weights)) * x).sum()

    return Many()


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _time_steps(backward: Any, step: Any, forward: Any) -> dict[str, float]:
    """Median CPU and wall seconds of backward and of step over the timed steps (after the warm-up)."""
    samples: dict[str, list[float]] = {"bwd_cpu": [], "bwd_wall": [], "step_cpu": [], "step_wall": []}
    for index in range(WARMUP + STEPS):
        loss = forward()
        cpu, wall = time.process_time(), time.perf_counter()
        backward(loss)
        cpu2, wall2 = time.process_time(), time.perf_counter()
        step()
        cpu3, wall3 = time.process_time(), time.perf_counter()
        if index >= WARMUP:
            samples["bwd_cpu"].append(cpu2 - cpu)
            samples["bwd_wall"].append(wall2 - wall)
            samples["step_cpu"].append(cpu3 - cpu2)
            samples["step_wall"].append(wall3 - wall2)
    return {key: _median(values) for key, values in samples.items()}


def _plain(count: int, world: int) -> dict[str, float]:
    import torch

    model = _model(count)
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.ones(count, WIDTH)

    def step() -> None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return _time_steps(lambda loss: loss.backward(), step, lambda: net(x))


def _deepspeed(deepspeed: Any, count: int, world: int, stage: int) -> dict[str, float] | str:
    import torch

    model = _model(count)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": world,
              "zero_optimization": {"stage": stage}, "steps_per_print": 10 ** 9}
    try:
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    except Exception as error:  # noqa: BLE001 - recorded as the result
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    x = torch.ones(count, WIDTH)
    result = _time_steps(engine.backward, engine.step, lambda: engine(x))
    engine.destroy()
    return result


def rank(rank_: int, world: int) -> dict[str, Any]:
    """One process: every count plain and under every ZeRO stage; rank 0's medians (others return ``{}``)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(DS_ACCELERATOR="cpu", RANK=str(rank_), LOCAL_RANK=str(rank_), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29500"))
    import deepspeed
    import deepspeed.ops

    # DeepSpeed's shared-memory all-reduce op would be JIT-built (minutes of C++): left out, as tests/_deepspeed_worker.py
    deepspeed.ops.__dict__["__compatible_ops__"] = {"deepspeed_shm_comm": False}
    deepspeed.init_distributed()
    results: dict[str, Any] = {}
    started = time.perf_counter()
    for count in COUNTS:
        results[f"plain {count}"] = _plain(count, world)
        dist.barrier()
        for stage in STAGES:
            results[f"zero{stage} {count}"] = _deepspeed(deepspeed, count, world, stage)
            dist.barrier()
        if rank_ == 0:
            print(f"ranks {world}, N {count}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return results if rank_ == 0 else {}


def measure() -> dict[int, dict[str, Any]]:
    """``{ranks: {"plain N" | "zeroS N": medians or error}}`` over :data:`RANKS`."""
    os.environ["DS_ACCELERATOR"] = "cpu"
    import deepspeed  # noqa: F401  # imported once here, shared by the forked ranks
    import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: F401  # ZeRO's optimizer check imports it

    from pipeplan.runtime import spawn

    return {world: spawn(rank, world, timeout=300)[0] for world in RANKS}


def _fit(counts: list[int], extra_ms: list[float]) -> tuple[float, float]:
    import numpy

    slope, intercept = numpy.polyfit(counts, extra_ms, 1)
    return float(intercept), float(slope)


def block() -> str:
    """The markdown table (extra host ms per step over plain torch, fitted a + b·N) and its measured line."""
    import deepspeed
    import torch

    results = measure()
    lines = [
        "| ranks | ZeRO stage | " + " | ".join(f"N = {n}" for n in COUNTS)
        + " | a (ms) | b (µs per tensor) | b: backward | b: step | b, wall |",
        "|---|---|" + "---|" * len(COUNTS) + "---|---|---|---|---|",
    ]
    errors = []
    for world in RANKS:
        measured = results[world]
        for stage in STAGES:
            rows = [measured[f"zero{stage} {n}"] for n in COUNTS]
            failed = [row for row in rows if isinstance(row, str)]
            if failed:
                errors.append(f"ranks {world}, ZeRO stage {stage}: DeepSpeed did not initialise on CPU: `{failed[0]}`")
                continue
            plain = [measured[f"plain {n}"] for n in COUNTS]

            def extra(kind: str, *parts: str) -> list[float]:
                """Milliseconds DeepSpeed spends over plain torch in ``parts`` (bwd, step), per count."""
                return [1e3 * sum(row[f"{part}_{kind}"] - base[f"{part}_{kind}"] for part in parts)
                        for row, base in zip(rows, plain)]

            cpu = extra("cpu", "bwd", "step")
            a, b = _fit(list(COUNTS), cpu)
            slopes = [_fit(list(COUNTS), values)[1] for values in
                      (extra("cpu", "bwd"), extra("cpu", "step"), extra("wall", "bwd", "step"))]
            cells = " | ".join(f"{value:+.1f}" for value in cpu)
            lines.append(f"| {world} | {stage} | {cells} | {a:+.1f} | **{1e3 * b:+.0f}** | "
                         + " | ".join(f"{1e3 * slope:+.0f}" for slope in slopes) + " |")
    text = "\n".join(lines)
    text += ("\n\nCells: extra CPU milliseconds per step (backward + step, `time.process_time` of rank 0) of a "
             "DeepSpeed engine over the same model in plain torch (DistributedDataParallel on 2 ranks), for N "
             f"parameter tensors of {WIDTH} fp32 values, medians of {STEPS} steps after {WARMUP}; `a + b·N` "
             "fitted by least squares (`numpy.polyfit`) to them, then b of the backward alone, of the step alone, "
             f"and of the wall seconds. DeepSpeed {deepspeed.__version__}, torch {torch.__version__}, "
             "torch.optim.AdamW, gloo, one thread per process.")
    if errors:
        text += "\n\n" + "\n".join(f"* {line}" for line in errors)
    return text + "\n\n" + measured_line(COMMAND)


def main(argv: list[str] | None = None) -> int:
    return print_or_write(DOC, MARKER, block, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
