"""Benchmark: published peak memory per GPU against pipeplan's prediction, each run pinned as a user pins it.

    python benchmarks/memory_fidelity.py              # print the table
    python benchmarks/memory_fidelity.py --write      # also record it in docs/cost_model.md (memory-fidelity)

Each run is evaluated as ``pipeplan plan --engine torchtitan --dp-modes fsdp --tp T --pp P
--micro-batch-size B --recompute R --schedules S`` evaluates it (the library's
:func:`~pipeplan.planner.evaluate.evaluate_layout` on torchtitan's own layer split, no
capacity: the peak is read, not fitted into a GPU), on torchtitan's llama3 flavours
(:func:`pipeplan.engines.torchtitan_config.llama3_spec`). The prediction is the fullest
rank's peak, ``peak_memory_bytes`` of ``plan --json``.

**What is compared.** torchtitan logs ``torch.cuda.memory_stats()["reserved_bytes.all.peak"]``
(``max_reserved_gib``: torchtitan/metrics.py and train.py at 9dec370, ``memory: ...GiB``;
torchtitan/components/metrics.py at e7c0cae the same), the caching allocator's **reserved**
peak, with ``PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"`` (run_llama_train.sh at
9dec370), which keeps reserved close to allocated. It excludes the CUDA context and NCCL's
buffers (not the caching allocator's). pipeplan predicts the bytes of live tensors, an
**allocated** peak: every row compares pipeplan's allocated peak with a published reserved one.

**What the runs use that pipeplan does not price** (named per row): ``torch.compile``'s fused
element-wise kernels in the blocks (they save fewer intermediates: the published rows with and
without it differ by 5.0–5.4 GiB), Float8 linears (fp8 copies of weights and inputs for the
backward) and async TP. A compiled loss is priced (``--compile on``: e7c0cae compiles the loss with
the model; ``--compile model``: 9dec370 compiles the blocks only), each row pinned as its commit ran.

Runs (numbers as published, the source beside each group):

* torchtitan ``benchmarks/llama3_h100_202412_torchtitan.md`` (identical to ``docs/performance.md``
  at d4c86e3; versions: torchtitan 9dec370, torch 1963fc8), Grand Teton H100 96 GB HBM2e, 8 a
  node: Tables 1 and 3 (Llama 3.1 8B, FSDP over 8 and 128 GPUs, local batch 2, seq 8192,
  "selective" checkpointing: ``selective_ac_option = 'op'`` in train_configs/llama3_8b.toml at
  9dec370), Table 2's ``FSDP 8, CP 1`` row (seq 32768, local batch 1, full AC; the CP > 1 rows
  need context parallelism, which pipeplan does not plan), Table 4 (Llama 3.1 70B, FSDP 32 × TP 8,
  local batch 16, full AC), Table 5 (Llama 3.1 405B, FSDP 8 × TP 8 × PP 8, local batch 32 in
  torchtitan's default ``pp`` microbatches, so 4 samples each, full AC; interleaved with
  torchtitan's default two stages per rank, split by ``generate_split_points``) and Table 6's
  ``FSDP 8, CP 1`` row (seq 32768, local batch 8: micro-batch 1);
* torchtitan ``benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md`` (torchtitan e7c0cae):
  Llama 3.1 8B on 4 and 8 nodes of 8 H200, local batch 2, seq 8192, ``selective`` / ``op``
  (train_configs/llama3_8b.toml at e7c0cae), compile and Float8.

The cost model's Table 4 rows (Qi et al. 2024, Megatron-LM, docs/cost_model.md) compare memory
too; they stay in benchmarks/cost_model.py.

**Fitting.** Nothing is fitted to these rows. The mechanisms in pipeplan/planner/memory.py (the
loss's fp32 logits per engine, or a compiled loss's bf16 ones; a recomputed layer's activations;
under a torch engine's tensor parallelism, DTensor's gathered whole-sequence inputs in it) come
from the engines' sources and a CPU measurement of torchtitan's own block and loss
(``benchmarks/torchtitan_activations.py``), not from these numbers; the table gives their bytes per
row ("loss + recompute": the loss's extra logits on the rank holding the head, and the largest
recomputed layer's activations) so each row reads without them too.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import computed_line, print_or_write, signed  # noqa: E402

from pipeplan import hardware  # noqa: E402
from pipeplan.engines.torchtitan_config import llama3_spec  # noqa: E402
from pipeplan.plan import Plan  # noqa: E402
from pipeplan.planner import Cluster, Workload  # noqa: E402
from pipeplan.planner.evaluate import evaluate_layout  # noqa: E402
from pipeplan.planner.memory import MemoryModel  # noqa: E402
from pipeplan.planner.space import Config  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "cost_model.md"
MARKER = "memory-fidelity"
COMMAND = "python benchmarks/memory_fidelity.py --write"
GIB = 2**30
TARGET = 0.10


@dataclass(frozen=True)
class MemoryRun:
    """One published run: model, layout, batch, checkpointing, what it ran beyond that, GiB published.

    ``micro_batch``: samples per microbatch (the local batch over torchtitan's microbatches);
    ``microbatches``: per step (``pp`` by torchtitan's default with a pipeline, else 1);
    ``unpriced``: what the run used that pipeplan does not price;
    ``compile``: ``--compile`` as the run used it (``off``; ``model``: torchtitan 9dec370 compiles each block, not
    the loss; ``on``: e7c0cae compiles the loss with the model, ``compile.components`` ``["model", "loss"]``).
    """

    label: str
    source: str
    flavour: str
    seq: int
    gpus: int
    tp: int
    pp: int
    micro_batch: int
    microbatches: int
    recompute: str
    schedule: str
    virtual: int
    unpriced: str
    device: str
    published_gib: float
    compile: str = "off"

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    @property
    def pins(self) -> str:
        """The ``plan`` flags that pin it."""
        schedule = self.schedule if self.virtual == 1 else f"{self.schedule} --virtual-stages {self.virtual}"
        return (f"--gpus {self.gpus} --tp {self.tp} --pp {self.pp} --dp-modes fsdp --micro-batch-size "
                f"{self.micro_batch} --recompute {self.recompute} --schedules {schedule} --compile {self.compile}")


_DEC24 = "torchtitan llama3_h100_202412"
_H200 = "torchtitan llama3-8b_h200_202506"
#: (label, source, flavour, seq, GPUs, tp, pp, micro-batch, microbatches, recompute, schedule, v, unpriced,
#: device, GiB, compile) as published: the files' tables (module doc); compile as each commit ran it.
RUNS = (
    # Table 1: Llama 3.1 8B, 8 GPUs, local batch 2, selective (op) AC
    MemoryRun("8B FSDP", _DEC24 + " T1", "8B", 8192, 8, 1, 1, 2, 1, "op", "1f1b", 1, "", "h100-80g", 82.4, "off"),
    MemoryRun("8B FSDP + compile", _DEC24 + " T1", "8B", 8192, 8, 1, 1, 2, 1, "op", "1f1b", 1, "compile",
              "h100-80g", 77.0, "model"),
    MemoryRun("8B FSDP + compile + Float8", _DEC24 + " T1", "8B", 8192, 8, 1, 1, 2, 1, "op", "1f1b", 1,
              "compile, float8", "h100-80g", 76.8, "model"),
    # Table 3: the same on 128 GPUs
    MemoryRun("8B FSDP", _DEC24 + " T3", "8B", 8192, 128, 1, 1, 2, 1, "op", "1f1b", 1, "", "h100-80g", 67.0, "off"),
    MemoryRun("8B FSDP + compile", _DEC24 + " T3", "8B", 8192, 128, 1, 1, 2, 1, "op", "1f1b", 1, "compile",
              "h100-80g", 62.0, "model"),
    MemoryRun("8B FSDP + compile + Float8", _DEC24 + " T3", "8B", 8192, 128, 1, 1, 2, 1, "op", "1f1b", 1,
              "compile, float8", "h100-80g", 61.8, "model"),
    # Table 2, FSDP 8 CP 1: seq 32768, local batch 1, full AC, compile + Float8
    MemoryRun("8B FSDP, seq 32k", _DEC24 + " T2", "8B", 32768, 8, 1, 1, 1, 1, "full", "1f1b", 1,
              "compile, float8", "h100-80g", 83.9, "model"),
    # Table 4: Llama 3.1 70B, FSDP 32 x TP 8, local batch 16, full AC, compile + Float8
    MemoryRun("70B FSDP + TP", _DEC24 + " T4", "70B", 8192, 256, 8, 1, 16, 1, "full", "1f1b", 1,
              "compile, float8", "h100-80g", 71.9, "model"),
    MemoryRun("70B FSDP + TP + async TP", _DEC24 + " T4", "70B", 8192, 256, 8, 1, 16, 1, "full", "1f1b", 1,
              "compile, float8, async TP", "h100-80g", 67.6, "model"),
    # Table 5: Llama 3.1 405B, FSDP 8 x TP 8 x PP 8, local batch 32 in 8 microbatches, full AC
    MemoryRun("405B 3D, 1F1B", _DEC24 + " T5", "405B", 8192, 512, 8, 8, 4, 8, "full", "1f1b", 1,
              "compile, float8, async TP", "h100-80g", 82.5, "model"),
    MemoryRun("405B 3D, interleaved 1F1B", _DEC24 + " T5", "405B", 8192, 512, 8, 8, 4, 8, "full", "interleaved", 2,
              "compile, float8, async TP", "h100-80g", 72.7, "model"),
    # Table 6, FSDP 8 CP 1: seq 32768, local batch 8 in 8 microbatches, 1F1B, full AC
    MemoryRun("405B 3D, seq 32k", _DEC24 + " T6", "405B", 32768, 512, 8, 8, 1, 8, "full", "1f1b", 1,
              "compile, float8, async TP", "h100-80g", 75.3, "model"),
    # Trainy on WhiteFiber, H200: 4 and 8 nodes, local batch 2, compile (the loss too) + Float8
    MemoryRun("8B FSDP + compile + Float8", _H200, "8B", 8192, 32, 1, 1, 2, 1, "op", "1f1b", 1,
              "compile, float8", "h200-141g", 47.96, "on"),
    MemoryRun("8B FSDP + compile + Float8", _H200, "8B", 8192, 64, 1, 1, 2, 1, "op", "1f1b", 1,
              "compile, float8", "h200-141g", 46.97, "on"),
)


def torchtitan_split(layers: int, pp: int, virtual: int) -> list[int]:
    """torchtitan's default split (``generate_split_points``, parallelisms/pipelining_utils.py at 9dec370) as
    pipeplan's layers per stage: the first stage ``n // S`` blocks, the middle ones one more while the remainder
    lasts; the embedding on the first stage and the output on the last (pipeplan's own layers)."""
    stages = pp * virtual
    if stages == 1:
        return [layers + 2]
    base, extra = divmod(layers, stages)
    blocks = [base]
    for _ in range(stages - 2):
        blocks.append(base + 1 if extra > 0 else base)
        extra -= 1 if extra > 0 else 0
    blocks.append(layers - sum(blocks))
    blocks[0] += 1
    blocks[-1] += 1
    return blocks


def workload(run: MemoryRun) -> Workload:
    """The run's llama3 flavour at its sequence length, recompute pinned."""
    device = hardware.device(run.device)
    spec = llama3_spec(run.flavour, run.seq)
    return Workload.from_spec(spec, device, tp_link=hardware.link("nvlink-h100")).with_recompute(run.recompute)


def transients_gib(run: MemoryRun) -> tuple[float, float]:
    """GiB of the loss's extra fp32 logits (on the rank of the head) and of the largest recomputed layer."""
    work = workload(run).with_tensor_parallel(run.tp)
    loss, recompute = MemoryModel(work, "adam", None, "fsdp", engine="torchtitan",
                                  compiled_loss=run.compile == "on").transient_bytes(run.micro_batch, run.recompute)
    return float(loss.sum()) / GIB, float(recompute.max()) / GIB


def predict(run: MemoryRun, engine: str | None = "torchtitan") -> Plan:
    """The run's plan as ``plan --engine torchtitan`` evaluates it (``engine=None``: with Megatron-LM's loss)."""
    device = hardware.device(run.device)
    intra = hardware.link("nvlink-h100")
    cluster = Cluster(run.gpus, device, intra, hardware.link("ib-ndr"), 8)
    work = workload(run)
    config = Config(run.pp, run.dp, run.micro_batch, run.microbatches, run.schedule, run.virtual, run.recompute,
                    run.tp, "fsdp")
    sizes = torchtitan_split(work.num_layers - 2, run.pp, run.virtual)
    return evaluate_layout(work, cluster, config, sizes, sync="megatron-overlap", engine=engine,
                           compiled_loss=run.compile == "on")


def rows() -> list[tuple[MemoryRun, float]]:
    """(run, predicted peak GiB of the fullest rank) per run."""
    return [(run, max(predict(run).peak_memory) / GIB) for run in RUNS]


HEADER = ["| run | source | pinned (`plan --engine torchtitan`) | not priced | published GiB (reserved) | "
          "predicted GiB (allocated) | error | of which loss + recompute GiB |", "|---|---|---|---|---:|---:|---:|---:|"]


def table(results: Sequence[tuple[MemoryRun, float]]) -> str:
    """Markdown rows and the summary over all rows and over the rows with nothing unpriced."""
    lines = list(HEADER)
    errors, plain = [], []
    for run, predicted in results:
        error = predicted / run.published_gib - 1
        errors.append(abs(error))
        if not run.unpriced:
            plain.append(abs(error))
        lines.append(f"| {run.label} | {run.source} | `{run.pins}` | {run.unpriced or '–'} | "
                     f"{run.published_gib:g} | {predicted:.1f} | {signed(100 * error, '+.1f')}% | "
                     "{:.1f} + {:.1f} |".format(*transients_gib(run)))
    lines.append("")
    within = sum(e <= TARGET for e in errors)
    lines.append(f"Mean |error| over {len(errors)} runs: **{100 * sum(errors) / len(errors):.1f}%** "
                 f"({within} within 10%, worst {100 * max(errors):.1f}%); over the {len(plain)} runs with nothing "
                 f"unpriced (eager, bf16): {100 * sum(plain) / len(plain):.1f}% (worst {100 * max(plain):.1f}%). "
                 "No row is used for fitting. Errors are predicted allocated / published reserved − 1.")
    return "\n".join(lines)


def block() -> str:
    """What ``--write`` records between the ``memory-fidelity`` markers (tests/test_docs_tables.py checks it)."""
    return f"{table(rows())}\n\n{computed_line(COMMAND)}"


def main(argv: list[str] | None = None) -> int:
    return print_or_write(DOC, MARKER, block, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
