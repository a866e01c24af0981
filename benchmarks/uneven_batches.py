"""Batches that are not alike: π0 on a 1–4 camera embodiment mix, split over data-parallel ranks four ways.

    python benchmarks/uneven_batches.py                    # print all three tables
    python benchmarks/uneven_batches.py --only simulated   # the computed table only
    python benchmarks/uneven_batches.py --write            # also record them in docs/uneven_batches.md

* ``simulated`` (computed; tests/test_docs_tables.py checks it): the π0 preset on an
  H100 (pipeplan's per-operator cost model, openpi's recompute recipe), per-sample cost
  = one sample's share of an 8-sample microbatch of its shape; the mix :data:`MIX`;
  16 samples per GPU; :data:`DRAWS` global batches drawn from the mix (seed 0). Per
  method, the data-parallel step's compute = the slowest rank's summed sample costs
  (the gradient all-reduce is the same for every method and left out), its mean and
  95th percentile over the draws, the speed-up over the random split, and the fewest and
  most samples a rank got. Samples run at their own shape (no padding to the largest);
  the line under the table gives the step when every sample of a rank is padded to that
  rank's largest shape (a fixed-shape batch tensor) instead.
* ``speed`` (measured): CPU seconds to balance a global batch of 4,096 samples over 256
  ranks, and to split one rank's 128 samples into 32 microbatches and order them for an
  8-stage 1F1B pipeline (the issue's targets: 50 ms and 100 ms).
* ``cpu`` (measured): a plain DDP loop on 2 gloo processes whose model's first module runs
  once per camera image; the measured step of random vs balanced splits of the same global
  batches as a ratio in one run, beside the ratio predicted from per-camera-count timings.
* ``pipeline`` (measured): pipeplan's own runtime on 2 gloo processes (1F1B, 2 stages) with
  microbatches of different shapes (each its samples' camera images), in draw order vs
  :func:`~pipeplan.batches.plan_microbatches`' balanced ones, beside the predicted ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import add_write_flag, computed_line, measured_line, replace_between, run_command  # noqa: E402

from pipeplan.batches import (MixCosts, balance, bucketed_batches, lower_bound, mix_costs, packing_split,  # noqa: E402
                              parse_mix, plan_microbatches, random_split)
from pipeplan.batches.balance import Balance  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "uneven_batches.md"
#: An illustrative embodiment mix (not measured from a dataset): most episodes from 1- and
#: 2-camera arms, fewer from 3- and 4-camera platforms.
MIX = ((1, 40), (2, 30), (3, 20), (4, 10))
GPUS = (8, 64, 256)
PER_GPU = 16
DRAWS = 40
MICRO_BATCH = 8
#: π0's text tokens and suffix (1 state + 50 actions) beside 256 SigLIP patches per 224 px camera (presets/pi.py)
TEXT_TOKENS, SUFFIX_TOKENS, PATCHES = 48, 51, 256
METHODS = ("random split", "sort-by-length buckets", "WLB-LLM packing", "pipeplan balance")


def pi0_costs() -> MixCosts:
    """Per-shape sample costs of π0 on an H100 (ms)."""
    mix = parse_mix([{"cameras": cameras, "count": count} for cameras, count in MIX], source="MIX")
    return mix_costs("pi0", mix, device="h100-80g", micro_batch_size=MICRO_BATCH)


def split(method: str, costs: np.ndarray, tokens: np.ndarray, ranks: int, seed: int) -> Balance:
    """One global batch split by ``method``."""
    if method == "random split":
        return random_split(costs, ranks, seed=seed)
    if method == "sort-by-length buckets":
        return bucketed_batches(tokens, ranks)  # sorts by length; loads below are recomputed on costs
    if method == "WLB-LLM packing":
        return packing_split(costs, ranks, tokens=tokens, costs=costs)
    return balance(costs, ranks)


def simulated_rows(table: MixCosts) -> tuple[list[str], list[float]]:
    """The computed table's rows, and every padded step (ms)."""
    rows = []
    all_padded: list[float] = []
    sample = np.asarray(table.sample_ms)
    cameras = np.array([shape["cameras"] for shape in table.mix.shapes])
    for gpus in GPUS:
        rng = np.random.default_rng(0)
        steps: dict[str, list[float]] = {method: [] for method in METHODS}
        padded: dict[str, list[float]] = {method: [] for method in METHODS}
        held: dict[str, list[int]] = {method: [] for method in METHODS}
        bounds = []
        for draw in range(DRAWS):
            shapes = table.draw(gpus * PER_GPU, seed=rng)
            costs = sample[shapes]
            tokens = (PATCHES * cameras[shapes] + TEXT_TOKENS + SUFFIX_TOKENS).astype(float)
            bounds.append(lower_bound(costs, gpus))
            for method in METHODS:
                result = split(method, costs, tokens, gpus, seed=draw)
                loads = np.bincount(result.assignment, weights=costs, minlength=gpus)
                steps[method].append(float(loads.max()))
                widest = np.zeros(gpus, dtype=int)
                np.maximum.at(widest, result.assignment, shapes)
                counts = np.bincount(result.assignment, minlength=gpus)
                held[method] += [int(counts.min()), int(counts.max())]
                padded[method].append(float((counts * sample[widest]).max()))
        base = float(np.mean(steps["random split"]))
        for method in METHODS:
            mean = float(np.mean(steps[method]))
            rows.append(f"| {gpus} | {gpus * PER_GPU} | {method} | {mean:.1f} | {np.percentile(steps[method], 95):.1f} "
                        f"| {base / mean:.2f}× | {min(held[method])}–{max(held[method])} |")
            all_padded += padded[method]
        rows.append(f"| {gpus} | {gpus * PER_GPU} | lower bound | {np.mean(bounds):.1f} | "
                    f"{np.percentile(bounds, 95):.1f} | {base / float(np.mean(bounds)):.2f}× | {PER_GPU} |")
    return rows, all_padded


