"""Benchmark: pipeplan's cost model against published GPU measurements.

    python benchmarks/cost_model.py              # print all tables
    python benchmarks/cost_model.py --write      # also record them in docs/cost_model.md
    python benchmarks/cost_model.py --fit        # refit the A100 constants on Table 9 and print them

What is compared (docs/cost_model.md explains the model and every constant):

1. **Per-pass times** (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Table 9):
   T_F, T_B, T_W of a middle stage and T_comm of one activation message, for the
   1.5B and 6.2B GPTs on A100 SXM 80 GB (the paper's Table 3 shapes, seq 1024).
   These six times are the only data the A100's three fitted constants see
   (``--fit``: gemm_efficiency from T_W, memory and random efficiency from T_F, T_B).
2. **Throughput and memory** (Table 4): samples per GPU per second of 1F1B,
   1F1B-I (interleaved, one layer per chunk), ZB-1p and ZB-2p (the best
   zero-bubble order at 1× and 2× 1F1B's activation memory) for m = 24, 32, 64,
   through the planner's own evaluation (pipeline, optimizer step), peak memory,
   and whether the four schedules rank as measured. Nothing is fitted to these.
3. **Other published measurements** (section "Held out"), with no constant
   fitted to them.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pipeplan import hardware
from pipeplan.hardware import Device
from pipeplan.models.layer_costs import LayerCost, layer_costs
from pipeplan.models.modules import Embedding, LMHead, TransformerStack
from pipeplan.models.spec import ModelSpec
from pipeplan.plan import Plan
from pipeplan.planner import Cluster, Workload
from pipeplan.planner.evaluate import evaluate_layout
from pipeplan.planner.space import Config
from pipeplan.presets.reference import ZERO_BUBBLE_MODELS, zero_bubble_gpt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import add_write_flag, computed_line, replace_between, signed  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "cost_model.md"
COMMAND = "python benchmarks/cost_model.py --write"


@dataclass(frozen=True)
class PassTimes:
    """Published per-pass times of a middle stage, ms (Qi et al. 2024, Table 9, at the first m)."""

    model: str
    forward: float
    input_grad: float
    weight_grad: float
    comm: float


#: Qi et al. 2024 (ICLR), Table 9: T_F / T_B / T_W / T_comm in ms, A100 SXM 80 GB, seq 1024.
TABLE_9 = (
    PassTimes("1.5b", 18.522, 18.086, 9.337, 0.601),
    PassTimes("6.2b", 29.718, 29.444, 19.927, 0.527),
)


#: The vocabulary the runs used. The paper does not state it; its repository's training script
#: (sail-sg/zero-bubble-pipeline-parallelism, examples/pretrain_zero_bubble.sh) uses
#: GPTSentencePieceTokenizer with the sample dataset's tokenizer.model, which we take to be
#: LLaMA's 32,000-token SentencePiece model (an assumption: see docs/cost_model.md).
VOCAB = 32_000


def middle_layers(size: str) -> int:
    """Transformer layers on a middle stage: the first and last stage hold one fewer (Qi et al. §5.1)."""
    layers, _, _, gpus, _ = ZERO_BUBBLE_MODELS[size]
    return (layers + 2) // gpus


def paper_model(size: str) -> ModelSpec:
    """The paper's GPT with the vocabulary of its repository's tokenizer (:data:`VOCAB`)."""
    return zero_bubble_gpt(size, vocab_size=VOCAB)


def middle_layer(size: str) -> tuple[ModelSpec, LayerCost]:
    """The spec and one middle transformer layer at the paper's micro-batch size, no recompute."""
    spec = paper_model(size)
    micro_batch = ZERO_BUBBLE_MODELS[size][4]
    return spec, layer_costs(spec, micro_batch, recompute="none")[1]


