"""Models to pipeline: the built-in VLA-shaped network and loading a user's own.

    from pipeplan.models import load_model, split_sequential
    model, loss_fn, make_batch = load_model("pipeplan.models.vla:build_default_model")
    stages = split_sequential(model, [3, 4, 3])

A model factory is any callable that returns ``(model, loss_fn, make_batch)``:
``model`` an ``nn.Sequential`` whose top-level children each take and return one
tensor, ``loss_fn(output, target)`` the batch-mean loss, and
``make_batch(batch_size, seed=0)`` a function returning ``(inputs, targets)``.

The torch modules load on first use, so ``pipeplan.models.spec`` (model shapes,
torch-free) imports without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BUILTIN_MODELS", "DEFAULT_MODEL", "build_default_model", "build_dumbbell_model", "load_model",
           "split_sequential"]

DEFAULT_MODEL = "pipeplan.models.vla:build_default_model"

#: Built-in models by short name (``--model vla``, ``--model dumbbell``); each takes ``num_layers``.
BUILTIN_MODELS = {
    "vla": DEFAULT_MODEL,
    "dumbbell": "pipeplan.models.vla:build_dumbbell_model",
}

_LAZY = {"build_default_model": ".vla", "build_dumbbell_model": ".vla", "load_model": ".loading",
         "split_sequential": ".loading"}


def __getattr__(name: str) -> Any:
    """Import the torch-backed names on first access."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