def simulated_block() -> str:
    """The computed block: per-shape costs, then the step per method and GPU count."""
    table = pi0_costs()
    rows, padded = simulated_rows(table)
    shapes = " · ".join(f"{shape['cameras']} camera{'s' if shape['cameras'] > 1 else ''}: "
                        f"{weight:.0%}, {ms:.2f} ms" for shape, weight, ms
                        in zip(table.mix.shapes, table.mix.weights, table.sample_ms))
    lines = [f"Mix and per-sample cost (forward + backward, π0 on h100-80g, share of an {MICRO_BATCH}-sample "
             f"microbatch): {shapes}; mean {table.mean_ms:.2f} ms.", "",
             "| GPUs | global batch | split | mean step ms | p95 step ms | vs random | samples per rank |",
             "|---:|---:|---|---:|---:|---:|---:|", *rows, "",
             f"Padded instead (every sample of a rank at that rank's largest shape), every split's step is "
             f"{min(padded):.1f}–{max(padded):.1f} ms over all draws: some rank holds a "
             f"{max(c for c, _ in MIX)}-camera sample {'in every draw' if min(padded) == max(padded) else 'nearly always'}, so balancing pays only where samples run at their own shape.",
             "",
             computed_line("python benchmarks/uneven_batches.py --only simulated --write")]
    return "\n".join(lines)


