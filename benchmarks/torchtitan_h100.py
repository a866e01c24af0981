"""Benchmark: torchtitan's published H100 runs, end to end, as ``plan --engine torchtitan --gpu h100-96g`` prices them.

    python benchmarks/torchtitan_h100.py            # print the table
    python benchmarks/torchtitan_h100.py --fit      # print the two constants fitted here (eager factor, async TP)
    python benchmarks/torchtitan_h100.py --write    # also record it in docs/engines.md (torchtitan-h100)

**The device.** Every run here ran on Meta's Grand Teton H100: "96GB HBM2e with 2.4 TB/sec peak
memory bandwidth", "the default 500W power limit" (both files' Hardware sections), peak flops
"between SXM and NVL" (the 2024 file's footnote). pipeplan's ``h100-96g`` keeps the SXM5's compute
record with that memory; what the 500 W clocks and torchtitan's eager kernels cost is one factor
per device and engine (``TORCHTITAN_EAGER_FACTORS["h100-96g"]``, pipeplan/engines/_eager.py).

**The runs** (bf16 only: Float8 linears are not priced; tokens/s per GPU as published):

* torchtitan ``benchmarks/llama3_h100_202412_torchtitan.md`` (torchtitan 9dec370, torch 1963fc8):
  Table 1 (Llama 3.1 8B, FSDP over 8 GPUs, local batch 2, seq 8192, per-op checkpointing:
  ``selective_ac_option = 'op'`` in train_configs/llama3_8b.toml at 9dec370) eager 5,762 and
  compiled 6,667; Table 3 (the same over 128 GPUs, 16 nodes) 5,605 and 6,514;
* torchtitan ``benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md`` (torchtitan 820504e, torch
  38410cf9; its commands give each configuration, its figure the numbers): Llama 3.1 8B, FSDP 8 x TP 8,
  local batch 12, per-op checkpointing, compile: vanilla TP 4,378, async TP 4,809.4; Llama 3.1 70B,
  FSDP 32 x TP 8, local batch 16, full checkpointing, compile: 597.3 and 652.4.

**What is fitted, to what** (each constant to one row or one pair, the rest held out):

* torchtitan's eager factor on ``h100-96g``: Table 1's eager row alone (``--fit`` bisects it);
* the compile speedup (1.160): Table 1's pair, fitted by ``benchmarks/torchtitan_compile.py``;
* ``ASYNC_TP_HIDDEN``, the share of each TP collective async TP hides: the 8B pair's ratio alone.

Held out: Table 3's two rows, the 8B vanilla-TP row (its level; the fit used only its ratio to
async), both 70B rows. Vanilla TP is priced as torch's DTensor runs it, every collective exposed
(``tp_comm_overlap = "off"``), async TP as ``"async"`` (pipeplan.planner.workload).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import computed_line, print_or_write, signed  # noqa: E402

from pipeplan import engines, hardware  # noqa: E402
from pipeplan.engines.torchtitan_config import llama3_spec  # noqa: E402
from pipeplan.plan import Recompute, TpCommOverlap  # noqa: E402
from pipeplan.planner import Cluster, Workload  # noqa: E402
from pipeplan.planner.evaluate import evaluate_layout  # noqa: E402
from pipeplan.planner.space import Config  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "engines.md"
MARKER = "torchtitan-h100"
COMMAND = "python benchmarks/torchtitan_h100.py --write"
DEVICE = "h100-96g"
SEQ = 8192
_DEC24 = "llama3_h100_202412 T{}"
_ASYNC = "asyncTP_llama3_h100_2025-06"


@dataclass(frozen=True)
class H100Run:
    """One published run: ``role`` is ``"eager fit"``, ``"compile fit"``, ``"async fit"`` or ``"held out"``."""

    source: str
    flavour: str
    gpus: int
    tp: int
    batch: int
    recompute: Recompute
    compile: bool
    async_tp: bool
    published: float
    role: str

    @property
    def label(self) -> str:
        layout = f"FSDP {self.gpus // self.tp}" + (f" x TP {self.tp}" if self.tp > 1 else "")
        extras = ", compile" if self.compile else ""
        extras += (", async TP" if self.async_tp else ", vanilla TP") if self.tp > 1 else ""
        return f"Llama 3.1 {self.flavour}, {layout}, {self.recompute}, b {self.batch}{extras}"

    @property
    def overlap(self) -> TpCommOverlap:
        return "async" if self.async_tp else "off"


RUNS = (
    H100Run(_DEC24.format(1), "8B", 8, 1, 2, "op", False, False, 5762.0, "eager fit"),
    H100Run(_DEC24.format(1), "8B", 8, 1, 2, "op", True, False, 6667.0, "compile fit"),
    H100Run(_DEC24.format(3), "8B", 128, 1, 2, "op", False, False, 5605.0, "held out"),
    H100Run(_DEC24.format(3), "8B", 128, 1, 2, "op", True, False, 6514.0, "held out"),
    H100Run(_ASYNC, "8B", 64, 8, 12, "op", True, False, 4378.0, "held out"),
    H100Run(_ASYNC, "8B", 64, 8, 12, "op", True, True, 4809.4, "async fit"),
    H100Run(_ASYNC, "70B", 256, 8, 16, "full", True, False, 597.3, "held out"),
    H100Run(_ASYNC, "70B", 256, 8, 16, "full", True, True, 652.4, "held out"),
)


def tokens_per_gpu(run: H100Run, *, factor: float | None = None, hidden: float | None = None) -> float:
    """Tokens/s per GPU as ``plan --engine torchtitan --gpu h100-96g`` prices ``run``.

    ``factor``: the eager factor to try (default the engine's); ``hidden``: ``ASYNC_TP_HIDDEN`` to try.
    """
    device = hardware.device(DEVICE)
    link = hardware.link("nvlink-h100")
    cluster = Cluster(run.gpus, device, link, hardware.link("ib-ndr"), 8)
    engine = engines.get("torchtitan")
    knobs = {"compile": "on" if run.compile else "off"}
    if factor is None:
        compute = engine.compute_factor(DEVICE, knobs)
    else:
        compute = max(1.0, factor / engine.compile_speedup) if run.compile else factor
    work = Workload.from_spec(llama3_spec(run.flavour, SEQ), device, tp_link=link, tp_comm_overlap=run.overlap,
                              compute_factor=compute, async_tp_hidden=hidden)
    work = work.with_tensor_parallel(run.tp).with_recompute(run.recompute)
    config = Config(1, run.gpus // run.tp, run.batch, 1, "1f1b", 1, run.recompute, run.tp, "fsdp")
    plan = evaluate_layout(work, cluster, config, (work.num_layers,), sync="megatron-overlap", engine="torchtitan")
    return run.batch * SEQ / (plan.step_seconds or float("inf")) / run.tp


def _bisect(too_fast: Callable[[float], bool], lo: float, hi: float, tolerance: float = 1e-7) -> float:
    """The value in [lo, hi] where ``too_fast`` turns False (it is True at ``lo``)."""
    while hi - lo > tolerance:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if too_fast(mid) else (lo, mid)
    return (lo + hi) / 2


def fit_eager_factor() -> float:
    """The factor that prices Table 1's eager row exactly (its fit, alone)."""
    run = next(r for r in RUNS if r.role == "eager fit")
    return _bisect(lambda f: tokens_per_gpu(run, factor=f) > run.published, 1.0, 4.0)


def fit_async_hidden() -> float:
    """The share of each TP collective async TP hides that prices the 8B pair's async/vanilla ratio exactly."""
    fast = next(r for r in RUNS if r.role == "async fit")
    slow = next(r for r in RUNS if r.role != "async fit" and (r.source, r.flavour, r.tp) == (fast.source, fast.flavour,
                                                                                            fast.tp))
    ratio = fast.published / slow.published
    vanilla = tokens_per_gpu(slow)
    return _bisect(lambda h: tokens_per_gpu(fast, hidden=h) / vanilla < ratio, 0.0, 1.0)


def rows() -> list[tuple[H100Run, float]]:
    """(run, predicted tokens/s per GPU) per run."""
    return [(run, tokens_per_gpu(run)) for run in RUNS]


def table(results: list[tuple[H100Run, float]]) -> str:
    """Markdown rows and the held-out summary."""
    lines = ["| run | source (torchtitan benchmarks/) | published TPS/GPU | predicted | error | row |",
             "|---|---|---:|---:|---:|---|"]
    held: list[float] = []
    for run, predicted in results:
        error = predicted / run.published - 1
        if run.role == "held out":
            held.append(abs(error))
        lines.append(f"| {run.label} | {run.source} | {run.published:,.1f} | {predicted:,.0f} | "
                     f"{signed(100 * error, '+.1f')}% | {run.role} |")
    engine = engines.get("torchtitan")
    lines.append("")
    lines.append(f"{len(held)} held-out runs: mean |error| **{100 * sum(held) / len(held):.1f}%** "
                 f"({sum(e <= 0.10 for e in held)} within 10%, worst {100 * max(held):.1f}%). In use: eager factor "
                 f"on {DEVICE} {engine.compute_factors[DEVICE]:.3f}, compile speedup {engine.compile_speedup:.3f}, "
                 f"async TP hides {_hidden():.3f} of each TP collective (`python benchmarks/torchtitan_h100.py --fit`).")
    return "\n".join(lines)


def _hidden() -> float:
    from pipeplan.engines._eager import ASYNC_TP_HIDDEN
    return ASYNC_TP_HIDDEN


def block() -> str:
    """What ``--write`` records between the ``torchtitan-h100`` markers (tests/test_docs_tables.py checks it)."""
    return f"{table(rows())}\n\n{computed_line(COMMAND)}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--fit" in args:
        print(f"torchtitan eager factor on {DEVICE}, fitted to Table 1's eager row: {fit_eager_factor():.4f}")
        print(f"async TP's hidden share, fitted to the 8B pair: {fit_async_hidden():.4f}")
        return 0
    return print_or_write(DOC, MARKER, block, __doc__.splitlines()[0], args)


if __name__ == "__main__":
    raise SystemExit(main())