def pass_times(device: Device, size: str) -> tuple[float, float, float]:
    """Predicted T_F, T_B, T_W of a middle stage, ms."""
    _, layer = middle_layer(size)
    count = middle_layers(size)
    return (count * device.ops_milliseconds(layer.forward_ops),
            count * device.ops_milliseconds(layer.input_grad_ops),
            count * device.ops_milliseconds(layer.weight_grad_ops))


def message_ms(size: str, link: hardware.Link) -> float:
    """Predicted T_comm: one activation (b · s · h 16-bit values) over ``link``, ms."""
    spec, layer = middle_layer(size)
    return link.milliseconds(layer.send_bytes)


# ----------------------------------------------------------------------------- the fit
def _class_times(device: Device, size: str) -> np.ndarray:
    """Per pass (F, B, W): [GEMM time at efficiency 1, plain memory time at 1, random-mask at 1, fixed], ms.

    A GEMM on the bandwidth roof at ``device``'s constants counts as fixed time;
    attention kernels (none without recompute) count at their current time.
    """
    _, layer = middle_layer(size)
    count = middle_layers(size)
    rows = []
    for ops in (layer.forward_ops, layer.input_grad_ops, layer.weight_grad_ops):
        compute = plain = random = fixed = 0.0
        for op in ops:
            fixed += device.launch_overhead_ms
            run = device.op_milliseconds(op) - device.launch_overhead_ms
            if op.kind == "memory":
                at_one = 1e3 * op.bytes / device.memory_bandwidth
                if op.random:
                    random += at_one
                else:
                    plain += at_one
            elif op.kind == "gemm" and run > 1e3 * op.bytes / device.memory_bandwidth * (1 + 1e-9):
                compute += run * device.gemm_efficiency
            else:
                fixed += run
        rows.append([count * compute, count * plain, count * random, count * fixed])
    return np.array(rows)


def fit_a100(base: Device, iterations: int = 8) -> dict[str, float]:
    """Least squares (relative errors) of gemm, memory and random efficiency on Table 9's T_F, T_B, T_W.

    Each pass's time is ``G / gemm_efficiency + M / memory_efficiency + R / random_efficiency
    + fixed`` (G, M, R the GEMM, plain memory-bound and random-mask kernels' times at
    efficiency 1); solved for the three inverses, then repeated because which GEMMs
    sit on the bandwidth roof depends on the efficiency.
    """
    device = base
    for _ in range(iterations):
        rows, targets = [], []
        for published in TABLE_9:
            classes = _class_times(device, published.model)
            for (compute, plain, random, fixed), measured in zip(
                    classes, (published.forward, published.input_grad, published.weight_grad)):
                rows.append(np.array([compute, plain, random]) / measured)
                targets.append((measured - fixed) / measured)
        inverse, *_ = np.linalg.lstsq(np.array(rows), np.array(targets), rcond=None)
        gemm, memory, random = (float(min(1.0, 1.0 / value)) for value in inverse)
        device = replace(device, gemm_efficiency=gemm, memory_efficiency=memory, random_efficiency=random)
    return {"gemm_efficiency": round(device.gemm_efficiency, 3),
            "memory_efficiency": round(device.memory_efficiency, 3),
            "random_efficiency": round(device.random_efficiency, 3)}


@dataclass(frozen=True)
class Throughput:
    """Published samples per GPU per second at three m, and peak memory in GB (Qi et al. 2024, Table 4)."""

    model: str
    microbatches: tuple[int, int, int]
    samples: dict[str, tuple[float, float, float]]
    memory_gb: dict[str, float]