def _cpu_seconds(work, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return float(np.median(times))


def speed_block(repeats: int = 5) -> str:
    """The measured block: CPU seconds of balancing and of per-batch microbatch planning."""
    table = pi0_costs()
    sample = np.asarray(table.sample_ms)
    rng = np.random.default_rng(1)
    big = sample[table.draw(4096, seed=rng)]
    rank = sample[table.draw(128, seed=rng)]
    share = np.full(8, 1 / 8)
    rows = [
        ("balance: 4,096 samples over 256 ranks", _cpu_seconds(lambda: balance(big, 256), repeats), 0.050),
        ("WLB-LLM packing, same batch", _cpu_seconds(lambda: packing_split(big, 256), repeats), None),
        ("plan_microbatches: 128 samples, m = 32, P = 8 (1F1B)",
         _cpu_seconds(lambda: plan_microbatches(rank, 32, stage_share=share), repeats), 0.100),
    ]
    lines = ["| what | CPU ms (median) | target ms |", "|---|---:|---:|"]
    for name, seconds, target in rows:
        lines.append(f"| {name} | {seconds * 1e3:.1f} | {'' if target is None else f'{target * 1e3:.0f}'} |")
    lines += ["", measured_line(run_command(sys.argv[:1] + ["--only", "speed", "--write"]))]
    return "\n".join(lines)


# ------------------------------------------------------------------ a real DDP loop on 2 gloo processes

CPU_CAMERAS = (1, 2, 3, 4)
CPU_WEIGHTS = (0.4, 0.3, 0.2, 0.1)
CPU_PER_RANK, CPU_STEPS, CPU_WORLD = 4, 24, 2


def _ddp_worker(rank: int, world: int, batches: list[list[int]], cameras: list[int]) -> dict[str, list[float]]:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    torch.manual_seed(0)

    class Model(nn.Module):
        """A per-image encoder (runs once per camera) and a small head over the pooled features."""

        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512))
            self.head = nn.Linear(512, 8)

        def forward(self, images: torch.Tensor) -> torch.Tensor:  # images: [cameras, 128, 512] of one sample
            return self.head(self.encoder(images).mean(dim=(0, 1)))

    model = DistributedDataParallel(Model())
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    images = {c: torch.randn(c, 128, 512) for c in CPU_CAMERAS}

    def run(indices: list[int]) -> tuple[float, float]:
        """(wall seconds of the step, this rank's CPU seconds in it)."""
        dist.barrier()
        start, cpu = time.perf_counter(), time.process_time()
        optimizer.zero_grad()
        with model.no_sync():
            for index in indices[:-1]:
                model(images[cameras[index]]).square().mean().backward()
        model(images[cameras[indices[-1]]]).square().mean().backward()  # the last one all-reduces
        optimizer.step()
        cpu = time.process_time() - cpu
        dist.barrier()
        return time.perf_counter() - start, cpu

    # per-camera-count timing of one sample (forward + backward), for the prediction
    single: dict[str, list[float]] = {}
    for _ in range(5):
        for c in CPU_CAMERAS:
            start = time.process_time()
            with model.no_sync():
                model(images[c]).square().mean().backward()
            single.setdefault(str(c), []).append(time.process_time() - start)
    out: dict[str, list[float]] = {"random": [], "balanced": [], "random cpu": [], "balanced cpu": [], **single}
    for step, indices in enumerate(batches):
        costs = np.array([cameras[i] for i in indices], dtype=float)
        order = ("random", "balanced") if step % 2 == 0 else ("balanced", "random")
        for kind in order:  # the same global batch both ways, alternating which runs first
            result = random_split(costs, world, seed=step) if kind == "random" else balance(costs, world)
            mine = [indices[i] for i in result.members(rank)]
            wall, cpu = run(mine)
            out[kind].append(wall)
            out[kind + " cpu"].append(cpu)
    return out


