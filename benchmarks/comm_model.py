"""The planner's communication and memory model against published FSDP/ZeRO and tensor-parallel runs.

    python benchmarks/comm_model.py            # print the table
    python benchmarks/comm_model.py --write    # also record it in docs/planner.md

Nothing here is fitted: the devices and links are the presets of
:mod:`pipeplan.hardware` (their constants were fitted once, per device, to other
measurements: docs/cost_model.md), and every row is predicted by the planner's
own evaluation of the published configuration (:func:`pipeplan.planner.evaluate_layout`
for the data-parallel rows, :meth:`pipeplan.planner.Workload.with_tensor_parallel`
for the tensor-parallel layer). Rows:

* **tensor parallelism**: Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", Table 4: one layer of their 22B
  GPT at TP = 8 on A100 80GB (NVLink 3), forward and backward ms with and without
  sequence parallelism. The times include the tensor-parallel collectives (the
  forward's exposed, the backward's beside the weight-gradient GEMMs);
* **FSDP**: torchtitan's Llama 3.1 8B benchmark (benchmarks/llama3_h100_202412_torchtitan.md,
  Tables 1 and 3: FSDP2 on 8 and on 128 H100s, local batch 2, sequence 8192,
  per-op selective recompute, bf16 parameters and fp32 reduction): step time
  = 2 · 8192 / tokens per second per GPU, and peak memory (reserved, so it also
  holds the allocator's fragmentation, which pipeplan does not model), priced as ``plan --engine
  torchtitan --gpu h100-96g --recompute op`` prices them (torchtitan's eager factor on that device is
  fitted to the 8-GPU row's step: benchmarks/torchtitan_h100.py; what this table checks is what the
  communication across nodes adds);
* **ZeRO-3 where its communication shows**: Narayanan et al. 2021, Table 2: GPT-3
  175B with DeepSpeed ZeRO-3 and no model parallelism on 384, 768 and 1536 A100
  80GB (8 × HDR InfiniBand per node), global batch 1536, micro-batch 4, 2, 1,
  activation recomputation: model TFLOP/s per GPU (their Eq. 3's FLOPs).

The published numbers and their setups are in the comments beside them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import computed_line, print_or_write, signed  # noqa: E402

from pipeplan import engines, hardware  # noqa: E402
from pipeplan.models.layer_costs import layer_profile  # noqa: E402
from pipeplan.models.modules import Embedding, LMHead, TransformerStack  # noqa: E402
from pipeplan.models.spec import ModelSpec  # noqa: E402
from pipeplan.planner import Cluster, Workload  # noqa: E402
from pipeplan.planner.evaluate import evaluate_layout  # noqa: E402
from pipeplan.planner.space import Config  # noqa: E402

GIB = 2**30
DOC = Path(__file__).resolve().parent.parent / "docs" / "planner.md"
COMMAND = "python benchmarks/comm_model.py --write"


def korthikanti_rows() -> list[tuple[str, float, float]]:
    """(label, published, predicted): one 22B layer at TP 8 (Korthikanti et al. 2022, Table 4)."""
    # Table 4 (no recompute): forward / backward ms, TP only 7.7 / 11.9, with sequence parallelism 7.2 / 11.8.
    # The 22B model: h 6144, 64 heads, s 2048, b 4, FFN 4h, GeLU, LayerNorm, dropout (their Table 3).
    published = {False: (7.7, 11.9), True: (7.2, 11.8)}
    stack = TransformerStack(name="layers", num_layers=48, hidden_size=6144, num_heads=64, seq_length=2048,
                             ffn_hidden_size=4 * 6144, bias=True, dropout=True, causal=True)
    spec = ModelSpec("gpt-22b", (stack,))
    device = hardware.device("a100-80g")
    rows = []
    for sequence_parallel, (forward, backward) in published.items():
        # the planner always pairs tensor parallelism with sequence parallelism; without it the
        # collectives are all-reduces of the same ring volume, and the norms run unsplit
        work = Workload.from_spec(spec, device, tp_link=hardware.link("nvlink-a100"))
        profile = work.with_tensor_parallel(8).profile(4, "none")
        if not sequence_parallel:
            bare_sp = layer_profile(spec, device, 4, recompute="none", tensor_parallel=8, sequence_parallel=True)
            bare = layer_profile(spec, device, 4, recompute="none", tensor_parallel=8, sequence_parallel=False)
            f = profile.forward[1] - bare_sp.forward[1] + bare.forward[1]
            b = profile.backward[1] - bare_sp.backward[1] + bare.backward[1]
        else:
            f, b = profile.forward[1], profile.backward[1]
        label = "22B layer, TP 8" + (" + sequence parallel" if sequence_parallel else "")
        rows += [(f"{label}: forward ms", forward, f), (f"{label}: backward ms", backward, b)]
    return rows


def llama3_8b() -> ModelSpec:
    """Llama 3.1 8B as torchtitan builds it (torchtitan/models/llama/__init__.py @9dec370): 8,030,261,248 params."""
    seq = 8192  # train_configs/llama3_8b.toml @9dec370
    return ModelSpec("llama3-8b", (
        Embedding(name="tok_embeddings", vocab_size=128_256, hidden_size=4096, tokens=seq),
        TransformerStack(name="layers", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                         seq_length=seq, ffn_hidden_size=14_336, gated_mlp=True, norm="rmsnorm", bias=False,
                         causal=True, attention="flash", final_norm=True),
        LMHead(name="output", vocab_size=128_256, hidden_size=4096, tokens=seq),
    ))


@dataclass(frozen=True)
class FsdpRow:
    gpus: int
    tokens_per_second: float  # per GPU
    memory_gib: float  # max reserved


#: torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 1 (8 GPUs, one node) and Table 3 (128 GPUs,
#: 16 nodes, 400 Gb/s RDMA per GPU), "FSDP" rows (eager, bf16): tokens/s per GPU and peak reserved memory.
TORCHTITAN_FSDP = (FsdpRow(8, 5762, 82.4), FsdpRow(128, 5605, 67.0))


def torchtitan_rows() -> list[tuple[str, float, float]]:
    """(label, published, predicted): Llama 3.1 8B with FSDP2 on 8 and 128 H100s."""
    spec = llama3_8b()
    rows = []
    steps = []
    for row in TORCHTITAN_FSDP:
        # their H100 is pipeplan's h100-96g (96 GB HBM2e at 500 W), priced as plan --engine torchtitan prices it:
        # torchtitan's eager kernels on that device (fitted to the 8-GPU row's step: benchmarks/torchtitan_h100.py),
        # its per-op checkpointing and its loss
        device = hardware.device("h100-96g")
        cluster = Cluster(row.gpus, device, hardware.link("nvlink-h100"), hardware.link("ib-ndr"), 8)
        work = Workload.from_spec(spec, device, compute_factor=engines.get("torchtitan").compute_factor("h100-96g"))
        config = Config(1, row.gpus, 2, 1, "1f1b", 1, "op", 1, "fsdp")
        plan = evaluate_layout(work.with_recompute("op"), cluster, config, (work.num_layers,),
                               memory_capacity=96e9, engine="torchtitan")
        published_ms = 2 * 8192 / row.tokens_per_second * 1e3
        rows.append((f"Llama 3.1 8B FSDP, {row.gpus} H100: step ms", published_ms, plan.step_time or 0.0))
        steps.append((published_ms, plan.step_time or 0.0))
        rows.append((f"Llama 3.1 8B FSDP, {row.gpus} H100: exposed FSDP communication ms (not published)",
                     float("nan"), plan.exposed_dp_time))
        rows.append((f"Llama 3.1 8B FSDP, {row.gpus} H100: peak GiB (published: reserved)", row.memory_gib,
                     max(plan.peak_memory) / GIB))
    (small, small_ours), (large, large_ours) = steps
    rows.append(("Llama 3.1 8B FSDP, 8 → 128 H100: step ms added (the communication across nodes)",
                 large - small, large_ours - small_ours))
    return rows


def gpt3_175b() -> ModelSpec:
    """GPT-3 175B as Narayanan et al. 2021 run it: 96 layers, h 12288, 96 heads, s 2048, vocab 51,200."""
    seq = 2048
    return ModelSpec("gpt3-175b", (
        Embedding(name="embedding", vocab_size=51_200, hidden_size=12_288, tokens=seq, position_tokens=seq),
        TransformerStack(name="layers", num_layers=96, hidden_size=12_288, num_heads=96, seq_length=seq,
                         ffn_hidden_size=4 * 12_288, bias=True, causal=True, final_norm=True),
        LMHead(name="head", vocab_size=51_200, hidden_size=12_288, tokens=seq, tied_to="embedding"),
    ))


#: Narayanan et al. 2021 (arXiv 2104.04473) Table 2, ZeRO-3 without model parallelism, 174.6B, batch 1536:
#: (GPUs, micro-batch, TFLOP/s per GPU).
ZERO3_ROWS = ((384, 4, 144.0), (768, 2, 88.0), (1536, 1, 44.0))


def zero3_rows() -> list[tuple[str, float, float]]:
    """(label, published, predicted) model TFLOP/s per GPU of ZeRO-3 on GPT-3 175B."""
    spec = gpt3_175b()
    device = hardware.device("a100-80g")
    work = Workload.from_spec(spec, device)
    # their Eq. 3 (with activation recomputation): 96 · B · s · l · h² · (1 + s/6h + V/16lh)
    b_total, s, layers, h, vocab = 1536, 2048, 96, 12_288, 51_200
    flops = 96 * b_total * s * layers * h**2 * (1 + s / (6 * h) + vocab / (16 * layers * h))
    rows = []
    for gpus, micro, published in ZERO3_ROWS:
        cluster = Cluster(gpus, device, hardware.link("nvlink-a100"), hardware.link("ib-hdr"), 8)
        config = Config(1, gpus, micro, b_total // (gpus * micro), "1f1b", 1, "full", 1, "fsdp")
        plan = evaluate_layout(work, cluster, config, (work.num_layers,))
        seconds = plan.step_seconds or 0.0
        rows.append((f"GPT-3 175B ZeRO-3, {gpus} A100, micro-batch {micro}: TFLOP/s per GPU", published,
                     flops / seconds / gpus / 1e12))
        # the step their TFLOP/s give, and how much of pipeplan's step is data-parallel communication left exposed
        rows.append((f"GPT-3 175B ZeRO-3, {gpus} A100: step s (from the published TFLOP/s)",
                     flops / (published * 1e12 * gpus), seconds))
        rows.append((f"GPT-3 175B ZeRO-3, {gpus} A100: exposed data-parallel communication s (not published)",
                     float("nan"), plan.exposed_dp_time * plan.time_unit))
    return rows


def table() -> str:
    lines = ["| measurement | published | pipeplan | error |", "|---|---|---|---|"]
    for label, published, predicted in korthikanti_rows() + torchtitan_rows() + zero3_rows():
        if published != published:  # not published: shown for the reader
            lines.append(f"| {label} | — | {predicted:.3g} | — |")
            continue
        lines.append(f"| {label} | {published:.4g} | {predicted:.4g} | {signed(predicted / published - 1, '+.1%')} |")
    return "\n".join(lines)


def block() -> str:
    """What ``--write`` records between the ``planner-comm`` markers (tests/test_docs_tables.py checks it)."""
    return f"{table()}\n\n{computed_line(COMMAND)}"


def main() -> int:
    return print_or_write(DOC, "planner-comm", block, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
