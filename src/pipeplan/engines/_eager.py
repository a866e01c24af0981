"""torch's eager kernels and ``torch.compile``: what the two torch engines (torchtitan, plain torch) price alike.

    from pipeplan.engines._eager import COMPILE_KNOB, TORCHTITAN_EAGER_FACTORS, TORCHTITAN_COMPILE_SPEEDUP
    TORCHTITAN_EAGER_FACTORS["a100-80g"]          # 1.335: eager kernels beside the device's fused-kernel model
    COMPILE_KNOB.default                          # 'off': torchtitan's compile.enable default
    compiles_loss("torchtitan", {"compile": "on"})  # True: the loss is compiled with the model
    compiled({"compile": "model"})                # True: the model's kernels are compiled (the loss is not)
    max(1.0, 1.335 / TORCHTITAN_COMPILE_SPEEDUP)  # each layer's compute factor with --compile on (A100)

torchtitan runs a model in torch's eager kernels unless ``compile.enable`` is set; plain torch
runs them unless the user wraps the model in ``torch.compile``. Both are priced by the same two
numbers: the eager factor per device (fitted to torchtitan's published runs) and what compile
gains over eager (fitted to torchtitan's published compile on/off pair). The engines' records
(:mod:`.torchtitan`, :mod:`.pipelining`) take them from here
(:meth:`pipeplan.engines.Engine.compute_factor`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan import TpCommOverlap
from .record import Knob

__all__ = ["ASYNC_TP_HIDDEN", "COMPILE_KNOB", "COMPILED", "TORCH_ENGINES", "TORCHTITAN_COMPILE_SPEEDUP",
           "TORCHTITAN_EAGER_FACTORS", "compiled", "compiles_loss", "torch_tp_overlap"]

#: The engines that run a model in torch's own kernels, eager or compiled (the ``--compile`` knob's).
TORCH_ENGINES = ("torchtitan", "torch")
#: The ``--compile`` values under which the model's kernels are compiled.
COMPILED = ("on", "model")

#: torchtitan's eager kernels (``compile = false``, its train configs' default at 0413364) beside the device
#: kernel model's Megatron-style fused kernels: a factor on every layer's compute time, per device preset.
#: a100-80g: fitted to the two Llama 3 8B rows of torchtitan's docs/performance.md at 0413364 (64 A100, FSDP2,
#: "selective layer" and "selective op") and to nothing else, by ``python benchmarks/engine_fidelity.py
#: --fit-torchtitan`` (the geometric mean of predicted / published WPS over those rows is 1); the held-out rows
#: of the same file check it (docs/cost_model.md, "engine-fidelity").
#: h100-96g (Meta's Grand Teton H100, 500 W: its clocks are in this factor too): fitted by ``python
#: benchmarks/torchtitan_h100.py --fit`` to Table 1's eager row alone (Llama 3.1 8B, FSDP over 8 GPUs, local batch
#: 2, per-op checkpointing: 5,762 tokens/s per GPU; torchtitan benchmarks/llama3_h100_202412_torchtitan.md); the
#: same file's other bf16 rows and the async TP file's check it (docs/engines.md, "torchtitan-h100").
TORCHTITAN_EAGER_FACTORS: dict[str, float] = {"a100-80g": 1.335, "h100-96g": 1.614}

#: ``--compile``: torch.compile of the model (torchtitan ``compile.enable``; plain torch ``torch.compile(model)``)
#: and of its loss: ``on`` compiles both (torchtitan's ``compile.components`` default ``["model", "loss"]``,
#: torchtitan 0.2.2 config/job_config.py ``Compile`` and 0.3.0 config/configs.py; components/loss.py
#: ``build_cross_entropy_loss`` wraps the loss in ``torch.compile`` when ``"loss"`` is among them; the field came
#: with pytorch/torchtitan#1608, 2025-08; before it ``training.compile`` compiled the loss too, e7c0cae), ``model``
#: the model alone (``components = ["model"]``; torchtitan 9dec370, Dec 2024, compiled the blocks only). Megatron-LM and DeepSpeed have no such knob: their kernels are fused already
#: (Transformer Engine, Megatron's fused kernels), which is what the device's kernel model prices.
COMPILE_KNOB = Knob(
    "compile", ("on", "model", "off"), "off",
    "torch.compile of the model and its loss (torchtitan: compile.enable, default false, with compile.components "
    "[\"model\", \"loss\"]; model: the model alone, the loss eager): fuses the memory-bound kernels (norms, "
    "activations, residual adds, rotary) the eager ones run one by one; on or model: each layer's compute is the "
    "eager factor divided by the published compile speedup (docs/engines.md), never below the device's fused "
    "kernels; on: the compiled loss holds the bf16 logits instead of eager PyTorch's fp32 copies "
    "(docs/cost_model.md, peak memory)",
    elsewhere="its kernels are fused already (Megatron-LM's fused kernels / Transformer Engine), which is what "
              "the step model prices; --compile is torchtitan's and plain torch's")
#: What torch.compile gains over torchtitan's eager kernels, a ratio of kernel time: fitted by ``python
#: benchmarks/torchtitan_compile.py --fit`` to one published pair alone, torchtitan docs/performance.md at
#: d4c86e375 Table 1 (Llama 3.1 8B, FSDP over 8 H100, local batch 2, per-op checkpointing: 5,762 → 6,667 TPS
#: per GPU with ``training.compile``); Table 3 of the same file
#: (128 H100: 5,605 → 6,514) checks it (docs/engines.md, "torchtitan-compile").
TORCHTITAN_COMPILE_SPEEDUP = 1.160

#: torch's async tensor parallelism (torchtitan ``parallelism.enable_async_tensor_parallel``, which needs
#: ``torch.compile``: inductor's micro-pipeline TP pass splits each all-gather / reduce-scatter into per-rank
#: chunks beside its matmul's): the share of each tensor-parallel collective it hides behind the layer's own
#: pass (``tp_comm_overlap = "async"``, pipeplan.planner.workload). Fitted by ``python benchmarks/torchtitan_h100.py
#: --fit`` to one published pair alone (torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md, Llama 3.1
#: 8B, FSDP 8 x TP 8, per-op checkpointing, compile: 4,378 -> 4,809.4 tokens/s per GPU, vanilla -> async TP); the
#: 70B pair of the same file checks it (docs/engines.md, "torchtitan-h100").
ASYNC_TP_HIDDEN = 0.382


def torch_tp_overlap(knobs: Mapping[str, str]) -> TpCommOverlap:
    """What torch's tensor parallelism hides, by the knobs given: ``"async"`` with ``async-tp`` ``on``, else
    ``"off"``: DTensor's ``ColwiseParallel`` / ``RowwiseParallel`` issue each all-gather / reduce-scatter as the
    layer needs its result and wait for it there (torch/distributed/tensor/parallel/style.py), so nothing of
    them hides behind the matmuls (torchtitan's vanilla TP, plain torch)."""
    return "async" if knobs.get("async-tp") == "on" else "off"


def compiled(knobs: Mapping[str, str] | None) -> bool:
    """Whether ``--compile`` (in ``knobs``, name → value) compiles the model's kernels: ``on`` or ``model``."""
    return (knobs or {}).get("compile") in COMPILED


def compiles_loss(engine: str | None, knobs: Mapping[str, str] | None) -> bool:
    """Whether ``engine`` runs its loss compiled: torchtitan under ``--compile on`` (its ``compile.components``
    default, the model and the loss). Plain torch's loss is the user's own code, which ``--compile`` (the model
    wrapped in ``torch.compile``) does not reach."""
    return engine == "torchtitan" and (knobs or {}).get("compile") == "on"
