"""A step's batch as microbatches: cut, checked, and the signature that fixes every message's shape.

    from pipeplan.runtime.microbatches import _check_microbatches, _signature, _split_batch
    pieces, sizes = _split_batch(images, 4, "inputs")     # tensor_split along dim 0: 4 microbatches, their sizes
    sizes = _check_microbatches(inputs, targets, 4)       # per-microbatch lists: samples in each, or one line
    key = _signature(pieces, sizes)                       # sizes, shapes past dim 0 and dtypes

A stage's input or output is a tensor or a tuple of tensors (:func:`_flatten`); anything
else, a batch smaller than the schedule's microbatches or inputs and targets that disagree
on their samples raise :class:`~pipeplan.errors.InvalidInputError` with one line naming it.
Used by :class:`~pipeplan.runtime.executor.PipelineRuntime`; needs torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInputError


def _flatten(value: Any, where: str) -> tuple[list[Any], bool]:
    """``(tensors, is_tuple)`` of a stage's input or output."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value], False
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return list(value), True
    raise InvalidInputError(
        f"{where} must be a tensor or a tuple of tensors, got {type(value).__name__}"
    )


def _split_batch(value: Any, num_microbatches: int, field_name: str) -> tuple[list[Any], list[int]]:
    """Cut a tensor (or a tuple of tensors) into microbatches along dim 0."""
    tensors, is_tuple = _flatten(value, field_name)
    size = int(tensors[0].shape[0]) if tensors[0].dim() else 0
    for tensor in tensors:
        if tensor.dim() == 0 or int(tensor.shape[0]) != size:
            raise InvalidInputError(
                f"{field_name} tensors must share dimension 0 (the batch), got shapes "
                f"{[tuple(t.shape) for t in tensors]}"
            )
    if size < num_microbatches:
        raise InvalidInputError(
            f"{field_name} has a batch of {size}, fewer than the schedule's {num_microbatches} microbatches"
        )
    pieces = [t.tensor_split(num_microbatches) for t in tensors]
    out = [tuple(p[i] for p in pieces) if is_tuple else pieces[0][i] for i in range(num_microbatches)]
    return out, [int(p.shape[0]) for p in pieces[0]]


def _signature(microbatches: Sequence[Any], sizes: Sequence[int]) -> tuple[Any, ...]:
    """What fixes every message's shape: per microbatch its size and its input tensors' shapes and dtypes."""
    out = []
    for microbatch, size in zip(microbatches, sizes):
        tensors, is_tuple = _flatten(microbatch, "inputs")
        out.append((size, is_tuple, tuple((tuple(t.shape[1:]), str(t.dtype)) for t in tensors)))
    return tuple(out)


def _check_microbatches(inputs: Any, targets: Any, num_microbatches: int) -> list[int]:
    """Samples per microbatch of per-microbatch ``inputs`` and ``targets``; raises on a mismatch."""
    for name, value in (("inputs", inputs), ("targets", targets)):
        if not isinstance(value, (list, tuple)) or len(value) != num_microbatches:
            got = f"{len(value)} entries" if isinstance(value, (list, tuple)) else type(value).__name__
            raise InvalidInputError(
                f"{name} must be a list of the schedule's {num_microbatches} microbatches, got {got}"
            )
    sizes = []
    for mb, (microbatch, target) in enumerate(zip(inputs, targets)):
        tensors, _ = _flatten(microbatch, f"inputs[{mb}]")
        target_tensors, _ = _flatten(target, f"targets[{mb}]")
        firsts = {int(t.shape[0]) if t.dim() else 0 for t in tensors + target_tensors}
        if len(firsts) != 1 or 0 in firsts:
            raise InvalidInputError(
                f"microbatch {mb}: its inputs and targets must share a dimension 0 of at least 1 (its samples), "
                f"got shapes {[tuple(t.shape) for t in tensors]} and {[tuple(t.shape) for t in target_tensors]}"
            )
        sizes.append(firsts.pop())
    return sizes
