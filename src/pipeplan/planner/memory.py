"""The memory model: bytes of weights, gradients, optimizer state and activations per rank.

    from pipeplan.planner.memory import OptimizerBytes
    OptimizerBytes.for_optimizer("adam", dp=8).per_trainable       # 16.0
    OptimizerBytes.for_optimizer("distributed", dp=8).per_trainable  # 6 + 12/8 = 7.5

Per parameter (mixed-precision training, bf16 weights):

* ``"adam"``: 2 (bf16 weight) + 2 (bf16 gradient) + 12 (fp32 master weight and
  the two Adam moments) = **16** bytes;
* ``"distributed"`` (Megatron-LM's distributed optimizer, fp32 gradients, the
  12 bytes of optimizer state sharded over data parallel): 2 + 4 + 12 / dp =
  **6 + 12/dp** (Megatron-LM ``theoretical_memory_usage.py``);
* a number ``x``: ``x`` bytes per trainable parameter, split 2 weight, 2
  gradient, the rest optimizer.

A frozen layer (``Workload.trainable``) holds only its weights. Per rank:

``static_r = Σ_{layers on r} (weights + [trainable] · (gradients + optimizer)) · params + extras``

``activations_r = peak over the step of Σ_{stages s on r} (microbatches of s in flight) · A_s``

where ``A_s`` is the stage's activation bytes per microbatch under its recompute
mode. Before simulating, the in-flight count of a stage is its peak under the
schedule's order (1F1B: ``min(m, P − s)``), which bounds the rank's peak from
above; the plan reports the simulated peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidInputError

__all__ = ["OptimizerBytes", "OPTIMIZERS"]

OPTIMIZERS = ("adam", "distributed")


@dataclass(frozen=True)
class OptimizerBytes:
    """Bytes per parameter, by kind."""

    weights: float = 2.0
    gradients: float = 2.0
    optimizer: float = 12.0

    @property
    def per_trainable(self) -> float:
        """Bytes of one trainable parameter."""
        return self.weights + self.gradients + self.optimizer

    @classmethod
    def for_optimizer(cls, optimizer: str | float, dp: int) -> OptimizerBytes:
        """The split for ``"adam"``, ``"distributed"`` or a total number of bytes per parameter."""
        if optimizer == "adam":
            return cls(2.0, 2.0, 12.0)
        if optimizer == "distributed":
            return cls(2.0, 4.0, 12.0 / dp)
        if isinstance(optimizer, str):
            try:
                optimizer = float(optimizer)
            except ValueError:
                raise InvalidInputError(
                    f"optimizer must be 'adam', 'distributed' or bytes per parameter, got {optimizer!r}"
                ) from None
        total = float(optimizer)
        if not 0 < total < float("inf"):
            raise InvalidInputError(f"bytes per parameter must be a finite number > 0, got {optimizer!r}")
        weights = min(2.0, total)
        gradients = min(2.0, total - weights)
        return cls(weights, gradients, total - weights - gradients)