def cpu_block() -> str:
    """The measured block: random vs balanced on a real 2-process DDP loop (gloo, CPU)."""
    from pipeplan.runtime import spawn

    rng = np.random.default_rng(0)
    samples = CPU_PER_RANK * CPU_WORLD * CPU_STEPS
    cameras = [int(c) for c in rng.choice(CPU_CAMERAS, size=samples, p=CPU_WEIGHTS)]
    batches = [list(range(s * CPU_PER_RANK * CPU_WORLD, (s + 1) * CPU_PER_RANK * CPU_WORLD)) for s in range(CPU_STEPS)]
    results = spawn(_ddp_worker, CPU_WORLD, batches, cameras, timeout=600)
    # step 0 warms up; the wall step is rank 0's (both wait at the barrier); the CPU step is the slower rank's
    wall = {kind: float(np.mean(results[0][kind][1:])) for kind in ("random", "balanced")}
    cpu = {kind: float(np.mean(np.max([r[kind + " cpu"][1:] for r in results], axis=0)))
           for kind in ("random", "balanced")}
    per_camera = {c: float(np.median([np.median(r[str(c)]) for r in results])) for c in CPU_CAMERAS}
    predicted = []
    for step, indices in enumerate(batches):
        costs = np.array([per_camera[cameras[i]] for i in indices])
        split_costs = np.array([cameras[i] for i in indices], dtype=float)
        random_loads = np.bincount(random_split(split_costs, CPU_WORLD, seed=step).assignment, weights=costs)
        balanced_loads = np.bincount(balance(split_costs, CPU_WORLD).assignment, weights=costs)
        predicted.append((random_loads.max(), balanced_loads.max()))
    pred = np.mean([p[0] for p in predicted[1:]]) / np.mean([p[1] for p in predicted[1:]])
    per = ", ".join(f"{c}: {per_camera[c] * 1e3:.1f}" for c in CPU_CAMERAS)
    lines = [f"{CPU_WORLD} gloo processes, {CPU_PER_RANK} samples per rank, {CPU_STEPS} global batches (the first "
             f"a warm-up), each run both ways; one sample's forward + backward by camera count (CPU ms): {per}. "
             "The slowest rank's CPU time is what the step would be on idle cores; the wall step also holds "
             "the waits of a shared machine.", "",
             "| split | mean wall step ms | mean slowest-rank CPU ms | random ÷ this, wall | random ÷ this, CPU "
             "| random ÷ this, predicted |", "|---|---:|---:|---:|---:|---:|",
             f"| random split | {wall['random'] * 1e3:.1f} | {cpu['random'] * 1e3:.1f} | 1.00 | 1.00 | 1.00 |",
             f"| pipeplan balance | {wall['balanced'] * 1e3:.1f} | {cpu['balanced'] * 1e3:.1f} | "
             f"{wall['random'] / wall['balanced']:.2f} | {cpu['random'] / cpu['balanced']:.2f} | {pred:.2f} |", "",
             measured_line(run_command(sys.argv[:1] + ["--only", "cpu", "--write"]))]
    return "\n".join(lines)


# ------------------------------------------------- pipeplan's runtime: mixed-shape pipeline microbatches

PIPE_SAMPLES, PIPE_MICROBATCHES, PIPE_STEPS = 8, 4, 41
PIPE_TOKENS, PIPE_WIDTH = 64, 256