SCHEDULES = ("ZB-2p", "ZB-1p", "1F1B", "1F1B-I")
#: Qi et al. 2024 (ICLR), Table 4: samples per GPU per second and peak memory (GB), A100 SXM 80 GB.
TABLE_4 = (
    Throughput("1.5b", (24, 32, 64),
               {"ZB-2p": (14.5, 14.8, 14.9), "ZB-1p": (12.9, 13.4, 14.2), "1F1B": (11.8, 12.5, 13.6),
                "1F1B-I": (13.1, 13.4, 13.9)},
               {"ZB-2p": 59, "ZB-1p": 32, "1F1B": 30, "1F1B-I": 40}),
    Throughput("6.2b", (24, 32, 64),
               {"ZB-2p": (4.32, 4.35, 4.39), "ZB-1p": (3.88, 4.00, 4.20), "1F1B": (3.50, 3.70, 4.03),
                "1F1B-I": (4.01, 4.08, 4.19)},
               {"ZB-2p": 70, "ZB-1p": 42, "1F1B": 39, "1F1B-I": 48}),
)
#: The held-out rows of the same tables (Qi et al. 2024, Tables 9 and 4): checked, never fitted.
HELD_OUT_9 = (
    PassTimes("14.6b", 11.347, 11.248, 8.132, 0.377),
    PassTimes("28.3b", 10.419, 10.207, 7.715, 0.408),
)
HELD_OUT_4 = (
    Throughput("14.6b", (48, 64, 128),
               {"ZB-2p": (1.81, 1.83, 1.85), "ZB-1p": (1.61, 1.67, 1.76), "1F1B": (1.40, 1.49, 1.64),
                "1F1B-I": (1.54, 1.59, 1.66)},
               {"ZB-2p": 51, "ZB-1p": 33, "1F1B": 32, "1F1B-I": 39}),
    Throughput("28.3b", (96, 128, 256),
               {"ZB-2p": (0.99, 1.00, 1.00), "ZB-1p": (0.87, 0.90, 0.96), "1F1B": (0.76, 0.80, 0.88),
                "1F1B-I": (0.82, 0.85, 0.90)},
               {"ZB-2p": 74, "ZB-1p": 44, "1F1B": 43, "1F1B-I": 58}),
)


@functools.cache  # pure; tests/test_cost_model.py and tests/test_docs_tables.py ask for the same ones
def schedule_plans(size: str, num_microbatches: int, device: Device, link: hardware.Link) -> dict[str, Plan]:
    """The planner's plan of each of Table 4's schedules for one model and m.

    pp = GPUs, dp = 1, the paper's micro-batch size, no recompute. 1F1B, ZB-1p and
    ZB-2p place ``(layers + 2) / pp`` pipeline layers per stage (the embedding and
    the head take the place of the first and last stage's missing layer); 1F1B-I
    is ``interleaved`` with one layer per chunk (the paper's "maximum number of
    chunks"). ZB-1p is the faster of ``zb-h1`` and ``adaptive`` within 1F1B's peak
    memory, ZB-2p of ``zb-h2`` and ``adaptive`` within 1F1B's static memory plus
    twice its activations. The runs' script (examples/pretrain_zero_bubble.sh) uses Megatron's
    distributed optimizer (fp32 gradients: 18 bytes per parameter at dp = 1) and
    ``--no-overlap-p2p-communication`` (``send_mode="serialized"``).
    """
    gpus, micro_batch = ZERO_BUBBLE_MODELS[size][3:]
    spec = paper_model(size)
    workload = Workload.from_spec(spec, device)
    # 8 GPUs a node (NVLink), RoCE between nodes (Qi et al. §5.1; its rate is not stated: 400 Gb/s assumed)
    cluster = Cluster(gpus, device, link, hardware.link("roce-400g"), gpus_per_node=8)
    per_stage = middle_layers(size)
    sizes = (per_stage,) * gpus

    def plan(schedule: str, capacity: float | None = None, chunks: int = 1) -> Plan:
        config = Config(pp=gpus, dp=1, micro_batch_size=micro_batch, num_microbatches=num_microbatches,
                        schedule=schedule, virtual_stages=chunks)
        layout = (1,) * (gpus * chunks) if chunks > 1 else sizes
        return evaluate_layout(workload, cluster, config, layout, memory_capacity=capacity, send_mode="serialized",
                               optimizer="distributed")

    plans = {"1F1B": plan("1f1b"), "1F1B-I": plan("interleaved", chunks=per_stage)}
    base = plans["1F1B"]
    one_x = max(base.peak_memory)
    two_x = max(rank.total + rank.activations for rank in base.memory)
    for label, template, capacity in (("ZB-1p", "zb-h1", one_x), ("ZB-2p", "zb-h2", two_x)):
        candidates = [plan(template), plan("adaptive", capacity)]
        fitting = [c for c in candidates if max(c.peak_memory) <= capacity * (1 + 1e-9)] or candidates
        plans[label] = min(fitting, key=lambda c: c.step_time or math.inf)
    return plans


