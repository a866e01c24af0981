"""Models that misbehave on purpose, for ``pipeplan run --model _fault_models:faulty_model``.

The fault comes from the environment so that the parent's validation (which
builds the model once) and rank 0's profiling never trigger it:
``PIPEPLAN_TEST_FAULT=mode:rank:call`` makes the faulty layer of global rank
``rank`` misbehave on its ``call``-th forward, with ``mode`` one of ``raise``,
``sys_exit``, ``os_exit``, ``exit75``, ``kill9`` and ``hang``.
``PIPEPLAN_TEST_MARKER=path`` is touched just before the fault, so a test knows
when the rank is stuck.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["Faulty", "misbehave", "faulty_model"]

FAULT_ENV = "PIPEPLAN_TEST_FAULT"
MARKER_ENV = "PIPEPLAN_TEST_MARKER"


def misbehave(mode: str) -> None:
    """Do what ``mode`` says, in this process."""
    marker = os.environ.get(MARKER_ENV)
    if marker:
        Path(marker).write_text(str(os.getpid()))
    if mode == "raise":
        raise ValueError("boom")
    if mode == "sys_exit":
        sys.exit(1)
    if mode == "os_exit":
        os._exit(1)
    if mode == "exit75":
        os._exit(75)
    if mode == "kill9":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "hang":
        time.sleep(600)
    raise AssertionError(f"unknown fault mode {mode!r}")


class Faulty(nn.Module):
    """A linear layer that calls :func:`misbehave` on its ``fail_at``-th forward (counting from 0)."""

    def __init__(self, mode: str, fail_at: int, width: int = 4) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.mode = mode
        self.fail_at = fail_at
        self.calls = 0

    def forward(self, x: Any) -> Any:
        if self.mode and self.calls == self.fail_at:
            misbehave(self.mode)
        self.calls += 1
        return self.linear(x)


def faulty_model() -> tuple[Any, Any, Any]:
    """Four linear layers; the one of stage 1 (with two even stages) misbehaves as ``$PIPEPLAN_TEST_FAULT`` says."""
    mode, rank, call = (os.environ.get(FAULT_ENV, "::").split(":") + ["", "", ""])[:3]
    here = os.environ.get("RANK") == rank
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), Faulty(mode if here else "", int(call or 0)), nn.Tanh())

    def make_batch(batch_size: int, seed: int = 0) -> tuple[Any, Any]:
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(batch_size, 4, generator=generator), torch.randn(batch_size, 4, generator=generator)

    return model, nn.functional.mse_loss, make_batch
