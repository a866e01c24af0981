"""Benchmark: torchtitan's async TP, published pairs against pipeplan's TP overlap modes (no knob priced yet).

    python benchmarks/torchtitan_async_tp.py     # print the comparison

The published pairs: torchtitan ``benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md`` (github.com/pytorch/
torchtitan, at b5bcd76c): H100 (96 GB HBM2e, 500 W; 400 Gb/s per GPU), torch.compile, bf16 rows only:
Llama 3.1 8B on 64 GPUs (FSDP 8, TP 8, per-op checkpointing, local batch 12) 4,378 → 4,809.4 tokens/s, and
Llama 3.1 70B on 256 GPUs (FSDP 32, TP 8, full checkpointing, local batch 16) 597.3 → 652.4, vanilla TP → async
TP. Each is priced on pipeplan's ``h100-80g`` (seq 8192, FSDP without a pipeline, sequence parallelism on) under
each of pipeplan's ``--tp-comm-overlap`` modes (Megatron-LM's: ``off`` nothing hidden, ``backward`` the
backward's collectives behind the weight-gradient GEMMs, ``on`` every collective behind its GEMMs), and the
published async/vanilla ratio is set beside the ratios pipeplan's modes give. It says which pair of modes, if
any, prices vanilla and async TP; nothing is fitted and no knob reads it yet (docs/engines.md, "What is left").
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_fidelity import llama  # noqa: E402
from pipeplan import hardware  # noqa: E402
from pipeplan.plan import Recompute, TpCommOverlap  # noqa: E402
from pipeplan.planner import Cluster, Workload  # noqa: E402
from pipeplan.planner.evaluate import evaluate_layout  # noqa: E402
from pipeplan.planner.space import Config  # noqa: E402

SOURCE = "torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md"
#: (model, GPUs, TP, local batch, checkpointing, vanilla TP tokens/s, async TP tokens/s)
PAIRS: tuple[tuple[str, int, int, int, Recompute, float, float], ...] = (
    ("Llama 3 8B", 64, 8, 12, "op", 4378.0, 4809.4),
    ("Llama 3 70B", 256, 8, 16, "full", 597.3, 652.4),
)
SEQ = 8192


def tokens_per_gpu(name: str, gpus: int, tp: int, batch: int, recompute: Recompute, overlap: TpCommOverlap) -> float:
    """Tokens per second per GPU as pipeplan prices the run under ``overlap``."""
    device = hardware.device("h100-80g")
    link = hardware.link("nvlink-h100")
    cluster = Cluster(gpus, device, link, hardware.link("ib-ndr"), 8)
    work = Workload.from_spec(llama(name), device, tp_link=link, tp_comm_overlap=overlap)
    work = work.with_tensor_parallel(tp).with_recompute(recompute)
    config = Config(1, gpus // tp, batch, 1, "1f1b", 1, recompute, tp, "fsdp")
    plan = evaluate_layout(work, cluster, config, (work.num_layers,), sync="megatron-overlap")
    return batch * SEQ / (plan.step_seconds or float("inf")) / tp


def table() -> str:
    lines = ["| run | published vanilla → async | published ratio | off | backward | on | on / off | "
             "backward / off | on / backward |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, gpus, tp, batch, recompute, vanilla, fast in PAIRS:
        got = {mode: tokens_per_gpu(name, gpus, tp, batch, recompute, mode) for mode in ("off", "backward", "on")}
        lines.append(f"| {name}, {gpus} GPUs, TP {tp}, {recompute}, b {batch} | {vanilla:,.1f} → {fast:,.1f} | "
                     f"{fast / vanilla:.3f} | {got['off']:,.0f} | {got['backward']:,.0f} | {got['on']:,.0f} | "
                     f"{got['on'] / got['off']:.3f} | {got['backward'] / got['off']:.3f} | "
                     f"{got['on'] / got['backward']:.3f} |")
    return "\n".join(lines) + f"\n\nPublished: {SOURCE}; predicted: tokens/s per GPU on pipeplan's h100-80g."


if __name__ == "__main__":
    print(table())
