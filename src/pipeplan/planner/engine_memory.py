"""What an engine's own code adds to a rank's activations beyond the engine-agnostic layer profile.

    from pipeplan.planner.engine_memory import LOSS_LOGIT_COPIES, gathered_bytes, loss_layers
    LOSS_LOGIT_COPIES["torchtitan"]               # 3.0: eager PyTorch cross entropy's fp32 logits at its peak
    loss_layers(workload)                         # [(layer index, logits per example)] of its LM heads
    gathered_bytes(workload, "torchtitan", 2)     # per layer: DTensor's gathered inputs beyond the 1/t shards

The loss's fp32 logits per engine (eager, compiled or Megatron-LM's fused loss) and, under a
torch engine's sequence-parallel tensor parallelism, the column-parallel GEMMs' gathered inputs
a recomputed block holds; :class:`~pipeplan.planner.memory.MemoryModel` adds them as its
transients (its module doc says where). Sources beside each constant; the CPU measurement of
torchtitan's own block and loss is ``benchmarks/torchtitan_activations.py``.
"""

from __future__ import annotations

import numpy as np

from .workload import Workload

__all__ = ["LOSS_LOGIT_COPIES", "COMPILED_LOSS_COPIES", "GATHERED_INPUT_ENGINES", "gathered_bytes", "loss_layers"]

#: fp32 logits alive at once at the loss's peak, per engine (module doc; ``None``: no ``--engine``, Megatron-LM's
#: knobs, so Megatron-LM's loss). PyTorch ``torch.nn.functional.cross_entropy`` on ``logits.float()``:
#: log_softmax's saved output, nll_loss's gradient and log_softmax's input gradient (torchtitan train.py at
#: 9dec370, ``cross_entropy(pred.flatten(0, 1).float(), ...)``; plain torch the same). Megatron-LM
#: ``_VocabParallelCrossEntropy`` (megatron-core 0.16.1 tensor_parallel/cross_entropy.py): the fp32 softmax saved
#: and its gradient computed in place, plus the bf16 gradient of the logits.
LOSS_LOGIT_COPIES: dict[str | None, float] = {None: 1.5, "megatron": 1.5, "deepspeed": 1.5, "torchtitan": 3.0,
                                              "torch": 3.0}

#: fp32-logit units a ``torch.compile``\ d cross entropy holds at its peak (``--compile on`` under a torch engine:
#: torchtitan compiles its loss with the model, components/loss.py ``build_cross_entropy_loss``): the bf16 logits it
#: saves (0.5), its backward writing their gradient into that buffer (AOTAutograd's donated buffers), nothing in
#: fp32. Measured on CPU, ``python benchmarks/torchtitan_activations.py --loss`` (eager: 1 kept, 3 at the peak,
#: as :data:`LOSS_LOGIT_COPIES` prices it; compiled: 0.5 and 0.5).
COMPILED_LOSS_COPIES = 0.5

#: Engines whose tensor parallelism saves a column-parallel GEMM's gathered input: DTensor's ``ColwiseParallel``
#: under sequence parallelism (torchtitan ``apply_tp``, models/llama3/infra/parallelize.py; plain torch's
#: ``parallelize_module`` the same) keeps the all-gathered, whole-sequence input of wq/wk/wv and w1/w3 for their
#: weight gradients, where Megatron-LM keeps its ``1/t`` shard and gathers it again in the backward
#: (tensor_parallel/layers.py ``LinearWithGradAccumulationAndAsyncCommunication``). Measured on CPU with
#: torchtitan's own block and ``apply_tp`` (``python benchmarks/torchtitan_activations.py``).
GATHERED_INPUT_ENGINES = ("torchtitan", "torch")

#: Bytes of one fp32 logit.
_FP32 = 4.0


def loss_layers(workload: Workload) -> list[tuple[int, float]]:
    """``(layer index, logits per example)`` of each LM head of ``workload``'s spec (none without a spec).

    Logits per example are ``tokens × vocab_size / tp`` (Megatron-LM's vocab-parallel head and
    torchtitan's ``loss_parallel`` shard the vocabulary over the tensor-parallel group).
    """
    from ..models.modules import LMHead  # layer 2, imported where needed (the planner takes any spec)

    spec = workload.spec
    if spec is None:
        return []
    heads = {m.name: float(m.tokens) * m.vocab_size for m in spec.modules if isinstance(m, LMHead)}
    if not heads:
        return []
    names = workload.profile(workload.smallest_micro_batch).names
    found = []
    for index, name in enumerate(names):
        module = name.rsplit(".", 1)[0] if "." in name else name
        if module in heads:
            found.append((index, heads[module] / workload.tensor_parallel))
    return found


def gathered_bytes(workload: Workload, engine: str | None, micro_batch_size: int) -> np.ndarray:
    """Per layer of ``workload``, the bytes ``engine``'s tensor parallelism keeps beyond the profile's ``1/t`` shards of
    the column-parallel inputs: ``(1 − 1/t)`` of their whole-sequence bytes (:data:`GATHERED_INPUT_ENGINES`; zeros
    for other engines, ``tp = 1``, without sequence parallelism or without a spec)."""
    from ..models.layer_costs import gathered_input_bytes  # layer 2, imported where needed

    t = workload.tensor_parallel
    spec = workload.spec
    layers = workload.num_layers
    if engine not in GATHERED_INPUT_ENGINES or t == 1 or not workload.sequence_parallel or spec is None:
        return np.zeros(layers)
    gathered = np.asarray(gathered_input_bytes(spec, micro_batch_size), dtype=float)
    if len(gathered) != layers:  # a profile not laid out as the spec's layers
        return np.zeros(layers)
    return gathered * (1.0 - 1.0 / t)