def _pipeline_worker(rank: int, world: int, steps: list[dict[str, list[list[int]]]],
                     cameras: list[int]) -> dict[str, list[float]]:
    import torch
    from torch import nn

    import pipeplan
    from pipeplan.runtime import PipelineRuntime

    torch.set_num_threads(1)
    torch.manual_seed(0)

    def mlp() -> nn.Module:
        return nn.Sequential(nn.Linear(PIPE_WIDTH, 4 * PIPE_WIDTH), nn.GELU(), nn.Linear(4 * PIPE_WIDTH, PIPE_WIDTH))

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mix, self.out = mlp(), nn.Linear(PIPE_WIDTH, 8)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # [images, tokens, width] -> [images, 8]
            return self.out(self.mix(tokens).mean(dim=1))

    # stage 0 runs once per camera image (its tokens), stage 1 on every image's tokens: both follow the cameras
    runtime = PipelineRuntime([mlp(), Head()], pipeplan.build_schedule("1f1b", num_stages=2,
                                                                        num_microbatches=PIPE_MICROBATCHES),
                              lambda out, target: (out - target).square().mean())
    pixels = {c: torch.randn(c, PIPE_TOKENS, PIPE_WIDTH) for c in range(1, 5)}

    def batch(groups: list[list[int]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        inputs = [torch.cat([pixels[cameras[i]] for i in group]) for group in groups]  # a microbatch's images
        return inputs, [torch.zeros(len(x), 8) for x in inputs]

    out: dict[str, list[float]] = {"random": [], "balanced": [], "forward": [0.0, 0.0], "backward": [0.0, 0.0],
                                   "images": [0.0]}
    for step, orders in enumerate(steps):
        for kind in (("random", "balanced") if step % 2 == 0 else ("balanced", "random")):
            result = runtime.step_microbatches(*batch(orders[kind]))
            if rank == 0:
                out[kind].append(result.timeline.makespan)
            if step:  # per-image stage times for the prediction, the warm-up left out
                for stage in runtime.local_stages:
                    out["forward"][stage] += result.forward_time[stage]
                    out["backward"][stage] += result.backward_time[stage]
                out["images"][0] += sum(cameras[i] for group in orders[kind] for i in group)
    return out


def pipeline_block() -> str:
    """The measured block: pipeplan's runtime on mixed-shape microbatches, in draw order vs balanced."""
    from pipeplan.batches import pipeline_makespan
    from pipeplan.runtime import spawn

    rng = np.random.default_rng(1)
    cameras = [int(c) for c in rng.choice(CPU_CAMERAS, size=PIPE_SAMPLES * PIPE_STEPS, p=CPU_WEIGHTS)]
    per = PIPE_SAMPLES // PIPE_MICROBATCHES
    steps = []
    for step in range(PIPE_STEPS):
        indices = list(range(step * PIPE_SAMPLES, (step + 1) * PIPE_SAMPLES))
        plan = plan_microbatches(np.array([cameras[i] for i in indices], dtype=float), PIPE_MICROBATCHES,
                                 stage_share=[0.5, 0.5])
        steps.append({"random": [indices[m * per:(m + 1) * per] for m in range(PIPE_MICROBATCHES)],
                      "balanced": [[indices[i] for i in group] for group in plan.microbatches]})
    results = spawn(_pipeline_worker, 2, steps, cameras, timeout=600)
    measured = {kind: float(np.mean(results[0][kind][1:])) for kind in ("random", "balanced")}
    images = results[0]["images"][0]
    forward = [results[stage]["forward"][stage] / images for stage in range(2)]  # ms per image, stage s on rank s
    backward = [results[stage]["backward"][stage] / images for stage in range(2)]
    predicted = {}
    for kind in ("random", "balanced"):
        spans = []
        for orders in steps[1:]:
            counts = np.array([sum(cameras[i] for i in group) for group in orders[kind]], dtype=float)
            spans.append(pipeline_makespan(np.outer(forward, counts), np.outer(backward, counts)))
        predicted[kind] = float(np.mean(spans))
    lines = [f"pipeplan's runtime (`PipelineRuntime.step_microbatches`), 2 gloo processes, 1F1B over 2 stages, "
             f"{PIPE_SAMPLES} samples a step in {PIPE_MICROBATCHES} microbatches of {per}, {PIPE_STEPS} global batches "
             "(the first a warm-up), each run both ways; a microbatch's tensor is its samples' camera images "
             f"([images, {PIPE_TOKENS}, {PIPE_WIDTH}]), so microbatches and the activations between the stages "
             "differ in shape. *Random*: microbatches in draw order; *balanced*: `plan_microbatches` on the camera "
             "counts. Predicted: `pipeline_makespan` on each microbatch's images times the measured ms per image "
             f"of each stage (forward {forward[0]:.2f} and {forward[1]:.2f}, backward {backward[0]:.2f} and "
             f"{backward[1]:.2f}).", "",
             "| microbatches | mean measured step ms | mean predicted step ms | random ÷ this, measured "
             "| random ÷ this, predicted |", "|---|---:|---:|---:|---:|",
             f"| random (draw order) | {measured['random']:.1f} | {predicted['random']:.1f} | 1.00 | 1.00 |",
             f"| pipeplan balanced | {measured['balanced']:.1f} | {predicted['balanced']:.1f} | "
             f"{measured['random'] / measured['balanced']:.2f} | {predicted['random'] / predicted['balanced']:.2f} |",
             "", measured_line(run_command(sys.argv[:1] + ["--only", "pipeline", "--write"]))]
    return "\n".join(lines)


BLOCKS = {"simulated": ("uneven-batches", simulated_block), "speed": ("uneven-speed", speed_block),
          "cpu": ("uneven-cpu", cpu_block), "pipeline": ("uneven-pipeline", pipeline_block)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=tuple(BLOCKS), default=None, help="one table (default: all)")
    add_write_flag(parser, DOC)
    args = parser.parse_args(argv)
    for key, (name, block) in BLOCKS.items():
        if args.only not in (None, key):
            continue
        body = block()
        print(body, end="\n\n")
        if args.write:
            replace_between(DOC, name, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
