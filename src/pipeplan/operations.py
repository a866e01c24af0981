"""The operations a layer's pass is made of: GEMMs, attention and memory-bound kernels.

An :class:`Op` is one GPU kernel (or a fused group) as a cost model sees it: its
kind, the FLOPs it performs, the bytes it moves to and from device memory and,
for a GEMM, its shape. :mod:`pipeplan.models` lists the ops of every layer's
forward (F), input-gradient (B) and weight-gradient (W) pass;
:meth:`pipeplan.hardware.Device.op_milliseconds` turns one into time::

    >>> from pipeplan.operations import gemm, memory
    >>> op = gemm("fc1", m=6144, n=9216, k=2304)
    >>> op.flops, op.bytes
    (260919263232.0, 184811520.0)
    >>> memory("gelu", read=6144 * 9216 * 2, written=6144 * 9216 * 2).bytes
    226492416.0

Units: FLOPs (a multiply-add counts 2), bytes. A GEMM ``m × k`` by ``k × n``
(``batch`` times) performs ``2·batch·m·n·k`` FLOPs and moves its two inputs and
its output once at ``dtype_bytes`` each — the least traffic a tiled kernel can
have. Attention ops are FlashAttention-style fused kernels (scores never reach
memory); ``causal`` says half the score blocks are skipped (the FLOPs recorded
stay the full ``4·s²·d`` per head, the convention of Narayanan et al. 2021).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["HALF", "Op", "OpKind", "attention", "gemm", "memory", "total_bytes", "total_flops"]

OpKind = Literal["gemm", "attention", "memory"]

#: Bytes of one 16-bit element (bf16 / fp16 activations and weights).
HALF = 2


@dataclass(frozen=True, slots=True)
class Op:
    """One kernel of a layer's pass.

    Attributes:
        name: what it computes (``"qkv"``, ``"fc1.dgrad"``, ``"softmax"``).
        kind: ``"gemm"``, ``"attention"`` (a fused flash kernel) or ``"memory"``.
        flops: FLOPs performed (multiply-add = 2); 0 for pure data movement.
        bytes: bytes read plus bytes written in device memory.
        m, n, k: a GEMM's shape (``m × k`` times ``k × n``); 0 otherwise.
        batch: independent GEMMs of that shape in one launch (batched GEMM), or
            attention (batch × heads) problems.
        causal: attention with a causal mask (the kernel skips half the work).
        random: a memory-bound kernel that draws random numbers (a dropout mask),
            which reaches a lower bandwidth than plain elementwise kernels.
    """

    name: str
    kind: OpKind
    flops: float
    bytes: float
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    causal: bool = False
    random: bool = False


def gemm(name: str, *, m: int, n: int, k: int, batch: int = 1, dtype_bytes: int = HALF,
         extra_bytes: float = 0.0) -> Op:
    """A (batched) GEMM ``C[m, n] = A[m, k] · B[k, n]``; ``extra_bytes`` for a fused epilogue."""
    flops = 2.0 * batch * m * n * k
    moved = float(batch) * dtype_bytes * (m * k + k * n + m * n) + extra_bytes
    return Op(name, "gemm", flops, moved, m, n, k, batch)


def attention(name: str, *, flops: float, bytes: float, queries: int, keys: int, head_dim: int,
              problems: int, causal: bool) -> Op:
    """A fused attention kernel: ``problems`` (batch × heads) of ``queries × keys × head_dim``."""
    return Op(name, "attention", float(flops), float(bytes), queries, keys, head_dim, problems, causal)


def memory(name: str, *, read: float, written: float, flops: float = 0.0, random: bool = False) -> Op:
    """A memory-bound kernel (norm, activation, dropout, softmax, copy, reduction); ``random``: draws a mask."""
    return Op(name, "memory", float(flops), float(read) + float(written), random=random)


def total_flops(ops: tuple[Op, ...] | list[Op]) -> float:
    """Sum of the ops' FLOPs."""
    return float(sum(op.flops for op in ops))


def total_bytes(ops: tuple[Op, ...] | list[Op]) -> float:
    """Sum of the ops' bytes."""
    return float(sum(op.bytes for op in ops))
