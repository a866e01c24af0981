"""A fake clock that advances only while chosen modules run: timing tests without timing.

    from _work_clock import WorkClock
    clock = WorkClock()
    layer = clock.busy(nn.Linear(4, 4), forward_ms=3.0)   # forward 3 ms, backward 6 ms on ``clock``

Pass ``clock`` as the ``timer`` of a measuring function: what it reports is then
exact (the ms each wrapped module was charged), so a test can check that time is
read around the right work without depending on the machine's speed or load.
How fast real work measures is the benchmarks' job (benchmarks/fidelity.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class WorkClock:
    """A timer (seconds) that moves only when a :meth:`busy` module's forward or backward runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def busy(self, module: nn.Module, *, forward_ms: float) -> nn.Module:
        """``module``, charging ``forward_ms`` per forward and twice that per backward to this clock."""
        return _Busy(module, self, forward_ms)


class _Busy(nn.Module):
    def __init__(self, module: nn.Module, clock: WorkClock, forward_ms: float) -> None:
        super().__init__()
        self.inner = module
        self.clock = clock
        self.forward_ms = forward_ms

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.now += self.forward_ms / 1e3
        return _ChargeBackward.apply(self.inner(x), self.clock, 2 * self.forward_ms / 1e3)


class _ChargeBackward(torch.autograd.Function):
    """Identity forward; its backward advances the clock by ``seconds``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, clock: WorkClock, seconds: float) -> torch.Tensor:
        ctx.clock, ctx.seconds = clock, seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        ctx.clock.now += ctx.seconds
        return grad, None, None
