"""Benchmark: torchtitan's ``torch.compile`` on and off, published pairs against ``--compile``'s pricing.

    python benchmarks/torchtitan_compile.py              # print the table
    python benchmarks/torchtitan_compile.py --write      # also record it in docs/engines.md
    python benchmarks/torchtitan_compile.py --fit        # refit the speedup (the 8-GPU pair only)

The published pairs: torchtitan ``docs/performance.md`` at commit d4c86e375 (github.com/pytorch/torchtitan):
Llama 3.1 8B, FSDP over 8 and over 128 H100 (96 GB HBM2e, 500 W; hosts with 400 Gb/s per GPU), local batch 2, seq 8192,
selective per-op checkpointing (``train_configs/llama3_8b.toml`` at 9dec370, the commit the file names:
``selective_ac_option = 'op'``), TPS per GPU with ``training.compile`` off and on (Float8 rows left out).

``plan --engine torchtitan --compile on`` prices compile as a speedup of torchtitan's eager kernels
(``TORCHTITAN_COMPILE_SPEEDUP`` in pipeplan/engines/torchtitan.py): each layer's compute time is the eager
factor divided by it (never below the device's fused-kernel model, factor 1). One constant, fitted by
``--fit`` to the 8-GPU pair alone (the predicted on/off ratio of tokens per second equals the published
one); the 128-GPU pair checks it (its FSDP collectives cross 16 nodes). The pairs are priced on pipeplan's
``h100-80g`` (the file's H100 has HBM2e at 500 W: only the ratio is compared), with the eager level at the
device model (× 1) and compile at × 1 / speedup.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import computed_line, print_or_write  # noqa: E402

from engine_fidelity import llama  # noqa: E402
from pipeplan import hardware  # noqa: E402
from pipeplan.engines._eager import TORCHTITAN_COMPILE_SPEEDUP  # noqa: E402
from pipeplan.planner import Cluster, Workload  # noqa: E402
from pipeplan.planner.evaluate import evaluate_layout  # noqa: E402
from pipeplan.planner.space import Config  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "engines.md"
MARKER = "torchtitan-compile"
COMMAND = "python benchmarks/torchtitan_compile.py --write"
SOURCE = "torchtitan performance.md @d4c86e375"
#: (GPUs, published TPS per GPU without compile, with compile, a fitting row); Table 1 and Table 3 of the file.
PAIRS = (
    (8, 5762, 6667, True),
    (128, 5605, 6514, False),
)
BATCH, SEQ, RECOMPUTE = 2, 8192, "op"


def tokens_per_gpu(gpus: int, factor: float) -> float:
    """Tokens per second per GPU of the run as ``plan --engine torchtitan --dp-modes fsdp --pp 1 --tp 1`` prices it,
    each layer's compute × ``factor``."""
    device = hardware.device("h100-80g")
    cluster = Cluster(gpus, device, hardware.link("nvlink-h100"), hardware.link("ib-ndr"), 8)
    work = Workload.from_spec(llama("Llama 3 8B"), device, tp_link=hardware.link("nvlink-h100"))
    work = work.with_recompute(RECOMPUTE).with_compute_factor(factor)
    config = Config(1, gpus, BATCH, 1, "1f1b", 1, RECOMPUTE, 1, "fsdp")
    plan = evaluate_layout(work, cluster, config, (work.num_layers,), sync="megatron-overlap")
    return BATCH * SEQ / (plan.step_seconds or float("inf"))


def predicted_ratio(gpus: int, speedup: float) -> float:
    """Predicted tokens per second with compile over without."""
    return tokens_per_gpu(gpus, 1.0 / speedup) / tokens_per_gpu(gpus, 1.0)


def fit_speedup(tolerance: float = 1e-9) -> float:
    """The speedup whose predicted on/off ratio on the fitting pair is the published one (``s ← s × published /
    predicted``, from the published ratio)."""
    gpus, off, on, _ = next(pair for pair in PAIRS if pair[3])
    speedup = on / off
    for _ in range(30):
        error = (on / off) / predicted_ratio(gpus, speedup)
        speedup *= error
        if abs(error - 1.0) < tolerance:
            break
    return speedup


def block() -> str:
    """The table: each pair's published and predicted ratio, and the error of the held-out one."""
    lines = ["| run | GPUs | published TPS off → on | published on/off | predicted on/off | error | row |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for gpus, off, on, fitting in PAIRS:
        published = on / off
        predicted = predicted_ratio(gpus, TORCHTITAN_COMPILE_SPEEDUP)
        lines.append(f"| Llama 3.1 8B, FSDP, op, b {BATCH} ({SOURCE}) | {gpus} | {off:,} → {on:,} | "
                     f"{published:.3f} | {predicted:.3f} | {100 * (predicted / published - 1):+.1f}% | "
                     f"{'fitting' if fitting else 'held out'} |")
    lines += ["", f"Speedup in use: {TORCHTITAN_COMPILE_SPEEDUP:.3f} (`python benchmarks/torchtitan_compile.py "
                  "--fit`, the 8-GPU pair only).", "", computed_line(COMMAND)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--fit" in args:
        print(f"torchtitan compile speedup, fitted to the 8-GPU pair: {fit_speedup():.4f} "
              f"(in use: {TORCHTITAN_COMPILE_SPEEDUP:.3f})")
        return 0
    return print_or_write(DOC, MARKER, block, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