def ranked_as_measured(published: dict[str, float], predicted: dict[str, float]) -> bool:
    """Every pair the publication orders strictly, the prediction orders the same way (a tie accepts either)."""
    return all(predicted[a] > predicted[b] for a in published for b in published if published[a] > published[b])


def _order(rates: dict[str, float], digits: int = 2) -> str:
    """``"ZB-2p > 1F1B-I = ZB-1p > 1F1B"``: the schedules by rate, equal at ``digits`` shown as ties."""
    names = sorted(rates, key=lambda name: -rates[name])
    text = names[0]
    for before, name in zip(names, names[1:]):
        text += (" = " if round(rates[before], digits) == round(rates[name], digits) else " > ") + name
    return text


def samples_per_gpu(plan: Plan) -> float:
    """Samples per GPU per second of a plan."""
    rate = plan.samples_per_second
    assert rate is not None
    return rate / plan.num_gpus


def table_4(rows: Sequence[Throughput], device: Device, link: hardware.Link) -> tuple[str, list[float], int, int]:
    """Markdown of throughput and memory vs published, the relative errors, and rankings matched / checked."""
    lines = ["| model | m | schedule | published samples/GPU/s | predicted | error | published GB | predicted GB "
             "| error | plan |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    errors: list[float] = []
    matched = checked = 0
    for row in rows:
        for index, m in enumerate(row.microbatches):
            plans = schedule_plans(row.model, m, device, link)
            predicted = {name: samples_per_gpu(plans[name]) for name in SCHEDULES}
            for name in SCHEDULES:
                published = row.samples[name][index]
                memory = max(plans[name].peak_memory) / 1e9
                errors.append(predicted[name] / published - 1)
                memory_error = memory / row.memory_gb[name] - 1 if index == 0 else None
                if memory_error is not None:
                    errors.append(memory_error)
                lines.append(
                    f"| {row.model.upper()} | {m} | {name} | {published:.2f} | {predicted[name]:.2f} "
                    f"| {_error(predicted[name], published)} | {row.memory_gb[name] if index == 0 else ''} "
                    f"| {memory:.1f} | {'' if memory_error is None else signed(100 * memory_error, '+.1f') + '%'} "
                    f"| {plans[name].schedule_label} |")
            same = ranked_as_measured({name: row.samples[name][index] for name in SCHEDULES}, predicted)
            checked += 1
            matched += same
            published_rates = {name: row.samples[name][index] for name in SCHEDULES}
            lines.append(f"| {row.model.upper()} | {m} | ranking | {_order(published_rates)} "
                         f"| {_order(predicted, digits=3)} | {'same' if same else 'differs'} | | | | |")
    return "\n".join(lines), errors, matched, checked


# ------------------------------------------------------------ other published measurements
@dataclass(frozen=True)
class LayerTimes:
    """One transformer layer's published forward and backward (B + W) time, ms."""

    label: str
    forward: float
    backward: float
    sequence_parallel: bool


#: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Table 4:
#: one layer of the 22B GPT (h 6144, 64 heads, s 2048, b 4, 8-way tensor parallel, A100 80 GB,
#: Megatron-LM, fused softmax, dropout), no recompute; times include the tensor-parallel
#: all-reduces (partly overlapped), which pipeplan's layer times do not.
KORTHIKANTI_TABLE_4 = (
    LayerTimes("22B layer, TP 8, no recompute", 7.7, 11.9, False),
    LayerTimes("22B layer, TP 8 + sequence parallel, no recompute", 7.2, 11.8, True),
)


def korthikanti_rows(device: Device) -> list[tuple[str, float, float]]:
    """(label, published, predicted) for Korthikanti et al.'s Table 4 layers."""
    stack = TransformerStack(name="layers", num_layers=48, hidden_size=6144, num_heads=64, seq_length=2048,
                             ffn_hidden_size=4 * 6144, bias=True, dropout=True, causal=True)
    spec = ModelSpec("gpt-22b", (stack,))
    rows = []
    for published in KORTHIKANTI_TABLE_4:
        layer = layer_costs(spec, 4, recompute="none", tensor_parallel=8,
                            sequence_parallel=published.sequence_parallel)[1]
        forward = device.ops_milliseconds(layer.forward_ops)
        backward = device.ops_milliseconds(layer.input_grad_ops) + device.ops_milliseconds(layer.weight_grad_ops)
        rows += [(f"{published.label}: forward ms", published.forward, forward),
                 (f"{published.label}: backward ms", published.backward, backward)]
    return rows


@dataclass(frozen=True)
class TrainingRate:
    """A published end-to-end training rate in model TFLOP/s per GPU (data parallel only)."""

    label: str
    layers: int
    hidden: int
    heads: int
    seq_length: int
    micro_batch: int
    global_batch: int
    gpus: int
    flash: bool
    tflops: float


#: Dao 2023, "FlashAttention-2", Table 1: GPT3 training on 8 A100 80 GB SXM4 (one node, NVLink),
#: model TFLOP/s per GPU = (6 · s · params + 12 · L · h · s²) per sample / time. Shapes and
#: batches from the flash-attention repository's training configs (training/configs/experiment/
#: pile/gpt3xl-flash.yaml, gpt3-2.7B-flash.yaml: per-GPU batch 8 and 4, global batch 512,
#: ZeRO-1 AdamW, bf16, no activation checkpointing); that those configs made the table is an
#: assumption (the paper does not say).
FLASH_ATTENTION_2 = (
    TrainingRate("GPT3-1.3B 2k, standard attention", 24, 2048, 16, 2048, 8, 512, 8, False, 142),
    TrainingRate("GPT3-1.3B 2k, FlashAttention-2", 24, 2048, 16, 2048, 8, 512, 8, True, 196),
    TrainingRate("GPT3-2.7B 2k, standard attention", 32, 2560, 32, 2048, 4, 512, 8, False, 149),
    TrainingRate("GPT3-2.7B 2k, FlashAttention-2", 32, 2560, 32, 2048, 4, 512, 8, True, 205),
)


def training_rate(device: Device, link: hardware.Link, row: TrainingRate) -> float:
    """Predicted model TFLOP/s per GPU of a data-parallel run, through the planner's evaluation."""
    vocab = 50_264  # GPT-2's 50,257 padded to a multiple of 8 (the configs' pad_vocab_size_multiple)
    spec = ModelSpec(row.label, (
        Embedding(name="embedding", vocab_size=vocab, hidden_size=row.hidden, tokens=row.seq_length,
                  position_tokens=row.seq_length),
        TransformerStack(name="layers", num_layers=row.layers, hidden_size=row.hidden, num_heads=row.heads,
                         seq_length=row.seq_length, ffn_hidden_size=4 * row.hidden, bias=True, causal=True,
                         final_norm=True, attention="flash" if row.flash else "eager"),
        LMHead(name="output_layer", vocab_size=vocab, hidden_size=row.hidden, tokens=row.seq_length,
               tied_to="embedding"),
    ))
    workload = Workload.from_spec(spec, device)
    cluster = Cluster(row.gpus, device, link, link, gpus_per_node=8)
    dp = row.gpus
    config = Config(pp=1, dp=dp, micro_batch_size=row.micro_batch,
                    num_microbatches=row.global_batch // (dp * row.micro_batch), schedule="1f1b")
    plan = evaluate_layout(workload, cluster, config, (len(layer_costs(spec, 1)),),
                           optimizer="distributed")
    params = spec.num_parameters()
    flops = 6 * row.seq_length * params + 12 * row.layers * row.hidden * row.seq_length**2
    rate = plan.samples_per_second
    assert rate is not None
    return rate / row.gpus * flops / 1e12


def other_rows(a100: Device, link: hardware.Link) -> list[tuple[str, float, float]]:
    """(label, published, predicted) of every other published measurement."""
    rows = korthikanti_rows(a100)
    rows += [(f"{row.label}: TFLOP/s per GPU", row.tflops, training_rate(a100, link, row))
             for row in FLASH_ATTENTION_2]
    return rows


def other_table(rows: Sequence[tuple[str, float, float]]) -> tuple[str, list[float]]:
    """Markdown of the other published measurements and their errors."""
    lines = ["| measurement | published | predicted | error |", "|---|---:|---:|---:|"]
    lines += [f"| {label} | {published:g} | {predicted:.2f} | {_error(predicted, published)} |"
              for label, published, predicted in rows]
    return "\n".join(lines), [predicted / published - 1 for _, published, predicted in rows]


# --------------------------------------------------------------------------- tables
def _error(predicted: float, measured: float) -> str:
    return f"{signed(100 * (predicted / measured - 1), '+.1f')}%"


def table_9(device: Device, link: hardware.Link,
            rows: Sequence[PassTimes] = TABLE_9) -> tuple[str, list[float]]:
    """Markdown of predicted vs published per-pass times, and the relative errors (F, B, W, comm per model)."""
    lines = ["| model | pass | published ms | predicted ms | error |", "|---|---|---:|---:|---:|"]
    errors = []
    for published in rows:
        predicted = (*pass_times(device, published.model), message_ms(published.model, link))
        measured = (published.forward, published.input_grad, published.weight_grad, published.comm)
        for name, p, m in zip(("T_F", "T_B", "T_W", "T_comm"), predicted, measured):
            lines.append(f"| {published.model.upper()} | {name} | {m:.3f} | {p:.3f} | {_error(p, m)} |")
            errors.append(p / m - 1)
    return "\n".join(lines), errors


def blocks(device: Device, link: hardware.Link) -> tuple[dict[str, str], str]:
    """What ``--write`` records, by marker name (tests/test_docs_tables.py checks each), and the rankings."""
    text, _ = table_9(device, link)
    throughput, _, matched, checked = table_4(TABLE_4, device, link)
    held_9, _ = table_9(device, link, HELD_OUT_9)
    held_4, _, held_matched, held_checked = table_4(HELD_OUT_4, device, link)
    others, _ = other_table(other_rows(device, link))
    line = computed_line(COMMAND)
    ranking = f"ranking as measured: {matched} of {checked}; held out: {held_matched} of {held_checked}"
    return {"cost-model-table-9": f"{text}\n\n{line}", "cost-model-table-4": f"{throughput}\n\n{line}",
            "cost-model-held-out": f"{held_9}\n\n{held_4}\n\n{line}",
            "cost-model-other": f"{others}\n\n{line}"}, ranking


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="refit the A100 constants on Table 9 and print them")
    add_write_flag(parser, DOC)
    args = parser.parse_args(argv)
    device = hardware.device("a100-80g")
    if args.fit:
        print(fit_a100(device))
        return 0
    link = hardware.link("nvlink-a100")
    tables, ranking = blocks(device, link)
    for name, body in tables.items():
        print(f"## {name}\n{body}\n")
    print(ranking)
    if args.write:
        for name, body in tables.items():
            replace_between(DOC, name, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
